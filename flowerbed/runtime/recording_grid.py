"""A ``Grid`` wrapper that measures every round and makes client order reproducible.

Strategies talk to the federation only through ``grid.get_node_ids()`` and
``grid.send_and_receive()``. Wrapping the grid lets flowerbed record, for any strategy and
without touching it: bytes sent and received (the records' payload, as Flower's
``count_bytes`` gives it), replies and failures, each client's training loss and evaluation
accuracy, and the wall time of the round.

Poisoned replies: a reply whose arrays hold NaN or Inf, or whose ``num-examples`` is not a
finite number, is turned into an error reply before any strategy sees it (a diverging client
would otherwise turn every global parameter into NaN for the rest of the run): it is counted as
a failed client with the reason, and a warning names its partition. Other metrics may be NaN
by design (the accuracy of an empty split) and are left alone.

Reproducibility: node ids are random per run, so the wrapper lists nodes in partition order
(learnt from a handshake), returns replies in partition order and records their metrics and
failures in that order. With Python's ``random`` seeded, Flower's client sampling, the
floating-point order of aggregation and the history are then the same in every run with the
same seed, whatever order the replies arrive in.

Bookkeeping: records in ``bookkeeping`` (the run folder of a checkpointing run, for the
clients' state: ``client_state``) are added to every message after its bytes are counted, so
``bytes_sent`` is the algorithm's traffic and does not depend on where the run folder is.

Large federations: the handshake asks every node, and Flower's simulation engine scans every
node's queue for every pending message (a pass costs nodes x pending messages), so asking all
N nodes at once costs on the order of N^2 checks: minutes at 1,000 nodes, hours at 10,000.
``handshake(..., ask_all=False)`` asks one node (for the number of partitions) and learns the
others' partition ids from their replies (the ``partition-id`` metric of train and evaluate
replies); nodes are then listed by node id, so client sampling follows Flower's random node ids
and is not reproducible from the seed. Replies are still recorded in partition order.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import ERROR, INFO, WARNING

import numpy as np
from flwr.app import ConfigRecord, Error, Message, MessageType, RecordDict
from flwr.common.logger import log


def payload_bytes(content: RecordDict) -> int:
    return sum(record.count_bytes() for record in content.values())


def short_reason(reply: Message) -> str:
    """The last line of an error reply's reason (the exception message), at most 500 chars
    (room for a node's file path)."""
    lines = [line.strip() for line in str(reply.error.reason).splitlines() if line.strip()]
    return (lines[-1] if lines else "unknown error")[:500]


NONFINITE_ERROR_CODE = 1001  # flowerbed's error code for a reply dropped as non-finite


def nonfinite_entry(content: RecordDict) -> str | None:
    """The first ``record/key`` of a reply holding NaN or Inf where it must not, or ``None``."""
    for name, record in content.array_records.items():
        for key, array in record.items():
            values = array.numpy()
            if np.issubdtype(values.dtype, np.inexact) and not np.isfinite(values).all():
                return f"{name}/{key}"
    for name, record in content.metric_records.items():
        count = record.get("num-examples")
        if count is not None and not np.isfinite(float(count)):
            return f"{name}/num-examples"
    return None


@dataclass
class RoundTraffic:
    """What the grid saw during one round."""

    bytes_sent: int = 0
    bytes_received: int = 0
    clients_trained: int = 0
    clients_failed: int = 0
    failures: list[str] = field(default_factory=list)
    train: list[dict] = field(default_factory=list)  # per-client train metrics
    evaluate: list[dict] = field(default_factory=list)  # per-client evaluate metrics
    started: float = field(default_factory=time.perf_counter)
    seconds: float = float("nan")


class RecordingGrid:
    """Delegates to a Flower ``Grid``; records traffic per round (see module docstring)."""

    def __init__(self, grid) -> None:
        self._grid = grid
        self.partition_of: dict[int, int] = {}
        self.nodes_in_partition_order = True  # False after a handshake that asked one node
        self.current_round = 1
        self.rounds: dict[int, RoundTraffic] = {1: RoundTraffic()}
        # records added to every message after its bytes are counted: flowerbed's bookkeeping
        # (the client-state folder of a checkpointing run), not the algorithm's traffic
        self.bookkeeping: dict[str, ConfigRecord] = {}
        self.sampling_seed: int | None = None  # seed_sampling
        # the handshake's replies (node id -> content) and failures (node id -> reason), and
        # the nodes left out of the run after it (``leave_out``): never listed again
        self.handshake_replies: dict[int, RecordDict] = {}
        self.handshake_failures: dict[int, str] = {}
        self.left_out: set[int] = set()

    def __getattr__(self, name):
        return getattr(self._grid, name)

    # --- federation membership -----------------------------------------------------------------
    def handshake(
        self,
        min_nodes: int,
        wait_timeout: float,
        reply_timeout: float,
        report_every: float = 30.0,
        ask_all: bool = True,
    ) -> dict[int, tuple[int, int]]:
        """Ask every connected node (``ask_all``; else the one with the smallest id) for
        (partition-id, num-partitions); wait for ``min_nodes`` first.

        While fewer nodes are connected it says so every ``report_every`` seconds (how many are
        connected, how many it waits for) and gives up after ``wait_timeout`` seconds with
        ``TimeoutError``. Returns ``{node_id: (partition_id, num_partitions)}`` for the nodes
        that answered. Round 1's clock starts when it returns.
        """
        started = time.monotonic()
        last_report = started
        while len(node_ids := list(self._grid.get_node_ids())) < min_nodes:
            waited = time.monotonic() - started
            if waited > wait_timeout:
                raise TimeoutError(
                    f"only {len(node_ids)} of min-available-clients={min_nodes} nodes connected"
                    f" within wait-timeout={wait_timeout:g} s"
                )
            if time.monotonic() - last_report >= report_every:
                last_report = time.monotonic()
                log(
                    WARNING,
                    "flowerbed: waiting for nodes: %d of min-available-clients=%d connected"
                    " (%.0f s of wait-timeout=%g s)",
                    len(node_ids),
                    min_nodes,
                    waited,
                    wait_timeout,
                )
            time.sleep(1)
        asked_nodes = node_ids if ask_all else [min(node_ids)]
        messages = [
            Message(content=RecordDict(), message_type=MessageType.QUERY, dst_node_id=node_id)
            for node_id in asked_nodes
        ]
        info = {}
        asked = time.monotonic()
        for reply in self._grid.send_and_receive(messages, timeout=reply_timeout):
            node = reply.metadata.src_node_id
            if reply.has_error():
                self.handshake_failures[node] = short_reason(reply)
                log(WARNING, "node %d did not answer the handshake: %s", node, short_reason(reply))
                continue
            self.handshake_replies[node] = reply.content
            metrics = reply.content.metric_records["info"]
            info[node] = (int(metrics["partition-id"]), int(metrics["num-partitions"]))
        self.partition_of = {node: pid for node, (pid, _) in info.items()}
        self.nodes_in_partition_order = ask_all
        log(
            INFO,
            "flowerbed: %d of %d asked nodes answered the handshake in %.1f s (%d connected)",
            len(info),
            len(asked_nodes),
            time.monotonic() - asked,
            len(node_ids),
        )
        self.rounds[self.current_round] = RoundTraffic()  # round 1's clock starts now
        return info

    def leave_out(self, reasons: dict[int, str]) -> None:
        """Take these nodes out of the run: logged with their reasons, never listed again."""
        for node, reason in sorted(reasons.items()):
            log(ERROR, "flowerbed: node %d left out of the run: %s", node, reason)
            self.left_out.add(node)
            self.partition_of.pop(node, None)

    def seed_sampling(self, seed: int | None) -> None:
        """Reseed Python's ``random`` with ``seed`` whenever the nodes are listed from now on
        (None: stop): Flower's strategies list the nodes and draw their sample from ``random``
        right after, so no other thread's draw can fall in between (``rounds_strategy``)."""
        self.sampling_seed = seed

    def get_node_ids(self) -> list[int]:
        """Connected nodes (not those left out), in partition order (unknown nodes last, by id);
        by id alone after a handshake that asked one node (an order that does not change as
        partitions are learnt)."""
        connected = [node for node in self._grid.get_node_ids() if node not in self.left_out]
        if not self.nodes_in_partition_order:
            nodes = sorted(connected)
        else:
            unknown = 1 << 62
            nodes = sorted(connected, key=lambda n: (self.partition_of.get(n, unknown), n))
        if self.sampling_seed is not None:
            random.seed(self.sampling_seed)
        return nodes

    # --- traffic -------------------------------------------------------------------------------
    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None):
        messages = list(messages)
        traffic = self.rounds[self.current_round]
        traffic.bytes_sent += sum(payload_bytes(m.content) for m in messages)
        for message in messages:
            for name, record in self.bookkeeping.items():
                message.content[name] = record
        replies = list(self._grid.send_and_receive(messages, timeout=timeout))
        if not messages:
            return replies
        kind = messages[0].metadata.message_type.split(".")[0]
        sent = {m.metadata.dst_node_id: m for m in messages}
        replies = [self._drop_if_nonfinite(reply, sent, traffic) for reply in replies]
        for reply in replies:
            self._learn_partition(reply)
        # recorded in partition order, not arrival order: the history is the same every run
        for reply in sorted(replies, key=self._partition_order):
            if reply.has_error():
                traffic.clients_failed += 1
                traffic.failures.append(f"{self.describe(reply)}: {short_reason(reply)}")
                continue
            traffic.bytes_received += payload_bytes(reply.content)
            metrics = dict(reply.content.metric_records.get("metrics", {}))
            if kind == MessageType.TRAIN:
                traffic.clients_trained += 1
                traffic.train.append(metrics)
            elif kind == MessageType.EVALUATE:
                traffic.evaluate.append(metrics)
        missing = len(messages) - len(replies)
        if missing > 0:
            traffic.clients_failed += missing
            traffic.failures.append(f"{missing} node(s) did not reply within the timeout")
        return sorted(replies, key=self._reply_order)

    def _learn_partition(self, reply: Message) -> None:
        """Note the partition a reply reports (``partition-id`` in its metrics), if any."""
        if reply.has_error():
            return
        metrics = reply.content.metric_records.get("metrics")
        if metrics is not None and "partition-id" in metrics:
            self.partition_of.setdefault(reply.metadata.src_node_id, int(metrics["partition-id"]))

    def describe(self, reply: Message) -> str:
        """``partition 3`` (or ``node <id>`` before the handshake has named it)."""
        node = reply.metadata.src_node_id
        return (
            f"partition {self.partition_of[node]}" if node in self.partition_of else f"node {node}"
        )

    def _drop_if_nonfinite(self, reply: Message, sent: dict, traffic: RoundTraffic) -> Message:
        """The reply, or an error reply in its place if it carries NaN or Inf (module doc)."""
        if reply.has_error() or reply.metadata.src_node_id not in sent:
            return reply
        entry = nonfinite_entry(reply.content)
        if entry is None:
            return reply
        traffic.bytes_received += payload_bytes(reply.content)
        reason = f"non-finite values (NaN or Inf) in {entry}; the reply was dropped"
        log(WARNING, "%s sent %s", self.describe(reply), reason)
        error = Error(code=NONFINITE_ERROR_CODE, reason=reason)
        return Message(error, reply_to=sent[reply.metadata.src_node_id])

    def _partition_order(self, reply: Message):
        node = reply.metadata.src_node_id
        return (self.partition_of.get(node, 1 << 62), node)

    def _reply_order(self, reply: Message):
        return (reply.has_error(), *self._partition_order(reply))

    def continue_after(self, last_round: int) -> None:
        """Number the next round ``last_round + 1`` (a resumed run); its clock starts now."""
        self.current_round = last_round + 1
        self.rounds = {self.current_round: RoundTraffic()}

    def end_round(self) -> RoundTraffic:
        """Close the current round (its seconds) and open the next."""
        traffic = self.rounds[self.current_round]
        traffic.seconds = time.perf_counter() - traffic.started
        if traffic.failures:
            log(INFO, "round %d failures: %s", self.current_round, "; ".join(traffic.failures))
        self.current_round += 1
        self.rounds[self.current_round] = RoundTraffic()
        return traffic
