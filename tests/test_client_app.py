"""The ClientApp's table: a handler for every message type any protocol's phases can send, none
that nobody sends, and the Flower mods around each by a rule that names no algorithm."""

from flwr.app import MessageType

from flowerbed.catalog import PROTOCOLS, SETTINGS, parse_run_config
from flowerbed.client_app import HANDLERS, phase_message_types
from flowerbed.inprocess import resolve_run_config
from flowerbed.protocols.phase import Phase
from flowerbed.runtime.client_state import keep_client_state
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
    # a Flower strategy's rounds: state kept for resume; the training reply attackable,
    # privatised, and failing on purpose in tests
    assert names.pop(MessageType.TRAIN) == [
        "keep_client_state",
        "fail_on_purpose",
        "attack_update",
        "privacy_mod",
    ]
    assert HANDLERS[MessageType.EVALUATE] == [keep_client_state]
    names.pop(MessageType.EVALUATE)
    for message_type, mods in names.items():  # a phase's own actions
        expected = ["fail_on_purpose"] if message_type.startswith("train.") else []
        assert mods == expected, message_type
