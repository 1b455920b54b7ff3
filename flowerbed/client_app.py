"""flowerbed's ClientApp: a table of Flower message types, each answered by a phase's client half.

* ``query``: the handshake; reports this node's partition id and the number of partitions,
  and, when the server holds no data or the nodes their own, what the node's data look like
  (``data.site_reports``: counts, sizes and shapes, never a sample);
* every message type a phase declares (``Phase.MESSAGE_TYPES``): the run's protocol finds the
  phase that sent it and runs its ``client_step``.

The table names no algorithm: it holds the message types of every ``Phase`` subclass of
flowerbed, all defined once ``flowerbed.catalog`` has imported every protocol, whatever phases
a run config composes (``phase_message_types``); a new protocol touches no app file.

A ``LocalClient`` (config, partition, model helpers) is built from the context per message;
the run config is parsed once per process (``run_config_of``: every message of a run carries
the same one), and data sets and partitions are cached per process, so a Ray actor reads its
files once.

The Flower mods around a handler follow its message type's Flower category (``mods_for``):
``train`` and ``evaluate`` without an action are the rounds of a Flower strategy and carry
``act_as_client`` (outermost: a message carried for a virtual client is handled as that
client, ``runtime.virtual_clients``) and ``keep_client_state``, which checkpoints the node's
``context.state`` for resumed runs (``runtime.client_state``); every ``train`` message carries ``fail_on_purpose`` (test-only fault
injection); the rounds' ``train`` also carries ``attack_update`` and ``privacy_mod`` (Flower's
DP mods when the run config's ``dp`` asks for them), innermost, so that a declared attacker
rewrites its reply after it, as a malicious client would; ``query`` messages (and actions of
``evaluate``) carry none.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable

from flwr.app import Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import Mod

from .catalog import get_protocol, parse_run_config
from .core.stages import CLIENT, CLIENT_STEP, stage
from .data.federation import table_labels
from .data.site_reports import NodeDataError, data_report, nodes_report_data
from .privacy.client import privacy_mod
from .protocols.phase import Phase
from .runtime.client_state import keep_client_state, message_round
from .runtime.virtual_clients import act_as_client
from .settings import RunConfig
from .training.local_client import LocalClient
from .trust.attacks import attack_update
from .trust.fault_injection import fail_on_purpose

app = ClientApp()


@functools.lru_cache(maxsize=4)
def _parsed(items: tuple[tuple[str, Hashable], ...]) -> RunConfig:
    return parse_run_config(dict(items))


def run_config_of(context: Context) -> RunConfig:
    """``parse_run_config`` of the node's run config, parsed once per process and run config
    (about 1.3 ms a message otherwise); a bad one raises ``ConfigError`` every time."""
    return _parsed(tuple(sorted(context.run_config.items())))


@app.query()
def handshake(msg: Message, context: Context) -> Message:
    partition_id = int(context.node_config["partition-id"])
    info = MetricRecord(
        {
            "partition-id": partition_id,
            "num-partitions": int(context.node_config["num-partitions"]),
        }
    )
    content = RecordDict({"info": info})
    config = run_config_of(context)
    if nodes_report_data(config):
        try:
            client = LocalClient.from_context(context, config)
        except (ValueError, OSError) as error:  # a site's unreadable data: name node and file
            raise NodeDataError(f"partition-id {partition_id}: {error}") from error
        records = data_report(
            table_labels(client.config, client.num_partitions, partition_id),
            client.data.input_shape,
            client.data.num_classes,
            str(client.config.data_path),
            (len(client.y_train), len(client.y_test)),
            client.data.class_names,
            client.data.positive_class,
        )
        for name, record in records.items():
            content[name] = record
    return Message(content=content, reply_to=msg)


def run_phase_step(msg: Message, context: Context) -> Message:
    """The client half of the phase of this run's protocol that sent ``msg`` (timed as the
    client step of its round: ``core.stages``)."""
    with stage(CLIENT_STEP, message_round(msg), CLIENT):
        config = run_config_of(context)
        protocol = get_protocol(config.strategy).protocol(config)
        phase = protocol.phase_for(msg.metadata.message_type)
        return phase.client_step(LocalClient.from_context(context, config), msg)


def phase_message_types() -> tuple[str, ...]:
    """Every message type declared by a ``Phase`` subclass of flowerbed, sorted.

    ``flowerbed.catalog`` (imported above) imports every protocol, so every phase any run
    config can compose is defined by now; phases defined outside flowerbed (tests) are not
    the app's.
    """
    package = __name__.split(".")[0]
    types: set[str] = set()
    classes = list(Phase.__subclasses__())
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        if cls.__module__.split(".")[0] == package:
            types.update(cls.MESSAGE_TYPES)
    return tuple(sorted(types))


def mods_for(message_type: str) -> list[Mod]:
    """The Flower mods around the handler of ``message_type``, by its Flower category (module
    docstring): a category without an action is a Flower strategy's round."""
    category, _, action = message_type.partition(".")
    strategy_round = not action
    mods: list[Mod] = []
    if strategy_round and category in (MessageType.TRAIN, MessageType.EVALUATE):
        mods += [act_as_client, keep_client_state]  # a virtual client's partition and state
    if category == MessageType.TRAIN:
        mods.append(fail_on_purpose)
        if strategy_round:
            mods += [attack_update, privacy_mod]
    return mods


def _register(message_type: str, mods: list[Mod]) -> None:
    """``run_phase_step`` as the handler of ``message_type``, inside ``mods``."""
    category, _, action = message_type.partition(".")
    decorator = {
        MessageType.TRAIN: app.train,
        MessageType.EVALUATE: app.evaluate,
        MessageType.QUERY: app.query,
    }[category]
    (decorator(action, mods=mods) if action else decorator(mods=mods))(run_phase_step)


# The table: message type -> the mods around its handler (every one reaches the phase's
# client half).
HANDLERS: dict[str, list[Mod]] = {t: mods_for(t) for t in phase_message_types()}
for message_type, mods in HANDLERS.items():
    _register(message_type, mods)
