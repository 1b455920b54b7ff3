"""The ClientApp's table: a handler for every message type any protocol's phases can send, none
that nobody sends, and the Flower mods around each by a rule that names no algorithm."""

import pytest
from flwr.app import Context, MessageType, RecordDict

from flowerbed import client_app
from flowerbed.catalog import PROTOCOLS, SETTINGS, parse_run_config
from flowerbed.client_app import HANDLERS, phase_message_types
from flowerbed.inprocess import resolve_run_config
from flowerbed.protocols.phase import Phase
from flowerbed.runtime.client_state import keep_client_state
from flowerbed.runtime.virtual_clients import act_as_client
from flowerbed.settings import ConfigError


def variations() -> list[dict]:
    """No override, then every other value of each boolean or multiple-choice key, one at a
    time: whatever a phase's presence depends on (``kt-metrics``, ``distill-objective``,
    ``fedsa-selection``, ...)."""
    out: list[dict] = [{}]
    for setting in SETTINGS.values():
        if setting.key == "strategy":
            continue
        if isinstance(setting.default, bool):
            out.append({setting.key: not setting.default})
            continue
        choices = setting.choices() if callable(setting.choices) else setting.choices
        out += [{setting.key: value} for value in choices or () if value != setting.default]
    return out


def sent_message_types() -> set[str]:
    """The message types of the phases every protocol composes under every variation."""
    base, types = resolve_run_config({}), set()
    for name, spec in PROTOCOLS.items():
        for overrides in variations():
            try:
                config = parse_run_config({**base, **overrides, "strategy": name})
            except ConfigError:  # a combination the protocol refuses
                continue
            for phase in spec.protocol(config).phases:
                types.update(phase.MESSAGE_TYPES)
    return types


def test_every_message_type_a_protocol_sends_has_a_handler_and_no_other():
    sent = sent_message_types()
    assert MessageType.TRAIN in sent and "query.kt_metrics" in sent  # the enumeration reaches
    assert set(HANDLERS) == sent  # optional phases too


def test_a_phase_defined_outside_flowerbed_is_not_the_apps():
    class Elsewhere(Phase):
        MESSAGE_TYPES = ("train.elsewhere",)

    assert "train.elsewhere" not in phase_message_types()


def test_the_mods_follow_the_flower_category():
    names = {t: [mod.__name__ for mod in mods] for t, mods in HANDLERS.items()}
    # a Flower strategy's rounds: handled as a virtual client's, state kept for resume; the
    # training reply attackable, privatised, and failing on purpose in tests
    assert names.pop(MessageType.TRAIN) == [
        "act_as_client",
        "keep_client_state",
        "fail_on_purpose",
        "attack_update",
        "privacy_mod",
    ]
    assert HANDLERS[MessageType.EVALUATE] == [act_as_client, keep_client_state]
    names.pop(MessageType.EVALUATE)
    for message_type, mods in names.items():  # a phase's own actions
        expected = ["fail_on_purpose"] if message_type.startswith("train.") else []
        assert mods == expected, message_type


def test_the_run_config_is_parsed_once_per_process_and_a_bad_one_every_time(monkeypatch):
    calls = []

    def counted(run_config):
        calls.append(dict(run_config))
        return parse_run_config(run_config)

    monkeypatch.setattr(client_app, "parse_run_config", counted)
    client_app._parsed.cache_clear()
    node = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    for run_config in (resolve_run_config({}), resolve_run_config({}), {"seed": 7}):
        node.run_config = dict(run_config)
        config = client_app.run_config_of(node)
        assert config.seed == run_config.get("seed", 42)
    assert len(calls) == 2  # the second message's equal run config was not parsed again
    node.run_config = {"local-epochs": -1}
    for _ in range(2):
        with pytest.raises(ConfigError, match="local-epochs"):
            client_app.run_config_of(node)
    assert len(calls) == 4
    client_app._parsed.cache_clear()
