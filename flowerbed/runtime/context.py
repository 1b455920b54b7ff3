"""The run context every phase of a protocol shares, and how a run starts.

``start_run`` does, in this order, so that bad input fails before any client trains:

0. run each concern's look at this machine (``settings.Concern.check_machine``; the catalog
   lists them): the chosen trackers' packages are installed (``runtime.trackers``), the memory
   per process and the cache's disk fit (``runtime.preflight``); with ``resume`` set, check
   the run folder to resume (``runtime.resume``): nothing is written before it passes;
1. load the data set (a missing file stops here, naming the path) and build the protocol's
   global model once, seeded (a model that does not fit the data stops here); a server
   without data (``server-data``) does this after step 2, with what the nodes reported;
2. handshake with the nodes: each reports its partition id and the number of partitions
   (``handshake='lazy'``: one node does, for large federations; with ``virtual-clients`` = N
   every node is asked and they carry the run's N clients); the partition (more clients
   than samples, impossible minimum sizes...) and each concern's check of the federation
   (``Concern.check_federation``: partition ids that do not exist, the memory the federation
   sizes) run; the partition is computed and its label-count table logged
   (the first rows) and saved. With site-owned data or a server without data the nodes also
   report their data's shape, classes and label counts (``data.site_reports``): the label
   table is theirs, and nodes that cannot read their data or disagree with the majority are
   left out of the run;
3. make the run folder, write ``config.json`` (the effective values, with a random ``run-id``,
   the run's identity, and ``protocol-defaults`` naming the keys that took the protocol's own
   defaults, if any) and the partition table (a resumed run goes on in its own folder, whose
   files stay as they are, once the federation's size is checked), and take the folder's lock
   (``runtime.run_lock``: a live run holding a folder to resume stops the run here);
4. seed Python's ``random`` (Flower samples clients with it) and torch for what follows, and
   open the trackers (live curves; one that cannot start is warned about, never fatal).

The ServerApp side never reads a client's partition: it computes the label-count table from
the partition function every node applies to the same data set, or takes the nodes' counts.
"""

from __future__ import annotations

import functools
import random
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from logging import INFO, WARNING
from pathlib import Path

import torch
from flwr.common.logger import log
from flwr.serverapp import Grid

from ..core.results import make_run_dir, write_json, write_partition_table
from ..data import DatasetSplits, label_counts
from ..data.classes import CLASSES_FILE, run_classes
from ..data.federation import load_splits, partition_for, split_sizes
from ..data.partition import format_label_table
from ..data.site_reports import (
    Agreement,
    NodeData,
    agree,
    data_shape,
    nodes_report_data,
    server_has_data,
)
from ..models import Classifier
from ..settings import Concern, ConfigError, RunConfig, Setting
from ..trust.reply_checks import NodeSizes
from .checkpoint import ServerCheckpoint
from .environment import write_environment
from .history import History
from .outcome import RunFailed
from .recording_grid import RecordingGrid
from .resume import (
    FEDERATION_KEY,
    PROTOCOL_DEFAULTS_KEY,
    RUN_ID_KEY,
    handshake_wanted_nodes,
    hold_run_folder,
    new_run_id,
    open_resume,
)
from .run_lock import RunLock
from .trackers import open_trackers

# A run folder is named ``<YYYYmmdd-HHMMSS>-<run-name>[-<n>]`` (``results.make_run_dir``: 16
# bytes of timestamp, up to 4 of suffix); a file name must stay under 255 bytes.
MAX_RUN_NAME_BYTES = 255 - len("20250101-120000-") - len("-999")


def default_run_name(config: RunConfig) -> str:
    return f"{config['strategy']}-{config['dataset']}-seed{config['seed']}"


def run_name_error(value: str, config: RunConfig) -> str | None:
    """Why ``run-name`` (or, when empty, the default name it stands for) cannot name a folder
    inside ``output-dir``, or ``None``: it must be one folder name (no separator, not ``.`` or
    ``..``), printable and short enough for the run folder's prefix."""
    valid = (
        "one folder name: no '/' or '\\', not '.' or '..', no control characters, at most"
        f" {MAX_RUN_NAME_BYTES} bytes in UTF-8"
    )
    named_by = ("strategy", "dataset", "seed")
    name = value or (default_run_name(config) if all(k in config for k in named_by) else "")
    if not name:
        return None
    if "/" in name or "\\" in name:
        problem = "holds a path separator"
    elif name in (".", ".."):
        problem = "is a relative folder reference"
    elif any(unicodedata.category(char) == "Cc" for char in name):
        problem = "holds a control character"
    elif len(name.encode("utf-8", "surrogatepass")) > MAX_RUN_NAME_BYTES:
        problem = f"is {len(name.encode('utf-8', 'surrogatepass'))} bytes long"
    else:
        return None
    given = f"run-name={value!r}" if value else f"run-name='' (the default name {name!r})"
    return f"{given} {problem}; valid: {valid}"


