"""The catalog: every registered protocol and every run-config key.

``PROTOCOLS`` maps a run-config ``strategy`` name to its ``ProtocolSpec``:

* each algorithm of ``flowerbed.strategies`` (one Flower strategy) becomes the protocol
  [FL rounds] (+ [knowledge-transfer metrics] with ``kt-metrics=true``) (+ [distillation]
  with ``distill-objective`` set: the global model distilled into a compact student);
* each method of ``flowerbed.methods`` is already a protocol (one-shot: local fit, exchange;
  CTL: share, collaboration rounds; FedSA: teachers, weak target, amalgamation,
  adaptation).

``SETTINGS`` is every declared run-config key, in the order of pyproject's
``[tool.flwr.app.config]`` and of the documentation's run-config reference, built from
``SETTING_GROUPS`` (the keys by topic): the keys every run reads, then each protocol's own.
``parse_run_config`` types and checks a run config against them and applies the chosen
protocol's own defaults (``ProtocolSpec.defaults``: FedSA's ``server-fraction``, CTL's
``dataset``, the quantum baselines' ``model``) to the keys that hold their global default, then
the data set's own model (``data.registry.fitting_model``: ``mlp`` for tabular data, ...) when
``model`` still holds its global default, so that every data set runs by its name alone.

To add a protocol: write its file (``strategies/<name>.py`` with a ``SPEC``, or a method with
a ``ProtocolSpec``) and list it below; docs/architecture.md has the checklists.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from .core.device import SETTINGS as DEVICE_SETTINGS
from .data import classes, federation, site_reports
from .data.registry import fitting_model
from .docs_gen.tables import protocol_table, write_docs
from .methods import ctl, fedsa, one_shot_baselines, qkt
from .models import SETTINGS as MODEL_SETTINGS
from .privacy import modes as privacy_modes
from .privacy.server import PrivacyHook
from .protocols import distill, fl_rounds, kt_metrics
from .protocols.distill import OFF, Distill
from .protocols.fl_rounds import FLRounds
from .protocols.kt_metrics import KTMetrics
from .protocols.phase import ProtocolSpec
from .protocols.rounds_hook import RoundsHook
from .runtime import virtual_clients
from .runtime.context import SETTINGS as RUN_SETTINGS
from .runtime.preflight import check_model_fits, check_resources
from .runtime.resume import SETTINGS as RESUME_SETTINGS
from .runtime.trackers import SETTINGS as TRACKER_SETTINGS
from .runtime.trackers import check_trackers
from .settings import Concern, ConfigError, RunConfig, Setting, index_settings
from .strategies import STRATEGIES, StrategySpec
from .training.loops import SETTINGS as TRAINING_SETTINGS
from .trust import attacks, fault_injection

# what every FL-rounds phase runs with around its strategy (protocols.rounds_hook), in order:
# one fresh hook of each per phase
ROUNDS_HOOKS: tuple[Callable[[], RoundsHook], ...] = (PrivacyHook,)


def fl_protocol(spec: StrategySpec) -> ProtocolSpec:
    """A Flower strategy as a protocol: FL rounds (with ``ROUNDS_HOOKS``: differential
    privacy), then the metrics phase and the distillation phase if asked for."""

    def phases(config: RunConfig):
        metrics = (KTMetrics(spec.build_model),) if config["kt-metrics"] else ()
        distill = (Distill(spec.build_model),) if config.distill_objective != OFF else ()
        return (FLRounds(spec, [make() for make in ROUNDS_HOOKS]), *metrics, *distill)

    return ProtocolSpec(
        name=spec.name,
        summary=spec.summary,
        paper=spec.paper,
        phases=phases,
        settings=spec.settings,
        build_model=spec.build_model,
        defaults=spec.defaults,
        kind=spec.kind,
        exchanged=spec.exchanged,
        reproduction=spec.reproduction,
    )


PROTOCOLS: dict[str, ProtocolSpec] = {
    protocol.name: protocol
    for protocol in (
        *(fl_protocol(spec) for spec in STRATEGIES.values()),
        # one-shot knowledge transfer
        *qkt.PROTOCOLS,
        *one_shot_baselines.PROTOCOLS,
        # decentralised: predictions on shared representatives, no global model
        ctl.PROTOCOL,
        # knowledge amalgamation: private teachers into the server's target model
        fedsa.PROTOCOL,
    )
}

STRATEGY = Setting(
    "strategy",
    "fedavg",
    "federated algorithm or protocol, see [Protocols](docs/index.md#protocols)",
    choices=tuple(PROTOCOLS),
)

# The concerns of a run, each with its run-config keys and its own checks of them
# (``settings.Concern``), in the order of ``SETTINGS`` (and of pyproject's
# ``[tool.flwr.app.config]``); the documentation's run-config reference has one table per
# concern with keys (``flowerbed.docs_gen.tables``). ``parse_run_config`` runs every ``check``,
# ``runtime.context.start_run`` every ``check_machine`` and ``check_federation``. A check that
# must know the FL strategies (``STRATEGIES``) gets them here.
CONCERNS: tuple[Concern, ...] = (
    Concern("Protocol", (STRATEGY,)),
    Concern(
        "Data and partitions", (*federation.SETTINGS, *site_reports.SETTINGS, *classes.SETTINGS)
    ),
    Concern("Model", MODEL_SETTINGS),
    Concern(
        "Run",
        RUN_SETTINGS,
        check_machine=check_resources,  # memory and disk, before anything is loaded
        check_federation=check_resources,  # again with the parts the federation sizes
    ),
    Concern(
        "FL rounds",
        fl_rounds.SETTINGS,
        check=partial(fl_rounds.check_max_update_norm, strategies=STRATEGIES),
    ),
    Concern("Resume", RESUME_SETTINGS),
    Concern("Virtual clients", virtual_clients.SETTINGS, check=virtual_clients.check),
    Concern("Local training", TRAINING_SETTINGS),
    Concern("Device", DEVICE_SETTINGS),
    Concern("Trackers", TRACKER_SETTINGS, check_machine=check_trackers),
    Concern(
        "Fault injection",
        fault_injection.SETTINGS,
        check_federation=fault_injection.check_federation,
    ),
    Concern(
        "Attacks",
        attacks.SETTINGS,
        check=partial(attacks.check_model_poisoning, strategies=STRATEGIES),
        check_federation=attacks.announce_attack,
    ),
    Concern(
        "Differential privacy",
        privacy_modes.SETTINGS,
        check=partial(privacy_modes.check_run_config, strategies=STRATEGIES),
    ),
    *(Concern(f"Protocol `{name}`", protocol.settings) for name, protocol in PROTOCOLS.items()),
    Concern("Knowledge-transfer metrics", kt_metrics.SETTINGS),
    Concern(
        "Distillation",
        distill.SETTINGS,
        check=partial(distill.check_distilled_strategy, strategies=STRATEGIES),
    ),
)

# the keys by topic, for the run-config reference
SETTING_GROUPS: dict[str, tuple[Setting, ...]] = {
    concern.title: concern.settings for concern in CONCERNS if concern.settings
}

SETTINGS: dict[str, Setting] = index_settings(
    setting for group in SETTING_GROUPS.values() for setting in group
)


def parse_run_config(run_config: Mapping[str, Any]) -> RunConfig:
    """Flower's ``context.run_config`` typed and checked (``ConfigError`` on a bad value),
    with the protocol's own defaults applied (``with_protocol_defaults``)."""
    config = with_protocol_defaults(run_config, RunConfig.parse(run_config, SETTINGS))
    config = with_dataset_model(run_config, config)
    for concern in CONCERNS:
        if concern.check is not None:
            concern.check(config)
    needs_stored_state = {"resume": config.resume, "virtual-clients": config.virtual_clients}
    for key, value in needs_stored_state.items():  # both keep client state only on disk
        if value and not PROTOCOLS[config.strategy].protocol(config).resumable:
            raise ConfigError(
                f"{key}={value!r}: strategy={config.strategy!r} cannot {RESUMABLE_ONLY[key]};"
                " only runs made of FL rounds do (the strategies"
                f" {', '.join(STRATEGIES)}, without kt-metrics or distill-objective)"
            )
    return config


