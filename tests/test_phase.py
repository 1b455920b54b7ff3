"""Protocols of phases: every phase is checked before any runs, state is handed from phase to
phase, and a message type finds its phase's client half."""

from types import SimpleNamespace

import pytest
from flwr.app import MessageType

from flowerbed.catalog import get_protocol, parse_run_config
from flowerbed.protocols.exchange import Exchange
from flowerbed.protocols.fl_rounds import FLRounds
from flowerbed.protocols.kt_metrics import KTMetrics
from flowerbed.protocols.local_fit import LocalFit
from flowerbed.protocols.phase import Phase, Protocol
from flowerbed.settings import ConfigError
from flowerbed.trust.reply_checks import ReplyRules


class Recorder(Phase):
    MESSAGE_TYPES = ("train.recorder",)

    def __init__(self, name, log, fail_check=False):
        self.name, self.log, self.fail_check = name, log, fail_check

    def check(self, run):
        self.log.append(f"check {self.name}")
        if self.fail_check:
            raise ConfigError(f"{self.name} cannot run")

    def run(self, run, handoff):
        self.log.append(f"run {self.name} after {handoff.arrays}")
        handoff.arrays = self.name

    def reply_rules(self, config):
        return {f"train.{self.name}": RULES}


RULES = ReplyRules(list_metrics=frozenset())


class ExpectingGrid:
    """The recording grid's ``expect``, remembered."""

    def __init__(self):
        self.rules = {}

    def expect(self, rules):
        self.rules.update(rules)


def test_every_phase_is_checked_before_the_first_runs_and_state_is_handed_on():
    log = []
    run = SimpleNamespace(config=None, grid=ExpectingGrid())
    Protocol((Recorder("a", log), Recorder("b", log))).run(run=run)
    assert log == ["check a", "check b", "run a after None", "run b after a"]
    # every phase's reply rules reach the grid before any phase runs
    assert run.grid.rules == {"train.a": RULES, "train.b": RULES}
    log.clear()
    with pytest.raises(ConfigError, match="b cannot run"):
        Protocol((Recorder("a", log), Recorder("b", log, fail_check=True))).run(run=run)
    assert log == ["check a", "check b"]  # nothing ran


def test_registered_compositions():
    fedavg = get_protocol("fedavg").protocol(parse_run_config({}))
    assert [type(p) for p in fedavg.phases] == [FLRounds]
    with_metrics = get_protocol("fedavg").protocol(parse_run_config({"kt-metrics": True}))
    assert [type(p) for p in with_metrics.phases] == [FLRounds, KTMetrics]
    qkt = get_protocol("qkt").protocol(parse_run_config({"strategy": "qkt"}))
    assert [type(p) for p in qkt.phases] == [LocalFit, Exchange]
    assert qkt.phases[0].upload and qkt.phases[1].broadcast == "teachers"
    local = get_protocol("local").protocol(parse_run_config({"strategy": "local"}))
    assert not local.phases[0].upload and local.phases[1].broadcast == "none"


def test_message_types_find_their_phase():
    protocol = get_protocol("fedavg").protocol(parse_run_config({"kt-metrics": True}))
    assert isinstance(protocol.phase_for(MessageType.TRAIN), FLRounds)
    assert isinstance(protocol.phase_for(MessageType.EVALUATE), FLRounds)
    assert isinstance(protocol.phase_for("query.kt_metrics"), KTMetrics)
    with pytest.raises(ValueError, match="no phase of this protocol answers 'train.exchange'"):
        protocol.phase_for("train.exchange")
    with pytest.raises(ValueError, match="unknown broadcast 'all'"):
        Exchange("all", lambda job: None)
