"""Run-config keys, declared once: ``Setting`` (key, default, help, valid range or choices).

Every module that reads a run-config key declares it next to the code that uses it, as a
``Setting`` in its ``SETTINGS`` tuple; ``flowerbed.catalog`` gathers them all. From these
declarations come, with no second list anywhere:

* parsing and validation (``RunConfig.parse``): the type is the default's type; a value of the
  wrong type, outside the range or not among the choices raises ``ConfigError`` with one line
  naming the key, the bad value and what is valid, before any data is loaded;
* the defaults in pyproject's ``[tool.flwr.app.config]`` and the documentation's run-config
  reference, both generated from the declarations and checked by ``tests/test_catalog.py`` and
  ``tests/test_docs.py``.

This module imports nothing from flowerbed, so every other module can declare keys.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Value = bool | int | float | str


class ConfigError(ValueError):
    """A run-config value is invalid."""


@dataclass(frozen=True)
class Setting:
    """One run-config key.

    ``low``/``high`` bound numbers (inclusive unless ``low_open``/``high_open``); a float must
    also be finite (no NaN, no ±Inf); ``choices`` lists the valid strings (a callable is asked when the value is checked, for lists known
    only at run time, such as the installed MedMNIST flags); ``check(value, config)`` is a
    further test that may read other keys and returns an error message or ``None``.
    """

    key: str
    default: Value
    help: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None
    check: Callable[[Any, RunConfig], str | None] | None = None

    @property
    def type(self) -> type:
        return type(self.default)

    def valid_choices(self) -> tuple[str, ...]:
        choices = self.choices() if callable(self.choices) else self.choices
        return tuple(choices or ())

    def coerce(self, value: Any) -> Value:
        """``value`` as this key's type (TOML gives ints for floats, strings for anything)."""
        try:
            return _coerce(value, self.type)
        except (TypeError, ValueError):
            raise ConfigError(
                f"run-config {self.key}={value!r} is not a valid {self.type.__name__}"
            ) from None

    def validate(self, value: Value) -> None:
        """Raise ``ConfigError`` if ``value`` is out of range or not a valid choice."""
        if self.choices is not None and value not in self.valid_choices():
            choices = self.valid_choices()
            raise ConfigError(
                f"unknown {self.key} {value!r};{did_you_mean(str(value), choices)}"
                f" valid choices: {', '.join(choices)}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            expected = f"a finite number {self.range_text()}".rstrip()
            raise ConfigError(f"{self.key} must be {expected}, got {value}")
        if not self._in_range(value):
            raise ConfigError(f"{self.key} must be {self.range_text()}, got {value}")

    def _in_range(self, value: Value) -> bool:
        ok = True
        if self.low is not None:
            ok = ok and (value > self.low if self.low_open else value >= self.low)
        if self.high is not None:
            ok = ok and (value < self.high if self.high_open else value <= self.high)
        return bool(ok)

    def range_text(self) -> str:
        """``in (0, 1]``, ``at least 1``, ``> 0``, ``>= 0`` (for messages and the documentation)."""
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"in {left}{low}, {high}{right}"
        if self.low is not None:
            if self.low_open:
                return f"> {low}"
            return f"at least {low}" if self.type is int else f">= {low}"
        if self.high is not None:
            return f"< {high}" if self.high_open else f"<= {high}"
        return ""


def _number(x: float | None) -> str:
    return "" if x is None else (str(int(x)) if float(x).is_integer() else str(x))


def _coerce(value: Any, expected: type) -> Value:
    if expected is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        raise ValueError(value)
    if expected in (int, float) and isinstance(value, bool):
        raise ValueError(value)
    if expected is int and isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    return expected(value)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` did you mean 'x'?`` (``'x', 'y' or 'z'``: the three closest at most) for the
    candidates close to ``word`` (a typo's similarity: ``difflib``'s ratio at least 0.75);
    empty when none is."""
    close = [repr(c) for c in difflib.get_close_matches(word, list(candidates), 3, 0.75)]
    if not close:
        return ""
    names = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
    return f" did you mean {names}?"


def unknown_keys_message(unknown: Iterable[str], declared: Iterable[str]) -> str:
    """One line naming the unknown run-config keys, each with the closest declared ones, and
    where every key is listed (not the whole list of keys)."""
    keys, unknown = list(declared), sorted(unknown)
    where = "every key is listed by `flowerbed run --help` and in the docs' run-config reference"
    if len(unknown) == 1:
        hint = did_you_mean(unknown[0], keys)
        return f"unknown run-config key {unknown[0]!r}{';' + hint if hint else ''} ({where})"
    named = []
    for key in unknown:
        hint = did_you_mean(key, keys).strip()
        named.append(f"{key!r} ({hint})" if hint else repr(key))
    return f"unknown run-config keys {', '.join(named)} ({where})"


@dataclass(frozen=True)
class Concern:
    """One concern of a run (a feature, or a part of the machinery): its run-config keys and
    its own checks of them, which ``flowerbed.catalog`` and ``runtime.context.start_run`` call
    for every concern in turn, so that no check of a concern's keys lives outside it.

    ``check(config)``: what the run config alone can refuse; every process that parses the
    run config runs it (the ServerApp and each ClientApp), so it must be cheap.
    ``check_machine(config)``: the ServerApp's look at this machine before anything is loaded
    (packages, memory, disk). ``check_federation(config, num_partitions)``: the ServerApp's,
    once the handshake has counted the partitions (ids that name no partition, sizes that
    follow the federation). Each raises ``ConfigError`` with one line naming the key."""

    title: str  # its table in the run-config reference
    settings: tuple[Setting, ...] = ()
    check: Callable[[RunConfig], None] | None = None
    check_machine: Callable[[RunConfig], None] | None = None
    check_federation: Callable[[RunConfig, int], None] | None = None


def index_settings(settings: Iterable[Setting]) -> dict[str, Setting]:
    """``{key: setting}``; the same key declared twice (by two modules) is an error."""
    out: dict[str, Setting] = {}
    for setting in settings:
        if setting.key in out and out[setting.key] is not setting:
            raise ValueError(f"run-config key {setting.key!r} is declared twice")
        out[setting.key] = setting
    return out


class RunConfig(Mapping[str, Value]):
    """A parsed, validated run config: ``config["learning-rate"]`` or ``config.learning_rate``.

    Build it with ``RunConfig.parse(run_config, declared)``: every declared key is present
    (the run config's value, else the declared default), typed and checked.
    """

    def __init__(
        self, values: Mapping[str, Value], defaults: Mapping[str, Value] | None = None
    ) -> None:
        self._values = dict(values)
        self._defaults = dict(defaults or {})  # the declared defaults, when parsed
        self._protocol_defaults: dict[str, Value] = {}  # applied by catalog.parse_run_config

    @classmethod
    def parse(cls, run_config: Mapping[str, Any], declared: Mapping[str, Setting]) -> RunConfig:
        """Type and check ``run_config`` against the ``declared`` keys (``ConfigError``)."""
        unknown = sorted(set(run_config) - set(declared))
        if unknown:
            raise ConfigError(unknown_keys_message(unknown, declared))
        values = {
            key: setting.coerce(run_config[key]) if key in run_config else setting.default
            for key, setting in declared.items()
        }
        config = cls(values, {key: setting.default for key, setting in declared.items()})
        for key, setting in declared.items():
            setting.validate(values[key])
        for key, setting in declared.items():
            message = setting.check(values[key], config) if setting.check is not None else None
            if message:
                raise ConfigError(message)
        return config

    def __getitem__(self, key: str) -> Value:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str) -> Value:
        key = name.replace("_", "-")
        values = self.__dict__.get("_values", {})
        if key in values:
            return values[key]
        raise AttributeError(f"run config has no key {key!r}")

    def __repr__(self) -> str:
        return f"RunConfig({self._values!r})"

    def replace(self, **changes: Value) -> RunConfig:
        """A copy with some keys changed (kebab-case keys given with underscores)."""
        changed = {**self._values, **{k.replace("_", "-"): v for k, v in changes.items()}}
        return RunConfig(changed, self._defaults).with_protocol_defaults(self._protocol_defaults)

    def with_protocol_defaults(self, applied: Mapping[str, Value]) -> RunConfig:
        """This config, recording that ``applied`` (key: value) came from the protocol's own
        defaults (``ProtocolSpec.defaults``), not from the user or the global defaults."""
        self._protocol_defaults = dict(applied)
        return self

    @property
    def protocol_defaults(self) -> dict[str, Value]:
        """The keys whose value is the protocol's own default, with those values."""
        return dict(self._protocol_defaults)

    def to_dict(self) -> dict[str, Value]:
        return dict(self._values)

    @property
    def defaults(self) -> dict[str, Value]:
        """The declared default of every key (empty for a config that was not parsed)."""
        return dict(self._defaults)

    @property
    def data_path(self) -> Path:
        return Path(str(self["data-dir"])).expanduser().resolve()

    @property
    def output_path(self) -> Path:
        return Path(str(self["output-dir"])).expanduser().resolve()


def comma_list(text: str) -> list[str]:
    """``"a, b,c"`` -> ``["a", "b", "c"]`` (the run config's way of writing a list)."""
    return [item.strip() for item in str(text).replace(",", " ").split() if item.strip()]