# what a protocol that keeps client state outside the FL rounds' checkpoints cannot do
RESUMABLE_ONLY = {"resume": "resume", "virtual-clients": "run virtual clients"}


def with_protocol_defaults(run_config: Mapping[str, Any], config: RunConfig) -> RunConfig:
    """``config`` with ``strategy``'s own defaults (``ProtocolSpec.defaults``) put in every
    key that holds its global default, parsed and checked again with them; the keys applied
    are ``config.protocol_defaults``. The one place they are applied: the ServerApp and every
    ClientApp parse the same run config, so they agree."""
    applied = {
        key: SETTINGS[key].coerce(value)
        for key, value in PROTOCOLS[config.strategy].defaults.items()
        if config[key] == SETTINGS[key].default
    }
    if not applied:
        return config
    return RunConfig.parse({**run_config, **applied}, SETTINGS).with_protocol_defaults(applied)


def with_dataset_model(run_config: Mapping[str, Any], config: RunConfig) -> RunConfig:
    """``config`` with the data set's own model (``fitting_model``) when ``model`` holds its
    global default and that default does not fit the data; recorded with the protocol's own
    defaults (``config.protocol_defaults``: the values this run took from its choices, not
    from the user), as ``dataset_model_note`` logs."""
    model = fitting_model(config.dataset)
    if not PROTOCOLS[config.strategy].uses_model or model in (None, config.model):
        return config
    if config.model != SETTINGS["model"].default:
        return config
    applied = {**config.protocol_defaults, "model": model}
    return RunConfig.parse({**run_config, **applied}, SETTINGS).with_protocol_defaults(applied)


