"""Every reply a client sends is untrusted input: what it must look like before any strategy
sees it.

The recording grid (``runtime.recording_grid``) checks each reply with ``check_reply`` against
the message the server sent and the rules of that message type (``ReplyRules``, declared by
the phase that sends it: ``Phase.reply_rules``). A reply passes when:

* **arrays**: every array decodes; with declared ``arrays`` (FL rounds: a training reply holds
  the model the server sent, same keys, shapes and dtypes, plus what the algorithm declares,
  such as SCAFFOLD's control-variate deltas) the reply holds exactly those records, keys,
  shapes and dtypes; otherwise (phases that declare none) a record named like one the server
  sent must match it exactly, and other records are checked for the rest only. Floating-point
  values are finite, and the update (reply - sent, or the values themselves where nothing like
  them was sent) has a finite norm computed in the array's own dtype: 1e38 in a float32 model
  passes the NaN test but squares to Inf, and such an update would overflow the model;
* **metrics**: numbers (int or float), lists of numbers only under the keys the phase
  declares (``list_metrics``, or a list ``Metric``); with declared ``metrics`` the reply holds
  every declared record with every required key, each value of its declared form (``Metric``:
  a number or a list, whole numbers, the list's length, bounds, whether NaN may stand for an
  undefined value); ``num-examples`` a positive integer no larger than the node's
  data as it reported it in the handshake (``examples``: its training split for training
  replies, its test split for evaluation replies); ``partition-id``, where present, the one
  the node answered the handshake with; per-class test counts (``test-class-counts`` and
  ``test-class-correct``, the per-site table's), where present, whole numbers that sum to
  ``num-examples``, with no class predicted right more often than it occurs;
* **configs**: with declared ``configs`` the reply holds those config records with those keys,
  each of its declared type (a QKT upload's ``model`` record names its architecture);
* **the phase's own check** (``check``): what only the phase can judge, knowing the node's
  partition and data sizes (CTL's class counts within the node's training split, a QKT upload
  naming the architecture its partition trains).

Strict by default: every message type a phase sends declares its ``arrays`` (``no_arrays`` for
a reply of metrics only); ``LENIENT`` is left for message types no phase sends (the
handshake's, tests').

A reply that fails becomes an error reply (``REJECTED_ERROR_CODE``) carrying the exact reason,
so that it is counted like a failed client, with its partition and the reason in the round's
``failures`` and in one WARNING line; the round is aggregated from the other replies.

The optional server-side clipping of each client's model update to a norm bound (run-config
``max-update-norm``, ``ReplyRules.max_update_norm``) is ``core.clipping.clip_update``, applied
by the recording grid to replies that passed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Error, Message, RecordDict

from ..evaluation.clinical import TEST_CLASS_CORRECT, TEST_CLASS_COUNTS
from ..settings import ConfigError

REJECTED_ERROR_CODE = 1001  # flowerbed's error code for a reply dropped by these checks

# record name -> key -> (shape, dtype name): the array records a reply must hold
Schema = dict[str, dict[str, tuple[tuple[int, ...], str]]]
# which of a node's sizes bounds a reply's num-examples
TRAIN, TEST, DATA, UNBOUNDED = "train", "test", "data", ""


def schema_of(record: ArrayRecord) -> dict[str, tuple[tuple[int, ...], str]]:
    """The keys, shapes and dtypes of one array record."""
    return {key: (tuple(array.shape), str(array.dtype)) for key, array in record.items()}


def model_like_sent(sent: RecordDict) -> Schema:
    """A training reply of a FedAvg-family strategy: exactly the ``arrays`` the server sent."""
    return {"arrays": schema_of(sent.array_records["arrays"])}


def refuse_without_model_reply(
    what: str, strategy: str, strategies: Mapping[str, Any], also: str = ""
) -> None:
    """``ConfigError`` unless ``strategy`` is one of the FL ``strategies`` (their specs by
    name) whose training reply is the client's trained model: what ``what`` (a key and its
    value, such as ``attack='scale'``) acts on. ``also``: another way out, for the message."""
    valid = ", ".join(name for name, spec in strategies.items() if spec.replies_model)
    spec = strategies.get(strategy)
    if spec is None:
        raise ConfigError(
            f"{what} acts on a client's reply to the `train` messages of FL rounds;"
            f" strategy={strategy!r} sends none (valid strategies: {valid}{also})"
        )
    if not spec.replies_model:
        raise ConfigError(
            f"{what} acts on a reply that is the client's trained model;"
            f" strategy={strategy!r} replies something else (FedNova a normalised"
            f" direction, SCAFFOLD an update and control-variate deltas), so its rule would not"
            f" hold (valid strategies: {valid}{also})"
        )


def no_arrays(sent: RecordDict) -> Schema:
    """A reply that holds metrics only (evaluation, a query answered with numbers): no array
    record at all."""
    return {}


@dataclass(frozen=True)
class Metric:
    """The form of one declared metric: a number, or with ``is_list`` a list of numbers
    (``length`` items where known); ``whole``: whole numbers only; every value within
    [``low``, ``high``]; NaN (an undefined value: a loss before any step, an accuracy on an
    empty split) only where ``nan``; ``required``: the reply must hold it."""

    low: float = -math.inf
    high: float = math.inf
    whole: bool = False
    is_list: bool = False
    length: int | None = None
    nan: bool = False
    required: bool = True

    def problem(self, value) -> str | None:
        """What is wrong with ``value`` (None: nothing)."""
        if isinstance(value, list) != self.is_list:
            return "a list was expected" if self.is_list else "a number was expected"
        values = value if self.is_list else [value]
        if self.length is not None and len(values) != self.length:
            return f"{len(values)} values where {self.length} were expected"
        for item in values:
            if isinstance(item, float) and math.isnan(item):
                if self.whole or not self.nan:
                    return "NaN where a value was expected"
            elif not self.low <= item <= self.high:
                return f"{item!r} is outside [{self.low:g}, {self.high:g}]"
            elif self.whole and (not math.isfinite(item) or item != int(item)):
                return f"{item!r} is not a whole number"
        return None


FRACTION = Metric(low=0, high=1, nan=True)  # an accuracy (NaN: an empty split)
LOSS = Metric(nan=True)  # a training loss (NaN: no step taken)
COUNT = Metric(low=0, whole=True)  # a number of things


def client_metrics(**declared: Metric) -> dict[str, Metric]:
    """A client's ``metrics`` record (``LocalClient.metrics``): ``num-examples`` and
    ``partition-id``, then the phase's own metrics."""
    return {
        "num-examples": Metric(low=1, whole=True),
        "partition-id": Metric(low=0, whole=True),
        **declared,
    }


