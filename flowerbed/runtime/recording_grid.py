"""A ``Grid`` wrapper that measures every round and makes client order reproducible.

Strategies talk to the federation only through ``grid.get_node_ids()`` and
``grid.send_and_receive()``. Wrapping the grid lets flowerbed record, for any strategy and
without touching it: bytes sent and received (the records' payload, as Flower's
``count_bytes`` gives it), replies and failures, each client's training loss and evaluation
accuracy, and the wall time of the round.

Untrusted replies: every reply is checked before any strategy sees it
(``trust.reply_checks``: arrays like the ones sent, finite, an update that cannot overflow
the model's dtype, metrics of the declared types, ``num-examples`` a positive integer within
the node's data as it reported it in the handshake, ``partition-id`` the node's own). A reply
that fails is turned into an error reply with the reason: counted as a failed client, its
partition and the reason in the round's failures and in one WARNING line. Phases declare what
their replies hold (``expect``); other message types get the lenient rules. With
``max-update-norm`` the training replies' updates are clipped after they pass.

Membership: the nodes that answered the handshake, under the partition ids they reported
there, are the run's; a node that connects later (or failed the handshake) is never listed
for sampling and is logged once. A malformed handshake reply leaves its node out, with the
reason.

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

Virtual clients (``act_as_clients``, run-config ``virtual-clients``): the nodes that answered the
handshake carry the messages of N clients (``runtime.virtual_clients``); the grid lists the N
client ids, which are the partition ids, and everything above sees the clients, not the nodes.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from logging import ERROR, INFO, WARNING

from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common.logger import log

from ..core.clipping import clip_update
from ..core.stages import REPLY_CHECKS, stage
from ..trust.reply_checks import (
    LENIENT,
    NodeSizes,
    RejectedReply,
    ReplyRules,
    check_reply,
    rejection,
)
from .outcome import first_error
from .reply_wait import send_and_receive
from .virtual_clients import VirtualClients

WRAPPED = re.compile(r"^Exception \w+ occurred\. Message: ")  # Flower's ClientAppException


def payload_bytes(content: RecordDict) -> int:
    return sum(record.count_bytes() for record in content.values())


def short_reason(reply: Message) -> str:
    """An error reply's cause, at most 500 chars (room for a node's file path): the exception
    that started it and where (``outcome.first_error``: a client's traceback as Ray and Flower
    wrap it), else the reason's last line without Flower's wrapping."""
    reason = str(reply.error.reason)
    found = first_error(reason)
    if found is None:
        lines = [line.strip() for line in reason.splitlines() if line.strip()]
        found = lines[-1] if lines else "unknown error"
        found = WRAPPED.sub("", found).removesuffix("'>")
    return found[:500]


def handshake_info(content: RecordDict) -> tuple[int, int]:
    """(partition id, number of partitions) of a handshake reply; ``ValueError`` naming what
    is wrong with a malformed one."""
    info = content.metric_records.get("info")
    if info is None:
        raise ValueError("no 'info' metrics")
    values = []
    for key in ("partition-id", "num-partitions"):
        value = info.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"info/{key}={value!r} is not a non-negative integer")
        values.append(value)
    return values[0], values[1]


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
    clients_clipped: int | None = None  # training updates clipped (max-update-norm), if on


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
        # the number of partitions, and each partition's local split sizes (the bound on a
        # reply's num-examples): computed by the server from the partition, or as the node
        # reported them (site-owned data, a server without data); None = no bound
        self.num_partitions: int | None = None
        self.partition_sizes: Callable[[int], NodeSizes | None] = lambda partition: None
        self.positive_class: int | None = None  # a binary task's (data.classes), for history
        self.rules: dict[str, ReplyRules] = {}  # message type -> what its replies hold
        self.strangers: set[int] = set()  # nodes seen after the handshake (logged once)
        self.virtual: VirtualClients | None = None  # act_as_clients

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
        wanted: int = 0,
    ) -> dict[int, tuple[int, int]]:
        """Ask every connected node (``ask_all``; else the one with the smallest id) for
        (partition-id, num-partitions); wait for ``min_nodes`` first.

        While fewer nodes are connected it says so every ``report_every`` seconds (how many are
        connected, how many it waits for) and gives up after ``wait_timeout`` seconds with
        ``TimeoutError``. Returns ``{node_id: (partition_id, num_partitions)}`` for the nodes
        that answered. Round 1's clock starts when it returns. ``wanted`` (a resumed run: the
        run's partitions) more nodes are waited for, within ``wait_timeout``; then it goes on
        with the ``min_nodes`` or more connected.
        """
        started = time.monotonic()
        last_report = started
        while len(node_ids := list(self._grid.get_node_ids())) < max(min_nodes, wanted):
            waited = time.monotonic() - started
            if waited > wait_timeout and len(node_ids) >= min_nodes:
                break
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
        for reply in send_and_receive(self._grid, messages, timeout=reply_timeout):
            node = reply.metadata.src_node_id
            if reply.has_error():
                self.handshake_failures[node] = short_reason(reply)
                log(
                    WARNING,
                    "flowerbed: node %d did not answer the handshake: %s",
                    node,
                    short_reason(reply),
                )
                continue
            try:
                info[node] = handshake_info(reply.content)
            except ValueError as error:
                self.handshake_failures[node] = f"malformed handshake reply: {error}"
                log(
                    WARNING,
                    "flowerbed: node %d left out: malformed handshake reply: %s",
                    node,
                    error,
                )
                continue
            self.handshake_replies[node] = reply.content
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

    def act_as_clients(self, num_clients: int) -> None:
        """From now on the nodes that answered the handshake carry ``num_clients`` virtual
        clients (module docstring), listed as ``0 .. num_clients - 1`` in place of the nodes."""
        carriers = sorted(self.partition_of, key=self.partition_of.get)
        self.virtual = VirtualClients(carriers, num_clients)
        self.partition_of = {client: client for client in range(num_clients)}
        self.nodes_in_partition_order = True

    def leave_out(self, reasons: dict[int, str]) -> None:
        """Take these nodes out of the run: logged with their reasons, never listed again."""
        for node, reason in sorted(reasons.items()):
            log(ERROR, "flowerbed: node %d left out of the run: %s", node, reason)
            self.left_out.add(node)
            self.partition_of.pop(node, None)

    def expect(self, rules: dict[str, ReplyRules]) -> None:
        """What the replies to these message types hold (``reply_checks.ReplyRules``)."""
        self.rules.update(rules)

    def seed_sampling(self, seed: int | None) -> None:
        """Reseed Python's ``random`` with ``seed`` whenever the nodes are listed from now on
        (None: stop): Flower's strategies list the nodes and draw their sample from ``random``
        right after, so no other thread's draw can fall in between (``rounds_strategy``)."""
        self.sampling_seed = seed

    def get_node_ids(self) -> list[int]:
        """Connected nodes (not those left out), in partition order (unknown nodes last, by id);
        by id alone after a handshake that asked one node (an order that does not change as
        partitions are learnt); the clients' ids when clients are virtual (``act_as_clients``)."""
        if self.virtual is not None:
            nodes = self.virtual.client_ids()
        else:
            nodes = self._connected_nodes()
        if self.sampling_seed is not None:
            random.seed(self.sampling_seed)
        return nodes

    def _connected_nodes(self) -> list[int]:
        """The connected nodes, not those left out, in the order ``get_node_ids`` names."""
        connected = [n for n in self._grid.get_node_ids() if n not in self.left_out]
        if not self.nodes_in_partition_order:
            return sorted(connected)
        strangers = [node for node in connected if node not in self.partition_of]
        for node in sorted(set(strangers) - self.strangers):  # only the handshake's take part
            log(
                WARNING,
                "flowerbed: node %d is not one of the nodes that answered the handshake;"
                " it is never sampled in this run",
                node,
            )
        self.strangers.update(strangers)
        return sorted((n for n in connected if n in self.partition_of), key=self.partition_of.get)

    # --- traffic -------------------------------------------------------------------------------
    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None):
        messages = list(messages)
        traffic = self.rounds[self.current_round]
        traffic.bytes_sent += sum(payload_bytes(m.content) for m in messages)
        for message in messages:
            for name, record in self.bookkeeping.items():
                message.content[name] = record
        send = send_and_receive if self.virtual is None else self.virtual.send_and_receive
        replies = send(self._grid, messages, timeout=timeout)
        if not messages:
            return replies
        message_type = messages[0].metadata.message_type
        kind = message_type.split(".")[0]
        rules = self.rules.get(message_type, LENIENT)
        if rules.max_update_norm > 0 and traffic.clients_clipped is None:
            traffic.clients_clipped = 0
        sent = {m.metadata.dst_node_id: m for m in messages}
        decoded_sent: dict = {}  # the arrays sent, decoded once for all replies
        with stage(REPLY_CHECKS, self.current_round):
            replies = [self._checked(r, sent, rules, traffic, decoded_sent) for r in replies]
        # recorded in partition order, not arrival order: the history is the same every run
        for reply in sorted(replies, key=self._partition_order):
            if reply.has_error():
                traffic.clients_failed += 1
                traffic.failures.append(f"{self.describe(reply)}: {short_reason(reply)}")
                continue
            traffic.bytes_received += payload_bytes(reply.content)
            metrics = dict(reply.content.metric_records.get("metrics", {}))
            node = reply.metadata.src_node_id
            if "partition-id" in metrics and node in self.partition_of:  # keyed by the sender
                metrics["partition-id"] = self.partition_of[node]
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

    def describe(self, reply: Message) -> str:
        """``partition 3`` (or ``node <id>`` before the handshake has named it)."""
        node = reply.metadata.src_node_id
        return (
            f"partition {self.partition_of[node]}" if node in self.partition_of else f"node {node}"
        )

    def _checked(
        self,
        reply: Message,
        sent: dict[int, Message],
        rules: ReplyRules,
        traffic: RoundTraffic,
        decoded_sent: dict,
    ) -> Message:
        """The reply, or an error reply in its place if it fails the checks (module doc);
        learns the partition a node reports when the handshake did not ask it."""
        node = reply.metadata.src_node_id
        if reply.has_error() or node not in sent:
            return reply
        request = sent[node].content
        try:
            partition = self.partition_of.get(node)
            if partition is None:
                partition = self._claimed_partition(reply)
            sizes = self.partition_sizes(partition) if partition is not None else None
            check_reply(reply.content, request, rules, sizes, partition, decoded_sent)
        except RejectedReply as error:
            traffic.bytes_received += payload_bytes(reply.content)
            log(WARNING, "flowerbed: %s's reply was dropped: %s", self.describe(reply), error)
            return rejection(sent[node], f"{error}; the reply was dropped")
        if partition is not None:
            self.partition_of[node] = partition
        if rules.max_update_norm > 0 and clip_update(reply.content, request, rules.max_update_norm):
            traffic.clients_clipped += 1
        return reply

    def _claimed_partition(self, reply: Message) -> int | None:
        """The partition a node not asked in the handshake reports (``partition-id``), if it
        is a valid one that no other node holds."""
        claimed = reply.content.metric_records.get("metrics", {}).get("partition-id")
        if claimed is None:
            return None
        if not isinstance(claimed, int) or not 0 <= claimed < (self.num_partitions or 0):
            raise RejectedReply(f"partition-id {claimed!r} is not in [0, {self.num_partitions})")
        holders = {pid: n for n, pid in self.partition_of.items()}
        if claimed in holders:
            raise RejectedReply(f"claims partition {claimed}, which node {holders[claimed]} holds")
        return claimed

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
            log(
                WARNING,
                "flowerbed: round %d failures: %s",
                self.current_round,
                "; ".join(traffic.failures),
            )
        self.current_round += 1
        self.rounds[self.current_round] = RoundTraffic()
        return traffic
