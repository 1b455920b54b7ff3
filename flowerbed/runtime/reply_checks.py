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
  declares (``list_metrics``); ``num-examples`` a positive integer no larger than the node's
  data as it reported it in the handshake (``examples``: its training split for training
  replies, its test split for evaluation replies); ``partition-id``, where present, the one
  the node answered the handshake with; per-class test counts (``test-class-counts`` and
  ``test-class-correct``, the per-site table's), where present, whole numbers that sum to
  ``num-examples``, with no class predicted right more often than it occurs.

A reply that fails becomes an error reply (``REJECTED_ERROR_CODE``) carrying the exact reason,
so that it is counted like a failed client, with its partition and the reason in the round's
``failures`` and in one WARNING line; the round is aggregated from the other replies.

``clip_update`` is the optional server-side clipping of each client's model update to a norm
bound (run-config ``max-update-norm``), applied to replies that passed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord, Error, Message, RecordDict

from ..clinical import TEST_CLASS_CORRECT, TEST_CLASS_COUNTS

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


def no_arrays(sent: RecordDict) -> Schema:
    """A reply that holds metrics only (evaluation)."""
    return {}


@dataclass(frozen=True)
class ReplyRules:
    """What the replies to one message type must look like (module docstring).

    ``arrays(sent_content)``: the array records a reply must hold exactly, or ``None`` for the
    lenient rule (records named like sent ones match them, other records are only checked for
    decoding and finiteness). ``list_metrics``: metric keys that may hold lists (``None``: any).
    ``examples``: which of the node's sizes bounds ``num-examples`` (``TRAIN``, ``TEST``,
    ``DATA`` = both splits, ``UNBOUNDED``). ``max_update_norm``: clip each reply's update of
    the ``arrays`` record to this norm (0 = off).
    """

    arrays: Callable[[RecordDict], Schema] | None = None
    list_metrics: frozenset[str] | None = None
    examples: str = DATA
    max_update_norm: float = 0.0


LENIENT = ReplyRules()  # the message types no phase declared


@dataclass(frozen=True)
class NodeSizes:
    """A node's data as it reported it in the handshake: training and test samples."""

    train: int
    test: int

    def bound(self, examples: str) -> int | None:
        return {TRAIN: self.train, TEST: self.test, DATA: self.train + self.test}.get(examples)


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
    _check_arrays(reply, sent, rules, {} if decoded_sent is None else decoded_sent)
    for name, record in reply.metric_records.items():
        _check_metrics(name, record, rules, sizes, partition)


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


def _check_arrays(reply: RecordDict, sent: RecordDict, rules: ReplyRules, cache: dict) -> None:
    sent_records = sent.array_records
    if rules.arrays is not None:
        expected = rules.arrays(sent)
        names = set(reply.array_records)
        if names != set(expected):
            raise RejectedReply(
                f"array records {sorted(names)} where {sorted(expected)} were expected"
            )
    for name, record in reply.array_records.items():
        values = _decoded(name, record)
        if rules.arrays is not None:
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


def _check_metrics(name, record, rules: ReplyRules, sizes: NodeSizes | None, partition) -> None:
    for key, value in record.items():
        if isinstance(value, list):
            if rules.list_metrics is not None and key not in rules.list_metrics:
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
    """The per-class counts of an evaluation reply (``clinical.TEST_CLASS_COUNTS``): whole
    non-negative numbers summing to ``num-examples``, and no class with more right
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


def clip_update(reply: RecordDict, sent: RecordDict, max_norm: float) -> bool:
    """Clip the update of the reply's ``arrays`` record to ``max_norm`` (in place); whether it
    was clipped.

    u = w - g over every floating-point entry (Flower's DP fixed-clipping wrappers take the
    same whole-record norm); w' = g + u min(1, C / ||u||), computed in float64 and stored in
    each entry's own dtype. Integer entries (batch-norm counters) are left as sent by the
    client.
    """
    arrays = {key: array.numpy() for key, array in reply.array_records["arrays"].items()}
    sent_arrays = {key: array.numpy() for key, array in sent.array_records["arrays"].items()}
    floats = [key for key, v in arrays.items() if np.issubdtype(v.dtype, np.inexact)]
    update = {key: arrays[key].astype(np.float64) - sent_arrays[key] for key in floats}
    norm = float(np.sqrt(sum(np.square(u).sum() for u in update.values())))
    if norm <= max_norm:
        return False
    factor = max_norm / norm
    clipped = {
        key: Array(np.array((sent_arrays[key] + factor * update[key]).astype(v.dtype), order="C"))
        if key in update
        else Array(v)
        for key, v in arrays.items()
    }
    reply["arrays"] = ArrayRecord(clipped)
    return True


def rejection(sent: Message, reason: str) -> Message:
    """The error reply that takes the place of a rejected reply to ``sent``."""
    return Message(Error(code=REJECTED_ERROR_CODE, reason=reason), reply_to=sent)
