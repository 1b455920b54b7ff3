"""Whether the server holds data, what a node tells it about its own in the handshake, and
the server's check.

``server-data`` (declared here) says whether the ServerApp loads a data set; by default it does
not with site-owned data (``partitioner='site'``).

When the server holds no data (``server-data``), or the nodes hold their own
(``partitioner='site'``), the server learns the model's input shape, the number of classes and
the label table from the nodes: each node's handshake reply carries a ``data`` record
(``num-classes``, ``input-shape``, ``label-counts`` per class (its row of the label table),
``train-examples`` and ``test-examples``: the sizes of its local splits) and a
``data-source`` record (the folder it read). Counts and shapes only: no sample leaves a node.

The server (``agree``) keeps the nodes that agree on (input shape, number of classes) when
they are a strict majority of the nodes that reported; every other node, and every node whose
data could not be read, is left out of the run, with a reason naming the node, its folder or
file and what differs, so that the others' work goes on. Without a strict majority the run
stops, naming each group.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from ..settings import ConfigError, RunConfig, Setting
from .federation import SITE, load_splits
from .options import parse_input_shape

SETTINGS = (
    Setting(
        "server-data",
        "auto",
        "`auto`: the server loads the run's data set (its held-out test split evaluates the"
        " global model) unless `partitioner='site'`; `none`: the server loads no data: the"
        " nodes report input shape, classes and label counts in the handshake, and the"
        " history's accuracy is the federated evaluation (`federated_accuracy`: the"
        " sample-weighted mean over the clients' local test splits); `own`: the server loads"
        " the run's data set from the run-config `data-dir` on its own machine (with"
        " `partitioner='site'`: its own folder, in a site's format)",
        choices=("auto", "none", "own"),
    ),
)

REPORT = "data"  # the handshake reply's MetricRecord of counts and shapes
SOURCE = "data-source"  # its ConfigRecord naming the folder the node read
CLASS_NAMES, POSITIVE_CLASS = "class-names", "positive-class"  # in SOURCE: a site's manifest


class NodeDataError(ValueError):
    """A node cannot use its data: the message names the node's partition id and the file."""


def server_has_data(config: RunConfig) -> bool:
    """Whether the ServerApp loads data (``server-data``): by default not with site-owned data."""
    if config.server_data == "auto":
        return config.partitioner != SITE
    return config.server_data == "own"


def data_shape(config: RunConfig) -> tuple[tuple[int, ...], int]:
    """The input shape of one sample and the number of classes, for models built on the
    server: from its data set, or, on a server without data, from the run config, which
    ``runtime.context.start_run`` completes with what the nodes agreed on in the handshake."""
    if server_has_data(config):
        data = load_splits(config)
        return data.input_shape, data.num_classes
    return parse_input_shape(config.input_shape), config.num_classes


def nodes_report_data(config: RunConfig) -> bool:
    """Whether the handshake asks the nodes about their data (see the module docstring)."""
    return config.partitioner == SITE or not server_has_data(config)


def data_report(
    table_labels: np.ndarray,
    input_shape: tuple[int, ...],
    num_classes: int,
    source: str,
    split_sizes: tuple[int, int],
    class_names: tuple[str, ...] | None = None,
    positive_class: int | None = None,
) -> dict[str, MetricRecord | ConfigRecord]:
    """A node's handshake records (client half); ``table_labels``: what its row of the label
    table counts (``federation.table_labels``); ``split_sizes``: its local training and test
    samples (the server's bound on the ``num-examples`` of its replies); ``class_names`` and
    ``positive_class``: its manifest's (``site_data.read_manifest``), if it has one."""
    counts = np.bincount(table_labels, minlength=num_classes)
    source_record = ConfigRecord({"path": source})
    if class_names:
        source_record[CLASS_NAMES] = list(class_names)
    if positive_class is not None:
        source_record[POSITIVE_CLASS] = int(positive_class)
    return {
        REPORT: MetricRecord(
            {
                "num-classes": int(num_classes),
                "input-shape": [int(size) for size in input_shape],
                "label-counts": [int(count) for count in counts],
                "train-examples": int(split_sizes[0]),
                "test-examples": int(split_sizes[1]),
            }
        ),
        SOURCE: source_record,
    }