def check_model(config: RunConfig, overrides: Mapping[str, Any] | None = None) -> None:
    """``model`` can take the data (``runtime.preflight.check_model_fits``), for a protocol
    that trains it (CTL trains its own); the ServerApp, ``flowerbed run`` and ``flowerbed
    sweep`` ask before anything is loaded. ``overrides``: the keys the user set (the
    commands know them; Flower's run config holds every default): a ``model`` set there is
    checked as given, even the global default that the data set's own model replaced."""
    if not PROTOCOLS[config.strategy].uses_model:
        return
    if overrides is not None and "model" in overrides and dataset_model_applied(config):
        config = RunConfig.parse({**overrides, "dataset": config.dataset}, SETTINGS)
    check_model_fits(config)


def dataset_model_applied(config: RunConfig) -> bool:
    """Whether ``model`` came from the data set (``with_dataset_model``), not the protocol."""
    own = PROTOCOLS[config.strategy].defaults
    return "model" in config.protocol_defaults and "model" not in own


def protocol_defaults_note(config: RunConfig) -> str:
    """The log line naming the defaults a run took from its protocol and its data set
    (``""``: none)."""
    applied = dict(config.protocol_defaults)
    notes = []
    if dataset_model_applied(config):
        notes.append(
            f"dataset={config.dataset!r} uses its own model={applied.pop('model')!r} (set model"
            " to change it)"
        )
    if applied:
        values = ", ".join(f"{key}={value!r}" for key, value in applied.items())
        default = "default" if len(applied) == 1 else "defaults"
        key = "the key" if len(applied) == 1 else "a key"
        notes.insert(
            0,
            f"strategy={config.strategy!r} uses its own {default} {values} (set {key} to change it)",
        )
    return "; ".join(notes)


def get_protocol(name: str) -> ProtocolSpec:
    STRATEGY.validate(name)
    return PROTOCOLS[name]


def pyproject_defaults() -> str:
    """``[tool.flwr.app.config]`` of pyproject.toml, generated from the declarations."""

    def toml(value: Any) -> str:
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, str):
            return f'"{value}"'
        return repr(value)

    return "\n".join(f"{key} = {toml(s.default)}" for key, s in SETTINGS.items())


PYPROJECT_START = "[tool.flwr.app.config]\n"


def write_generated(app_dir: Path) -> None:
    """Rewrite everything generated from the declarations, in place (``python -m
    flowerbed.catalog --write``, after declaring or changing a key or a protocol):
    pyproject's run-config defaults and the documentation's generated pieces: the README's
    protocol table, the strategies table, the architecture layout, the documentation lists and
    the reference pages (``flowerbed.docs_gen.tables``)."""
    pyproject = app_dir / "pyproject.toml"
    text = pyproject.read_text()
    start = text.index(PYPROJECT_START) + len(PYPROJECT_START)
    end = text.find("\n[", start)
    rest = text[end:] if end >= 0 else "\n"
    pyproject.write_text(text[:start] + pyproject_defaults() + rest)
    write_docs(app_dir, SETTING_GROUPS, PROTOCOLS)


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        write_generated(Path(__file__).resolve().parent.parent)
    else:
        print(protocol_table(PROTOCOLS), pyproject_defaults(), sep="\n\n")