@dataclass(frozen=True)
class ReplyRules:
    """What the replies to one message type must look like (module docstring).

    ``arrays(sent_content)``: the array records a reply must hold exactly (``no_arrays``:
    none), or ``None`` for the lenient rule (records named like sent ones match them, other
    records are only checked for decoding and finiteness); with ``by_partition`` it is called
    as ``arrays(sent_content, partition)`` (partition None: not known yet), for a schema that
    depends on the node (the architecture a client of ``kt-client-models`` trains).
    ``metrics``: record name -> key -> ``Metric``, the metric records a reply must hold
    (``None``: any). ``configs``: record name -> key -> type, the config records a reply must
    hold (``None``: not checked). ``list_metrics``: other metric keys that may hold lists
    (``None``: any). ``examples``: which of the node's sizes bounds ``num-examples``
    (``TRAIN``, ``TEST``, ``DATA`` = both splits, ``UNBOUNDED``). ``check(reply, sent,
    partition, sizes)``: the phase's own check, raising ``RejectedReply``, after the others.
    ``max_update_norm``: clip each reply's update of the ``arrays`` record to this norm (0 =
    off).
    """

    arrays: Callable[..., Schema] | None = None
    by_partition: bool = False
    metrics: Mapping[str, Mapping[str, Metric]] | None = None
    configs: Mapping[str, Mapping[str, type]] | None = None
    list_metrics: frozenset[str] | None = None
    examples: str = DATA
    check: NodeCheck | None = field(default=None, compare=False)
    max_update_norm: float = 0.0


LENIENT = ReplyRules()  # the message types no phase declared


@dataclass(frozen=True)
class NodeSizes:
    """A node's data as it reported it in the handshake: training and test samples."""

    train: int
    test: int

    def bound(self, examples: str) -> int | None:
        return {TRAIN: self.train, TEST: self.test, DATA: self.train + self.test}.get(examples)