SETTINGS = (
    Setting("num-server-rounds", 5, "federated rounds", low=1),
    Setting(
        "fraction-train",
        1.0,
        "fraction of clients sampled for training each round",
        low=0,
        high=1,
        low_open=True,
    ),
    Setting(
        "fraction-evaluate",
        1.0,
        "fraction of clients sampled for local evaluation",
        low=0,
        high=1,
    ),
    Setting(
        "min-available-clients", 2, "wait for this many connected nodes before starting", low=1
    ),
    Setting(
        "seed", 42, "seeds partitions, initial model, client sampling and local shuffling", low=0
    ),
    Setting("output-dir", "~/.flowerbed/runs", "results root; each run gets its own folder"),
    Setting(
        "run-name",
        "",
        "folder name suffix (default `<strategy>-<dataset>-seed<seed>`): one folder name, no"
        f" `/` or `\\`, not `.` or `..`, no control characters, at most {MAX_RUN_NAME_BYTES}"
        " bytes (UTF-8)",
        check=run_name_error,
    ),
    Setting(
        "round-timeout",
        3600.0,
        "seconds to wait for client replies in a round",
        low=0,
        low_open=True,
    ),
    Setting(
        "wait-timeout",
        300.0,
        "seconds to wait for `min-available-clients` nodes to connect (progress is logged every"
        " 30 s); then the run fails",
        low=0,
        low_open=True,
    ),
    Setting(
        "handshake",
        "all",
        "`all`: before round 1 every node reports its partition id, so client sampling is"
        " reproducible from `seed`; `lazy`: one node is asked (for the number of partitions),"
        " the others' partition ids are learnt from their replies, and client sampling follows"
        " Flower's random node ids (not reproducible). Flower's simulation engine checks every"
        " pending message for every node, so asking all N nodes costs about N^2 checks: a"
        " simulation of many clients uses `virtual-clients` instead (reproducible); `lazy` is"
        " for thousands of real SuperNodes (see `benchmarks/scale.py`)",
        choices=("all", "lazy"),
    ),
    Setting(
        "max-failed-rounds",
        0,
        "rounds in which no client succeeded that a run survives; one more fails it",
        low=0,
    ),
)

LOGGED_TABLE_ROWS = 50  # clients of the label table in the log; partitions.csv has them all
ModelBuilder = Callable[[RunConfig, tuple[int, ...], int], Classifier]