@dataclass(frozen=True)
class NodeData:
    """One node's report, as the server reads it."""

    node_id: int
    partition_id: int
    num_classes: int
    input_shape: tuple[int, ...]
    label_counts: tuple[int, ...]
    source: str
    train_examples: int  # its local training and test splits
    test_examples: int
    class_names: tuple[str, ...] = ()  # its manifest's (empty: none)
    positive_class: int | None = None

    @classmethod
    def from_reply(cls, node_id: int, partition_id: int, content: RecordDict) -> NodeData:
        """The report of a handshake reply; ``ValueError`` (or ``KeyError``, ``TypeError``)
        when it is malformed: a node's report is untrusted input."""
        report = content.metric_records[REPORT]
        source = content.config_records[SOURCE]
        data = cls(
            node_id=node_id,
            partition_id=partition_id,
            num_classes=int(report["num-classes"]),
            input_shape=tuple(int(size) for size in report["input-shape"]),
            label_counts=tuple(int(count) for count in report["label-counts"]),
            source=str(source["path"]),
            train_examples=int(report["train-examples"]),
            test_examples=int(report["test-examples"]),
            class_names=tuple(str(n) for n in source.get(CLASS_NAMES, [])),
            positive_class=(
                int(source[POSITIVE_CLASS]) if source.get(POSITIVE_CLASS) is not None else None
            ),
        )
        if data.class_names and len(data.class_names) != data.num_classes:
            raise ValueError(f"{len(data.class_names)} class names for {data.num_classes} classes")
        if data.positive_class is not None and not 0 <= data.positive_class < data.num_classes:
            raise ValueError(f"positive class {data.positive_class} of {data.num_classes}")
        if data.num_classes < 1 or len(data.label_counts) != data.num_classes:
            raise ValueError(
                f"{len(data.label_counts)} label counts for {data.num_classes} classes"
            )
        if min(data.label_counts) < 0 or min(data.train_examples, data.test_examples) < 0:
            raise ValueError("negative label counts or split sizes")
        if not data.input_shape or min(data.input_shape) < 1:
            raise ValueError(f"input shape {data.input_shape} is empty or has a zero size")
        return data

    @property
    def signature(self) -> tuple:
        """What the nodes must agree on: input shape, classes, and their manifest's names and
        positive class (a site that names its classes otherwise is another task)."""
        return self.input_shape, self.num_classes, self.class_names, self.positive_class

    def data_text(self) -> str:
        """Its data as the signature sees it: "input shape (1, 8, 8), 10 classes"."""
        text = f"input shape {self.input_shape}, {self.num_classes} classes"
        if self.class_names:
            text += f" named {', '.join(self.class_names)}"
        if self.positive_class is not None:
            text += f", positive class {self.positive_class}"
        return text

    def describe(self) -> str:
        return (
            f"node {self.node_id} (partition-id {self.partition_id}, {self.source}):"
            f" {self.data_text()}"
        )


@dataclass
class Agreement:
    """What the nodes agree on, who takes part, and who is left out (node id -> reason)."""

    input_shape: tuple[int, ...]
    num_classes: int
    nodes: list[NodeData]
    left_out: dict[int, str] = field(default_factory=dict)
    class_names: tuple[str, ...] = ()  # the nodes' manifest (site_data.read_manifest), if any
    positive_class: int | None = None

    def label_table(self, num_partitions: int) -> np.ndarray:
        """Training samples per (partition id, class); zeros for partitions not taking part."""
        table = np.zeros((num_partitions, self.num_classes), dtype=np.int64)
        for node in self.nodes:
            table[node.partition_id] = node.label_counts
        return table


def agree(reports: list[NodeData], failures: dict[int, str]) -> Agreement:
    """The majority's input shape and classes (module docstring); ``failures``: node id -> why
    the node could not report (its error reply), each left out."""
    left_out = {node: f"its data could not be read: {reason}" for node, reason in failures.items()}
    if not reports:
        reasons = "; ".join(f"node {n}: {r}" for n, r in failures.items()) or "no node answered"
        raise ConfigError(f"no node could report usable data ({reasons})")
    groups = Counter(report.signature for report in reports)
    signature, size = groups.most_common(1)[0]
    if 2 * size <= len(reports):  # not a strict majority
        listing = "; ".join(
            ", ".join(r.describe() for r in reports if r.signature == group) for group in groups
        )
        raise ConfigError(
            "the nodes' data disagree on input shape, number of classes or class manifest, and"
            " no group is a"
            f" majority: {listing}. Give every site the same classes and image size (or set"
            " num-classes / input-shape in the run config)"
        )
    shape, num_classes, names, positive = signature
    majority = next(report for report in reports if report.signature == signature)
    for report in reports:
        if report.signature != signature:
            left_out[report.node_id] = (
                f"{report.describe()}, but the other {size} node(s) have {majority.data_text()}"
            )
    taking_part = [report for report in reports if report.signature == signature]
    return Agreement(shape, num_classes, taking_part, left_out, names, positive)