# A phase's own check: (reply, sent, partition, sizes), the node as the grid knows it (None:
# unknown); raises ``RejectedReply``.
NodeCheck = Callable[[RecordDict, RecordDict, int | None, NodeSizes | None], None]


class RejectedReply(ValueError):
    """A reply that fails a check; the message is the reason, one line."""


def check_reply(
    reply: RecordDict,
    sent: RecordDict,
    rules: ReplyRules,
    sizes: NodeSizes | None,
    partition: int | None,
    decoded_sent: dict | None = None,
) -> None:
    """Raise ``RejectedReply`` naming the first thing wrong with ``reply`` (module docstring).

    ``sizes``: the node's data (None: unknown, no upper bound on num-examples); ``partition``:
    the partition the node holds (None: not known yet); ``decoded_sent``: a dict kept across
    the replies to one send, so that the arrays the server sent to every node (one record) are
    decoded once.
    """
    expected = None
    if rules.arrays is not None:
        expected = rules.arrays(sent, partition) if rules.by_partition else rules.arrays(sent)
    _check_arrays(reply, sent, expected, {} if decoded_sent is None else decoded_sent)
    for name, declared in (rules.metrics or {}).items():
        _check_declared(name, reply.metric_records.get(name), declared)
    for name, record in reply.metric_records.items():
        _check_metrics(name, record, rules, sizes, partition)
    for name, keys in (rules.configs or {}).items():
        _check_config(name, reply.config_records.get(name), keys)
    if rules.check is not None:
        rules.check(reply, sent, partition, sizes)


def _decoded(name: str, record: ArrayRecord) -> dict[str, np.ndarray]:
    out = {}
    for key, array in record.items():
        try:
            out[key] = array.numpy()
        except Exception as error:  # noqa: BLE001 - any undecodable payload is the sender's fault
            raise RejectedReply(
                f"{name}/{key} cannot be decoded as a {array.dtype} array of shape"
                f" {tuple(array.shape)} ({type(error).__name__})"
            ) from None
    return out


def _check_schema(name: str, got: dict[str, np.ndarray], expected: Mapping) -> None:
    missing = [key for key in expected if key not in got]
    extra = [key for key in got if key not in expected]
    if missing or extra:
        raise RejectedReply(
            f"{name} has keys that do not match the model's: missing {missing[:3]},"
            f" unexpected {extra[:3]}"
        )
    for key, values in got.items():
        shape, dtype = expected[key]
        if tuple(values.shape) != tuple(shape) or str(values.dtype) != dtype:
            raise RejectedReply(
                f"{name}/{key} is {tuple(values.shape)} {values.dtype}, expected {tuple(shape)}"
                f" {dtype}"
            )


def _check_arrays(
    reply: RecordDict, sent: RecordDict, expected: Schema | None, cache: dict
) -> None:
    sent_records = sent.array_records
    if expected is not None:
        names = set(reply.array_records)
        if names != set(expected):
            raise RejectedReply(
                f"array records {sorted(names)} where {sorted(expected)} were expected"
            )
    for name, record in reply.array_records.items():
        values = _decoded(name, record)
        if expected is not None:
            _check_schema(name, values, expected[name])
        elif name in sent_records:
            _check_schema(name, values, schema_of(sent_records[name]))
        reference = {}
        if name in sent_records:
            record = sent_records[name]
            if id(record) not in cache:  # the record object, the same for every node
                cache[id(record)] = (record, _decoded(name, record))
            reference = cache[id(record)][1]
        _check_values(name, values, reference)


def _check_values(name: str, values: dict[str, np.ndarray], reference: dict) -> None:
    """Finite floats, and an update whose squared norm, summed in the arrays' own dtype, is
    finite."""
    totals: dict[np.dtype, np.floating] = {}
    for key, array in values.items():
        if not np.issubdtype(array.dtype, np.inexact):
            continue
        if not np.isfinite(array).all():
            raise RejectedReply(f"non-finite values (NaN or Inf) in {name}/{key}")
        ref = reference.get(key)
        update = array - ref if ref is not None else array
        with np.errstate(over="ignore", invalid="ignore"):
            square = np.square(update).sum(dtype=array.dtype)
            totals[array.dtype] = totals.get(array.dtype, array.dtype.type(0)) + square
    for dtype, total in totals.items():
        if not np.isfinite(total):
            raise RejectedReply(
                f"the update of {name} overflows {dtype} (its norm is not finite in {dtype})"
            )


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_declared(name: str, record, declared: Mapping[str, Metric]) -> None:
    """A declared metric record: present, with every required key of its declared form."""
    if record is None:
        raise RejectedReply(f"no metric record {name!r}")
    for key, metric in declared.items():
        if key not in record:
            if metric.required:
                raise RejectedReply(f"metric {name}/{key} is missing")
            continue
        problem = metric.problem(record[key]) if _is_numeric(record[key]) else None
        if problem:
            raise RejectedReply(f"metric {name}/{key}: {problem}")