@dataclass
class RunContext:
    """What every phase of a protocol shares (see ``flowerbed.protocols.phase``)."""

    config: RunConfig
    data: DatasetSplits | None  # None: the server holds no data (``server-data``)
    grid: RecordingGrid
    model: Classifier  # the protocol's global model: initial, evaluated, saved
    num_partitions: int
    run_dir: Path
    history: History
    checkpoint: ServerCheckpoint | None = None  # a resumed run's last checkpoint
    lock: RunLock | None = None  # this run's hold on run_dir, released when the run ends
    ended_early: str = ""  # why a completed run stopped before its last round (a DP budget)
    classes: dict = field(default_factory=dict)  # classes.json: names and positive class

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Of one sample: the server's data's, or what the nodes agreed on (``data_shape``)."""
        return data_shape(self.config)[0]

    @property
    def num_classes(self) -> int:
        return data_shape(self.config)[1]


def federation_size(nodes: dict[int, tuple[int, int]]) -> tuple[int, dict[int, str]]:
    """The number of partitions the nodes agree on (a strict majority of them), and the nodes
    left out (node id -> why): those reporting another number, a partition id outside the
    range, or a partition id another node reports too (which of them holds it cannot be told).
    A clear error when no majority or no node is left."""
    if not nodes:
        raise ConfigError("no node answered the handshake: is any SuperNode connected?")
    sizes = Counter(num for _, num in nodes.values())
    num_partitions, agreeing = sizes.most_common(1)[0]
    if 2 * agreeing <= len(nodes) and len(sizes) > 1:
        raise ConfigError(f"nodes disagree on num-partitions: {sorted(sizes)}")
    claims = Counter(pid for pid, num in nodes.values() if num == num_partitions)
    left_out = {}
    for node, (pid, num) in sorted(nodes.items()):
        if num != num_partitions:
            left_out[node] = (
                f"it reports num-partitions={num}, the other {agreeing} node(s) {num_partitions}"
            )
        elif not 0 <= pid < num_partitions:
            left_out[node] = f"its partition-id {pid} is not in [0, {num_partitions})"
        elif claims[pid] > 1:
            left_out[node] = f"another node reports partition-id {pid} too"
    if len(left_out) == len(nodes):
        raise ConfigError(
            f"no node holds a valid partition ({'; '.join(left_out.values())}); check each"
            " SuperNode's --node-config"
        )
    return num_partitions, left_out


def start_run(
    grid: Grid, config: RunConfig, build_model: ModelBuilder, concerns: Sequence[Concern]
) -> RunContext:
    """Steps 0-4 of the module docstring; returns the context the protocol runs in.
    ``concerns``: the run's concerns (``catalog.CONCERNS``), whose ``check_machine`` runs before
    anything is loaded and ``check_federation`` once the handshake has counted the partitions."""
    for concern in concerns:
        if concern.check_machine is not None:
            concern.check_machine(config)
    resumed = open_resume(config) if config.resume else None
    data = None
    if server_has_data(config):
        log(INFO, "flowerbed: loading %s (the test set and the model)", config.dataset)
        data = load_splits(config)
        model = initial_model(config, build_model, data.input_shape, data.num_classes)

    log(INFO, "flowerbed: asking the connected nodes for their partition (the handshake)")
    recording = RecordingGrid(grid)
    try:
        nodes = recording.handshake(  # virtual clients: the SuperNodes that carry them
            1 if config.virtual_clients else config.min_available_clients,
            config.wait_timeout,
            config.round_timeout,
            ask_all=config.handshake == "all" or bool(config.virtual_clients),
            wanted=0 if config.virtual_clients else handshake_wanted_nodes(resumed),
        )
    except TimeoutError as error:
        raise RunFailed(str(error)) from None
    num_partitions, strays = federation_size(nodes)
    recording.leave_out(strays)
    if config.virtual_clients:  # the nodes carry the run's clients (runtime.virtual_clients)
        num_partitions = config.virtual_clients
        recording.act_as_clients(num_partitions)
    recording.num_partitions = num_partitions
    if resumed is not None and resumed.stored_config.get(FEDERATION_KEY) != num_partitions:
        raise ConfigError(
            f"resume={str(config.resume)!r}: the run had"
            f" {resumed.stored_config.get(FEDERATION_KEY)}"
            f" partitions, this federation has {num_partitions}; resume with the run's clients"
        )
    for concern in concerns:  # ids that name no partition, sizes the federation sets, ...
        if concern.check_federation is not None:
            concern.check_federation(config, num_partitions)
    server_view = {}  # run-config values the phases see instead of the given ones
    if nodes_report_data(config):
        agreement = agree_on_node_data(recording, config, data)
        input_shape, num_classes = agreement.input_shape, agreement.num_classes
        counts = agreement.label_table(num_partitions)
        if data is None:  # ``data_shape``: the shape and classes agreed
            model = initial_model(config, build_model, input_shape, num_classes)
            server_view.update(input_shape=",".join(map(str, input_shape)), num_classes=num_classes)
        sizes = {
            node.partition_id: NodeSizes(node.train_examples, node.test_examples)
            for node in agreement.nodes
        }
        recording.partition_sizes = sizes.get
    else:
        counts = label_counts(
            data.y_train.numpy(), partition_of(config, data, num_partitions), data.num_classes
        )
        recording.partition_sizes = functools.lru_cache(maxsize=None)(
            lambda partition: NodeSizes(*split_sizes(config, num_partitions, partition))
        )
    taking_part = len(recording.partition_of)
    if recording.left_out and taking_part < config.min_available_clients:  # the strategy's
        log(  # sampling would wait for nodes that never come
            WARNING,
            "flowerbed: %d nodes take part after %d were left out; min-available-clients"
            " lowered from %d to %d for this run",
            taking_part,
            len(recording.left_out),
            config.min_available_clients,
            taking_part,
        )
        server_view.update(min_available_clients=taking_part)
    log(
        INFO,
        "flowerbed: %s, %d clients, %s partition; label counts per client:\n%s",
        config.dataset,
        num_partitions,
        config.partitioner,
        format_label_table(counts, max_rows=LOGGED_TABLE_ROWS),
    )

    declared = (  # what the data says of its classes: a site's manifest
        (agreement.class_names, agreement.positive_class)
        if nodes_report_data(config)
        else (data.class_names, data.positive_class)
    )
    classes = run_classes(config, len(counts[0]), *declared)  # a bad positive-class stops here
    recording.positive_class = classes["positive"]  # the per-site table's (history)
    config_record = {**config.to_dict(), FEDERATION_KEY: num_partitions}
    if config.protocol_defaults:  # the effective values are above; which came from the protocol
        config_record[PROTOCOL_DEFAULTS_KEY] = ", ".join(config.protocol_defaults)
    if resumed is None:
        run_dir = new_run_dir(config)
        config_record[RUN_ID_KEY] = new_run_id()
        write_json(run_dir / "config.json", config_record)
        write_environment(run_dir)  # environment.json: versions and machine
        write_partition_table(run_dir, counts)
        write_json(run_dir / CLASSES_FILE, classes)
        log(INFO, "flowerbed: results go to %s", run_dir)
    else:
        run_dir = resumed.folder
        log(INFO, "flowerbed: results go to %s (a resumed run)", run_dir)
    lock = hold_run_folder(run_dir, resumed)  # before the status: a live holder stops here

    random.seed(config.seed)  # Flower samples clients with Python's random
    torch.manual_seed(config.seed)
    trackers = open_trackers(config, run_dir, config_record)
    history = History(run_dir, config.max_failed_rounds, trackers)
    checkpoint = resumed.checkpoint if resumed is not None else None
    return RunContext(
        config.replace(**server_view),
        data,
        recording,
        model,
        num_partitions,
        run_dir,
        history,
        checkpoint,
        lock,
        classes=classes,
    )


def initial_model(
    config: RunConfig, build_model: ModelBuilder, input_shape: tuple[int, ...], num_classes: int
) -> Classifier:
    """The protocol's global model, a function of the seed; one that does not fit the data
    stops the run here."""
    torch.manual_seed(config.seed)
    try:
        return build_model(config, input_shape, num_classes)
    except ValueError as error:
        raise ConfigError(
            f"model={config.model!r} on dataset={config.dataset!r}: {error}"
        ) from error


def partition_of(config: RunConfig, data: DatasetSplits, num_partitions: int) -> list:
    """The clients' partition (``data.federation.partition_for``) with its errors as one line."""
    try:
        return partition_for(config, num_partitions)
    except ConfigError:  # names its own key (server-fraction)
        raise
    except ValueError as error:  # more clients than samples, impossible minimum sizes...
        held = (
            f" (after server-fraction={config.server_fraction} took the server's share of the"
            f" {len(data.y_train)} training samples: lower it, or use fewer clients)"
            if config.server_fraction > 0
            else ""
        )
        raise ConfigError(f"partitioner={config.partitioner!r}: {error}{held}") from error


