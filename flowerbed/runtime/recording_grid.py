"""A ``Grid`` wrapper that measures every round and makes client order reproducible.

Strategies talk to the federation only through ``grid.get_node_ids()`` and
``grid.send_and_receive()``. Wrapping the grid lets flowerbed record, for any strategy and
without touching it: bytes sent and received (the records' payload, as Flower's
``count_bytes`` gives it), replies and failures, each client's training loss and evaluation
accuracy, and the wall time of the round.

Reproducibility: node ids are random per run, so the wrapper lists nodes in partition order
(learnt from a handshake) and returns replies in partition order. With Python's ``random``
seeded, Flower's client sampling and the floating-point order of aggregation are then the same
in every run with the same seed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import INFO, WARNING

from flwr.app import Message, MessageType, RecordDict
from flwr.common.logger import log


def payload_bytes(content: RecordDict) -> int:
    return sum(record.count_bytes() for record in content.values())


def short_reason(reply: Message) -> str:
    """The last line of an error reply's reason (the exception message), at most 200 chars."""
    lines = [line.strip() for line in str(reply.error.reason).splitlines() if line.strip()]
    return (lines[-1] if lines else "unknown error")[:200]


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
        self.current_round = 1
        self.rounds: dict[int, RoundTraffic] = {1: RoundTraffic()}

    def __getattr__(self, name):
        return getattr(self._grid, name)

    # --- federation membership -----------------------------------------------------------------
    def handshake(self, min_nodes: int, timeout: float) -> dict[int, tuple[int, int]]:
        """Ask every connected node for (partition-id, num-partitions); wait for ``min_nodes``.

        Returns ``{node_id: (partition_id, num_partitions)}`` for the nodes that answered.
        """
        deadline = time.monotonic() + timeout
        while len(node_ids := list(self._grid.get_node_ids())) < min_nodes:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"only {len(node_ids)} of min-available-clients={min_nodes} nodes connected"
                    f" within {timeout:.0f} s"
                )
            time.sleep(1)
        messages = [
            Message(content=RecordDict(), message_type=MessageType.QUERY, dst_node_id=node_id)
            for node_id in node_ids
        ]
        info = {}
        for reply in self._grid.send_and_receive(messages, timeout=timeout):
            node = reply.metadata.src_node_id
            if reply.has_error():
                log(WARNING, "node %d did not answer the handshake: %s", node, short_reason(reply))
                continue
            metrics = reply.content.metric_records["info"]
            info[node] = (int(metrics["partition-id"]), int(metrics["num-partitions"]))
        self.partition_of = {node: pid for node, (pid, _) in info.items()}
        return info

    def get_node_ids(self) -> list[int]:
        """Connected nodes, in partition order (unknown nodes last, by id)."""
        unknown = 1 << 62
        return sorted(
            self._grid.get_node_ids(), key=lambda n: (self.partition_of.get(n, unknown), n)
        )

    # --- traffic -------------------------------------------------------------------------------
    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None):
        messages = list(messages)
        traffic = self.rounds[self.current_round]
        traffic.bytes_sent += sum(payload_bytes(m.content) for m in messages)
        replies = list(self._grid.send_and_receive(messages, timeout=timeout))
        if not messages:
            return replies
        kind = messages[0].metadata.message_type.split(".")[0]
        for reply in replies:
            if reply.has_error():
                traffic.clients_failed += 1
                traffic.failures.append(f"node {reply.metadata.src_node_id}: {short_reason(reply)}")
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

    def _reply_order(self, reply: Message):
        node = reply.metadata.src_node_id
        return (reply.has_error(), self.partition_of.get(node, 1 << 62), node)

    def end_round(self) -> RoundTraffic:
        """Close the current round (its seconds) and open the next."""
        traffic = self.rounds[self.current_round]
        traffic.seconds = time.perf_counter() - traffic.started
        if traffic.failures:
            log(INFO, "round %d failures: %s", self.current_round, "; ".join(traffic.failures))
        self.current_round += 1
        self.rounds[self.current_round] = RoundTraffic()
        return traffic