def _is_numeric(value) -> bool:
    """A number or a list of numbers (anything else fails ``_check_metrics``'s types)."""
    return all(_is_number(v) for v in value) if isinstance(value, list) else _is_number(value)


def _check_config(name: str, record, keys: Mapping[str, type]) -> None:
    """A declared config record: present, each key holding a value of its type."""
    if record is None:
        raise RejectedReply(f"no config record {name!r}")
    for key, kind in keys.items():
        if not isinstance(record.get(key), kind):
            raise RejectedReply(f"config {name}/{key}={record.get(key)!r} is not a {kind.__name__}")


def _check_metrics(name, record, rules: ReplyRules, sizes: NodeSizes | None, partition) -> None:
    declared = (rules.metrics or {}).get(name, {})
    for key, value in record.items():
        if isinstance(value, list):
            listed = key in declared and declared[key].is_list
            if rules.list_metrics is not None and key not in rules.list_metrics and not listed:
                raise RejectedReply(f"metric {name}/{key} is a list, a number was expected")
            if not all(_is_number(item) for item in value):
                raise RejectedReply(f"metric {name}/{key} holds something other than numbers")
        elif not _is_number(value):
            raise RejectedReply(f"metric {name}/{key} is {type(value).__name__}, not a number")
    if "num-examples" in record:
        _check_examples(name, record["num-examples"], rules, sizes)
    if TEST_CLASS_COUNTS in record:
        _check_class_counts(name, record)
    claimed = record.get("partition-id")
    if claimed is not None and partition is not None and claimed != partition:
        raise RejectedReply(
            f"{name}/partition-id claims partition {claimed!r}, but the node answered the"
            f" handshake as partition {partition}"
        )


def _check_examples(name: str, count, rules: ReplyRules, sizes: NodeSizes | None) -> None:
    if not _is_number(count) or not np.isfinite(count) or count != int(count) or count < 1:
        raise RejectedReply(f"{name}/num-examples={count!r} is not a positive integer")
    bound = sizes.bound(rules.examples) if sizes is not None else None
    if bound is not None and count > bound:
        split = {TRAIN: "training split", TEST: "test split", DATA: "data"}[rules.examples]
        raise RejectedReply(
            f"{name}/num-examples={int(count)} exceeds the {bound} samples of the node's"
            f" {split} (reported in the handshake)"
        )


def _check_class_counts(name: str, record) -> None:
    """The per-class counts of an evaluation reply (``evaluation.clinical.TEST_CLASS_COUNTS``):
    whole non-negative numbers summing to ``num-examples``, and no class with more right
    predictions (``TEST_CLASS_CORRECT``) than samples."""
    counts = record[TEST_CLASS_COUNTS]
    correct = record.get(TEST_CLASS_CORRECT, [0] * len(counts))
    whole = all(_is_number(v) and v >= 0 and v == int(v) for v in [*counts, *correct])
    if not isinstance(counts, list) or not isinstance(correct, list) or not whole:
        raise RejectedReply(f"{name}/{TEST_CLASS_COUNTS} must be lists of whole numbers >= 0")
    if len(correct) != len(counts) or any(k > m for k, m in zip(correct, counts, strict=True)):
        raise RejectedReply(
            f"{name}/{TEST_CLASS_CORRECT} must hold, for each of the {len(counts)} classes, at"
            " most the class's samples"
        )
    if "num-examples" in record and sum(counts) != record["num-examples"]:
        raise RejectedReply(
            f"{name}/{TEST_CLASS_COUNTS} sum to {int(sum(counts))}, but num-examples is"
            f" {record['num-examples']}"
        )


def rejection(sent: Message, reason: str) -> Message:
    """The error reply that takes the place of a rejected reply to ``sent``."""
    return Message(Error(code=REJECTED_ERROR_CODE, reason=reason), reply_to=sent)
