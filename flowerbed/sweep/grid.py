"""A sweep's grid: the run-config values to cross and the fixed ones, expanded into points.

A grid is an ordered list of axes. An axis lists the values of one run-config key
(``seed``: 0, 1, 2) or names bundles of keys that change together (``partition``:
``dir01`` -> ``partitioner='dirichlet' dirichlet-alpha=0.1``). Crossing the axes gives the
points; a point's run config is the fixed values (``set``) with its axis values on top.

Values get the run config's types (``Setting.coerce``: ``"0"`` from the command line is the
int 0 for ``seed``, 1 from TOML the float 1.0 for ``learning-rate``), and ``check_grid`` asks
the catalog to parse every point's run config before anything runs: an unknown key or a bad
value stops the sweep with the catalog's one-line message. The sweep places every run itself,
so ``output-dir`` and ``run-name`` cannot be set.

A point's name (its folder) is built from its values, ``strategy-fedavg_seed-0``: readable,
the same on every rerun, with a short hash of the values appended when characters had to be
replaced or the name would be long.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog import SETTINGS, check_model, parse_run_config
from ..runtime.preflight import check_data_files
from ..settings import ConfigError, Value

SEED_KEY = "seed"  # the axis the summary averages over
PLACED_BY_SWEEP = ("output-dir", "run-name")
MAX_NAME = 80
DEFAULT_NUM_CLIENTS = 10


def typed(key: str, value: Any) -> Value:
    """``value`` with the run config's type for ``key`` (unknown keys are left for the
    catalog's check to name); quotes around a command-line string are dropped."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    if key in SETTINGS:
        return SETTINGS[key].coerce(value)
    if not isinstance(value, (bool, int, float, str)):
        raise ConfigError(f"run-config {key}={value!r} is not a bool, number or string")
    return value