def agree_on_node_data(
    grid: RecordingGrid, config: RunConfig, data: DatasetSplits | None
) -> Agreement:
    """The nodes' data reports checked (``data.site_reports.agree``): the nodes left out are
    logged and never sampled; when the server has data of its own, the rest must match it."""
    reports, failures = [], dict(grid.handshake_failures)
    for node, content in sorted(grid.handshake_replies.items()):
        if node in grid.partition_of:
            try:
                reports.append(NodeData.from_reply(node, grid.partition_of[node], content))
            except (KeyError, TypeError, ValueError) as error:  # a malformed report
                failures[node] = f"malformed data report ({type(error).__name__}: {error})"
    agreement = agree(reports, failures)
    grid.leave_out(agreement.left_out)
    if data is not None and (data.input_shape, data.num_classes) != (
        agreement.input_shape,
        agreement.num_classes,
    ):
        raise ConfigError(
            f"the server's data (data-dir={config.data_dir!r}) have input shape"
            f" {data.input_shape} and {data.num_classes} classes, the nodes' {agreement.input_shape}"
            f" and {agreement.num_classes}; give the server data like the sites' or set"
            " server-data='none'"
        )
    return agreement


def new_run_dir(config: RunConfig) -> Path:
    """A new folder for the run under ``output-dir`` (``results.make_run_dir``)."""
    name = config.run_name or default_run_name(config)  # checked: ``run_name_error``
    try:
        return make_run_dir(config.output_path, name)
    except OSError as error:
        raise ConfigError(
            f"output-dir={config.output_dir!r}: cannot make a run folder in {config.output_path}"
            f" ({error.strerror or error}); choose a writable folder"
        ) from None
