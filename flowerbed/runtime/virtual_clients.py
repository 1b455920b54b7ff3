"""Virtual clients: a few SuperNodes of a simulation act, one message at a time, as many clients.

Why: Flower's simulation engine asks every SuperNode for its next message every 0.1 s, and each
ask scans every pending message (``vce_api.add_messages_to_queue`` and the in-memory link
state), so a federation of N SuperNodes costs about N x pending checks per tick: a handshake
with every node is minutes at 1,000 nodes and hours at 10,000, and a round's time grows with
N even when 100 clients train. The clients' work does not need a SuperNode each: a client is
its partition of the data and its state, and both can be handed to whichever process runs it.

How, with run-config ``virtual-clients`` = N (0: every SuperNode is one client, Flower's way):

* **server half** (``VirtualClients``, used by ``runtime.recording_grid.RecordingGrid``): the
  SuperNodes that answer the handshake are the *carriers*; the grid lists N client ids
  ``0 .. N-1`` (client id = partition id), so a Flower strategy samples among N clients with
  Python's ``random``, seeded as for N SuperNodes listed in partition order: the same seed
  trains the same partitions as a federation of N SuperNodes would. Each message to client p
  is sent to a carrier with the record ``flowerbed-client`` = {``partition-id``: p,
  ``num-partitions``: N} (bookkeeping, added after its bytes are counted); a carrier holds at
  most one message at a time, so more messages than carriers go in waves, and a reply is
  matched to its client by the carrier that sent it, then re-addressed as a reply from the
  client (``Message(..., reply_to=...)``, public API), so everything after the grid sees
  client p answer;
* **client half** (the mod ``act_as_client``, outermost on every handler): a message with
  the record is handled with the carrier's ``node_config`` saying ``partition-id`` p and
  ``num-partitions`` N and with an empty ``context.state``; the client's state is kept on disk
  between its messages by ``runtime.client_state.keep_client_state``, exactly as for a
  checkpointing run (the FL rounds add the run folder to every message when clients are
  virtual), and the carrier's context is restored afterwards.

Outputs are those of N SuperNodes: every client computes from its partition, its state and the
message, none of which depends on the carrier (``tests/test_virtual_clients.py`` compares the
histories). Only protocols whose client state is kept that way, the FL rounds (the resumable
protocols), can run virtual clients, on data flowerbed partitions (not a site's own).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp.typing import ClientAppCallable

from ..data.site_reports import nodes_report_data
from ..settings import ConfigError, RunConfig, Setting
from .reply_wait import send_and_receive

RECORD = "flowerbed-client"  # the client a carried message is for
PARTITION_ID, NUM_PARTITIONS = "partition-id", "num-partitions"  # Flower's node-config keys

SETTINGS = (
    Setting(
        "virtual-clients",
        0,
        "0: every SuperNode is one client; N > 0: the run has N clients (partitions), and the"
        " SuperNodes act as them in turn, each message naming its client; client state is kept"
        " on disk. For simulations of many clients (`flowerbed run` chooses it above"
        " 100 clients); sampling is the same as with N SuperNodes",
        low=0,
    ),
)


def check(config: RunConfig) -> None:
    """Virtual clients need data that flowerbed partitions (a site's own data is its node's),
    and at least ``min-available-clients`` of them (a strategy would wait for more for ever)."""
    if 0 < config.virtual_clients < config.min_available_clients:
        raise ConfigError(
            f"virtual-clients={config.virtual_clients} is fewer than min-available-clients="
            f"{config.min_available_clients}; valid: virtual-clients >= min-available-clients"
        )
    if config.virtual_clients and nodes_report_data(config):
        raise ConfigError(
            f"virtual-clients={config.virtual_clients} needs data that flowerbed partitions;"
            f" partitioner={config.partitioner!r} / server-data={config.server_data!r} let"
            " each node hold its own: set virtual-clients=0"
        )


class VirtualClients:
    """The server half (module docstring): ``carriers`` are the SuperNodes' ids, in the order
    they take messages; ``num_clients`` the run's clients."""

    def __init__(self, carriers: Iterable[int], num_clients: int) -> None:
        self.carriers = list(carriers)
        if not self.carriers:
            raise ValueError("virtual clients need at least one SuperNode to carry them")
        self.num_clients = num_clients

    def client_ids(self) -> list[int]:
        """The clients a strategy samples from: ``0 .. N-1``, one per partition."""
        return list(range(self.num_clients))

    def carried(self, message: Message, carrier: int) -> Message:
        """``message`` (to a client) as the carrier receives it: the same content, type, group
        and time to live, plus the record naming the client."""
        content = RecordDict(dict(message.content.items()))
        content[RECORD] = ConfigRecord(
            {PARTITION_ID: message.metadata.dst_node_id, NUM_PARTITIONS: self.num_clients}
        )
        return Message(
            content=content,
            dst_node_id=carrier,
            message_type=message.metadata.message_type,
            group_id=message.metadata.group_id,
            ttl=message.metadata.ttl,
        )

    def send_and_receive(
        self, grid, messages: Iterable[Message], timeout: float | None = None
    ) -> list[Message]:
        """Send ``messages`` (addressed to clients) through the carriers, at most one per
        carrier at a time (waves of ``len(carriers)``, in client order), and return the
        replies that arrive within ``timeout`` seconds in all, each re-addressed from its
        client. Once the time is up, the waves not sent are not sent (their clients count as
        not replying)."""
        messages = sorted(messages, key=lambda m: m.metadata.dst_node_id)
        started = time.monotonic()
        replies: list[Message] = []
        for first in range(0, len(messages), len(self.carriers)):
            left = None if timeout is None else timeout - (time.monotonic() - started)
            if left is not None and left <= 0:
                break
            wave = dict(zip(self.carriers, messages[first : first + len(self.carriers)]))
            outgoing = [self.carried(message, carrier) for carrier, message in wave.items()]
            for reply in send_and_receive(grid, outgoing, timeout=left):
                original = wave.get(reply.metadata.src_node_id)
                if original is not None:  # a reply from no carrier of this wave is no one's
                    replies.append(from_client(reply, original))
        return replies


def from_client(reply: Message, original: Message) -> Message:
    """A carrier's ``reply`` as the reply of the client ``original`` was addressed to."""
    if reply.has_error():
        return Message(reply.error, reply_to=original)
    return Message(reply.content, reply_to=original)


def act_as_client(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """The client half (module docstring): handle a carried message as its client."""
    record = msg.content.config_records.get(RECORD)
    if record is None:
        return call_next(msg, context)
    del msg.content[RECORD]
    carrier_config = dict(context.node_config)
    context.node_config[PARTITION_ID] = int(record[PARTITION_ID])
    context.node_config[NUM_PARTITIONS] = int(record[NUM_PARTITIONS])
    clear(context.state)  # the client's state comes from disk (client_state)
    try:
        return call_next(msg, context)
    finally:
        clear(context.state)
        context.node_config.clear()
        context.node_config.update(carrier_config)


def clear(records: RecordDict) -> None:
    for name in list(records.keys()):
        del records[name]