def label_of(value: Value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


@dataclass(frozen=True)
class Axis:
    """One dimension of the grid: ``labels[i]`` names the run-config overrides ``values[i]``.

    ``bundled`` axes name groups of keys (``partition``); the others list one key's values,
    labelled by the value itself."""

    name: str
    labels: tuple[str, ...]
    values: tuple[dict[str, Value], ...]
    bundled: bool = False

    @classmethod
    def of_key(cls, key: str, values: list[Any]) -> Axis:
        typed_values = [typed(key, v) for v in values]
        return cls(key, tuple(map(label_of, typed_values)), tuple({key: v} for v in typed_values))

    @classmethod
    def of_bundles(cls, name: str, bundles: dict[str, dict[str, Any]]) -> Axis:
        values = tuple({k: typed(k, v) for k, v in bundle.items()} for bundle in bundles.values())
        return cls(name, tuple(str(label) for label in bundles), values, bundled=True)

    def keys(self) -> set[str]:
        return {key for value in self.values for key in value}


@dataclass(frozen=True)
class Point:
    """One run of the sweep: its label per axis and its run-config overrides."""

    name: str
    labels: dict[str, str]
    overrides: dict[str, Value]

    def configuration(self) -> tuple[tuple[str, str], ...]:
        """What the summary groups by: the labels of every axis but the seed."""
        return tuple((axis, label) for axis, label in self.labels.items() if axis != SEED_KEY)


@dataclass(frozen=True)
class SweepSpec:
    """The resolved grid: axes to cross, fixed overrides, clients per run."""

    axes: tuple[Axis, ...]
    fixed: dict[str, Value] = field(default_factory=dict)
    num_clients: int = DEFAULT_NUM_CLIENTS

    def points(self) -> list[Point]:
        points = []
        for combination in itertools.product(*(range(len(a.labels)) for a in self.axes)):
            labels = {a.name: a.labels[i] for a, i in zip(self.axes, combination)}
            overrides = dict(self.fixed)
            for axis, i in zip(self.axes, combination):
                overrides.update(axis.values[i])
            points.append(Point(point_name(labels), labels, overrides))
        return points

    def axis(self, name: str) -> Axis:
        return next(a for a in self.axes if a.name == name)


def point_name(labels: dict[str, str]) -> str:
    """``{"strategy": "fedavg", "seed": "0"}`` -> ``strategy-fedavg_seed-0`` (module doc)."""
    readable = "_".join(f"{axis}-{label}" for axis, label in labels.items())
    safe = re.sub(r"[^A-Za-z0-9._+-]", "-", readable)
    if safe == readable and len(safe) <= MAX_NAME:
        return safe
    digest = hashlib.sha1(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:8]
    return f"{safe[: MAX_NAME - 9]}-{digest}"


def split_assignment(item: str, option: str) -> tuple[str, str]:
    key, equals, text = item.partition("=")
    if not equals or not key.strip():
        raise ConfigError(f"{option} {item!r}: expected key=value")
    return key.strip(), text.strip()


def grid_from_cli(grid: list[str], fixed: list[str]) -> tuple[list[Axis], dict[str, Value]]:
    """``--grid key=v1,v2`` (comma-separated values; a value holding a comma goes in a TOML
    file) and ``--set key=value``."""
    axes = []
    for item in grid:
        key, text = split_assignment(item, "--grid")
        values = [v.strip() for v in text.split(",") if v.strip()]
        if not values:
            raise ConfigError(f"--grid {key}: no values; give key=v1,v2,...")
        axes.append(Axis.of_key(key, values))
    sets = dict(split_assignment(item, "--set") for item in fixed)
    return axes, {key: typed(key, value) for key, value in sets.items()}


def grid_from_toml(path: Path) -> tuple[list[Axis], dict[str, Value], int | None]:
    """``[grid]``: ``key = [values]`` or a ``[grid.<axis>]`` table of named bundles;
    ``[set]``: fixed values; optional top-level ``num-clients``."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"sweep file {path}: {error}") from None
    unknown = sorted(set(data) - {"grid", "set", "num-clients"})
    if unknown:
        raise ConfigError(
            f"sweep file {path}: unknown entries {unknown}; valid: grid, set, num-clients"
        )
    axes = []
    for name, values in data.get("grid", {}).items():
        if isinstance(values, list):
            if not values:
                raise ConfigError(f"sweep file {path}: grid {name} = []: no values")
            axes.append(Axis.of_key(name, values))
        elif isinstance(values, dict) and all(isinstance(v, dict) for v in values.values()):
            if not values:
                raise ConfigError(f"sweep file {path}: grid {name}: no bundles")
            axes.append(Axis.of_bundles(name, values))
        else:
            raise ConfigError(
                f"sweep file {path}: grid {name} must be a list of values or a table of named"
                " bundles ({label} = {key = value, ...})"
            )
    fixed = {key: typed(key, value) for key, value in data.get("set", {}).items()}
    return axes, fixed, data.get("num-clients")


def check_grid(spec: SweepSpec) -> list[Point]:
    """The points of ``spec``, after checking the grid and every point's run config
    (``ConfigError``, one line, before anything runs or is written)."""
    if not spec.axes:
        raise ConfigError(
            "empty grid: give at least one --grid key=v1,v2,... or a [grid] table in the file"
        )
    if not isinstance(spec.num_clients, int) or spec.num_clients < 1:
        raise ConfigError(f"num-clients must be an integer, at least 1, got {spec.num_clients!r}")
    owners: dict[str, str] = {key: "[set]" for key in spec.fixed}
    for axis in spec.axes:
        if not axis.labels:
            raise ConfigError(f"grid {axis.name}: no values")
        repeated = sorted({label for label in axis.labels if axis.labels.count(label) > 1})
        if repeated:
            raise ConfigError(f"grid {axis.name}: {repeated[0]!r} is listed twice")
        if sum(a.name == axis.name for a in spec.axes) > 1:
            raise ConfigError(f"grid {axis.name} is given twice")
        for key in sorted(axis.keys()):
            if key in owners:
                raise ConfigError(f"run-config {key} is in grid {axis.name} and in {owners[key]}")
            owners[key] = f"grid {axis.name}"
    for key in PLACED_BY_SWEEP:
        if key in owners:
            raise ConfigError(
                f"{key} is set by the sweep (every run goes under <sweep folder>/points/); "
                f"remove it from {owners[key]}"
            )
    points = spec.points()
    for point in points:
        config = parse_run_config(point.overrides)
        check_data_files(config)
        check_model(config, point.overrides)
    return points
