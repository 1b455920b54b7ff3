"""A protocol is an ordered list of phases sharing one run context.

``Phase`` is one step of a protocol with two halves:

* the server half, ``run(run, handoff)``: sends messages through the run's recording grid,
  adds history rows, writes results, and leaves what the next phase needs in the ``Handoff``
  (the global arrays, the clients' uploaded models);
* the client half, ``client_step(client, msg)``: what a node does with one of the phase's
  messages, reached through the phase's Flower message types (``MESSAGE_TYPES``, e.g.
  ``"train.local_fit"``; the ClientApp registers one handler per type).

``RESUMABLE`` says whether the phase goes on from a checkpoint (run-config ``resume``); a
protocol resumes when all its phases do (today: the FL-rounds protocols).

``SERVER_DATA`` says what the server half needs data of its own for (a distillation proxy,
FedSA's target set), naming the key that provides it; a protocol with such a phase stops
before the handshake when the server holds no data (``server-data``).

``reply_rules(config)`` declares what the replies to each of the phase's message types hold
(array records, metric and config records, what bounds ``num-examples``, the phase's own
check): the recording grid checks every reply against it before the server half sees it
(``trust.reply_checks``), and a reply that fails reaches the server half as an error reply,
which it leaves out like a failed client. It is called after ``check``, so that it may use
what ``check`` learnt of the run (the architectures' shapes, the number of classes).

``check(run)`` validates what can only be checked with the data and the federation known
(architectures, the strategy's own requirements); ``Protocol.run`` calls every phase's check
before any phase runs, so a bad setting of the last phase stops the run before the first
trains.

``ProtocolSpec`` is a registry entry (``flowerbed.catalog``): a name, the paper, the settings
it reads, the global model it trains, the run-config values it needs where the global
defaults do not suit it (``defaults``), and ``phases(config)``, which composes its phases.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ArrayRecord, Message

from ..data.site_reports import server_has_data
from ..models import Classifier, run_model
from ..runtime.context import RunContext
from ..settings import ConfigError, RunConfig, Setting, Value
from ..training.local_client import LocalClient
from ..trust.reply_checks import ReplyRules


@dataclass
class Handoff:
    """State passed from one phase to the next."""

    arrays: ArrayRecord | None = None  # the global model's arrays, when the protocol has one
    uploads: list[Message] = field(default_factory=list)  # replies carrying client models
    shared: dict[str, np.ndarray] = field(default_factory=dict)  # what nodes share with all


class Phase:
    """One step of a protocol (see the module docstring)."""

    MESSAGE_TYPES: tuple[str, ...] = ()
    RESUMABLE = False  # a run of this phase can go on from a checkpoint (run-config resume)
    SERVER_DATA = ""  # what the server half needs its own data for ("" = nothing)

    def check(self, run: RunContext) -> None:
        """Raise ``ConfigError`` for what cannot run; called before any phase runs."""

    def reply_rules(self, config: RunConfig) -> dict[str, ReplyRules]:
        """What the replies to this phase's messages hold, by message type
        (``trust.reply_checks``). Every message type of ``MESSAGE_TYPES`` must be listed,
        with its ``arrays`` declared (``no_arrays`` for a reply of metrics only): strict by
        default, as tests/test_strict_replies.py checks for every registered protocol."""
        return {}

    def run(self, run: RunContext, handoff: Handoff) -> None:
        raise NotImplementedError

    def client_step(self, client: LocalClient, msg: Message) -> Message:
        raise NotImplementedError(f"{type(self).__name__} has no client half")


@dataclass(frozen=True)
class Protocol:
    """The phases of one run, in order."""

    phases: tuple[Phase, ...]

    def run(self, run: RunContext) -> Handoff:
        for phase in self.phases:
            phase.check(run)
            run.grid.expect(phase.reply_rules(run.config))
        handoff = Handoff()
        for phase in self.phases:
            phase.run(run, handoff)
        return handoff

    @property
    def resumable(self) -> bool:
        return all(phase.RESUMABLE for phase in self.phases)

    def check_server_data(self, config: RunConfig) -> None:
        """A ``ConfigError`` when a phase needs data on a server that holds none."""
        needs = [phase.SERVER_DATA for phase in self.phases if phase.SERVER_DATA]
        if needs and not server_has_data(config):
            why = (
                "partitioner='site' leaves it none"
                if config.server_data == "auto"
                else "server-data='none'"
            )
            raise ConfigError(
                f"strategy={config.strategy!r} needs data on the server ({'; '.join(needs)}) and"
                f" {why}: set server-data='own' with the server's data set in data-dir"
            )

    def phase_for(self, message_type: str) -> Phase:
        """The phase whose client half answers messages of ``message_type``."""
        for phase in self.phases:
            if message_type in phase.MESSAGE_TYPES:
                return phase
        raise ValueError(f"no phase of this protocol answers {message_type!r} messages")


@dataclass(frozen=True)
class ProtocolSpec:
    """A registered protocol: what ``strategy=<name>`` runs."""

    name: str
    summary: str
    paper: str
    phases: Callable[[RunConfig], tuple[Phase, ...]]
    settings: tuple[Setting, ...] = ()
    build_model: Callable[[RunConfig, tuple[int, ...], int], Classifier] = run_model
    # Run-config values this protocol needs that differ from the global (declared) defaults,
    # e.g. ``{"server-fraction": 0.2}``. ``catalog.parse_run_config`` applies each one to its
    # key when, and only when, the key holds its global default: Flower merges
    # ``--run-config`` into pyproject's defaults, so a key set to exactly its global default
    # cannot be told from one left unset and takes the protocol's value too (any other value
    # is the user's and stays). The ServerApp logs what it applied; config.json records it.
    defaults: Mapping[str, Value] = field(default_factory=dict)
    # whether the run-config key ``model`` is the model this protocol trains (CTL's is its own)
    uses_model: bool = True
    # For the documentation's protocol table: what kind of protocol this is and what crosses
    # the network (``docs_gen.tables.protocol_table``).
    kind: str = ""
    exchanged: str = ""
    # the key of ``flowerbed reproduce`` that reproduces this protocol's paper ("" for none);
    # the protocol table links its published results (``docs/reproduction-<key>.md``)
    reproduction: str = ""

    def protocol(self, config: RunConfig) -> Protocol:
        return Protocol(tuple(self.phases(config)))
