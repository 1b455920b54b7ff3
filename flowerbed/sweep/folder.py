"""The sweep folder on disk: its resolved grid (``sweep.toml``) and one folder per point.

::

    <sweep>/sweep.toml                     the resolved grid (axes, [set], num-clients)
    <sweep>/points/<point>/                one per point (``grid.point_name``)
        <timestamp>-<point>/               a run folder per attempt (``status.json`` ...)
        point.log                          the runs' Flower log
        sweep_error.log                    why the last attempt failed, when it made no run folder
    <sweep>/summary.md, summary.csv, accuracy.png

A point is finished when one of its run folders says ``completed`` (``runtime.outcome``); a
rerun skips it and runs every other point again in a new run folder (the earlier attempts
stay, for their error logs). A folder whose ``sweep.toml`` holds another grid is refused,
with the differences named and nothing written; ``extend`` adds the new values of each axis
instead (the grid stays a full cross product: every new value meets every old one).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..core.results import atomic_write
from ..runtime.run_lock import settled_status
from ..settings import ConfigError, Value
from .grid import Axis, Point, SweepSpec, grid_from_toml

SPEC_FILE = "sweep.toml"
POINTS = "points"
POINT_LOG = "point.log"
ERROR_FILE = "sweep_error.log"
STATUS_FILE = "status.json"


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Value | list | dict) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml_value, value)) + "]"
    return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


def render_spec(spec: SweepSpec) -> str:
    """``sweep.toml``'s text, also a file ``flowerbed sweep --file`` reads: the same for the
    same grid (the order of fixed keys and of keys in a bundle does not matter; the order of
    axes and of their values does: it orders and names the points)."""
    lines = [
        "# flowerbed sweep: the resolved grid of this folder (a rerun must ask for the same;",
        "# flowerbed sweep --extend adds values to its axes)",
        f"num-clients = {spec.num_clients}",
        "",
        "[set]",
        *(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in sorted(spec.fixed.items())),
        "",
        "[grid]",
    ]
    for axis in spec.axes:
        if axis.bundled:
            value = _toml_value(
                {label: dict(sorted(v.items())) for label, v in zip(axis.labels, axis.values)}
            )
        else:
            value = _toml_value([v[axis.name] for v in axis.values])
        lines.append(f"{_toml_key(axis.name)} = {value}")
    return "\n".join(lines) + "\n"


def load_spec(sweep_dir: Path) -> SweepSpec:
    path = sweep_dir / SPEC_FILE
    if not path.is_file():
        raise ConfigError(f"{sweep_dir} is not a sweep folder: it has no {SPEC_FILE}")
    axes, fixed, num_clients = grid_from_toml(path)
    return SweepSpec(tuple(axes), fixed, num_clients)


def differences(stored: SweepSpec, asked: SweepSpec) -> list[str]:
    """What differs between two grids, one short phrase each."""
    found = []
    if stored.num_clients != asked.num_clients:
        found.append(f"num-clients {stored.num_clients} -> {asked.num_clients}")
    for key in dict.fromkeys([*stored.fixed, *asked.fixed]):
        old, new = stored.fixed.get(key, "unset"), asked.fixed.get(key, "unset")
        if old != new:
            found.append(f"set {key} {old!r} -> {new!r}")
    old_axes, new_axes = [a.name for a in stored.axes], [a.name for a in asked.axes]
    if old_axes != new_axes:
        found.append(f"grid axes {old_axes} -> {new_axes}")
    else:
        for old, new in zip(stored.axes, asked.axes):
            if (old.labels, old.values) != (new.labels, new.values):
                found.append(f"grid {old.name} {list(old.labels)} -> {list(new.labels)}")
    return found


def extended(stored: SweepSpec, asked: SweepSpec) -> SweepSpec:
    """``stored`` with the new values of ``asked``'s axes appended (same axes, same fixed
    values and clients, a label keeping its meaning), else ``ConfigError``."""
    same_axes = [a.name for a in stored.axes] == [a.name for a in asked.axes]
    if not same_axes or stored.fixed != asked.fixed or stored.num_clients != asked.num_clients:
        changed = [
            d for d in differences(stored, asked) if not d.startswith("grid ") or "axes" in d
        ]
        raise ConfigError(
            f"--extend adds values to the existing axes; this grid also changes: {'; '.join(changed)}"
        )
    axes = []
    for old, new in zip(stored.axes, asked.axes):
        labels, values = list(old.labels), list(old.values)
        for label, value in zip(new.labels, new.values):
            if label not in labels:
                labels.append(label)
                values.append(value)
            elif values[labels.index(label)] != value:
                raise ConfigError(
                    f"--extend: grid {old.name} {label!r} already means {values[labels.index(label)]}"
                )
        axes.append(Axis(old.name, tuple(labels), tuple(values), old.bundled))
    return SweepSpec(tuple(axes), stored.fixed, stored.num_clients)


def prepare(sweep_dir: Path, asked: SweepSpec, extend: bool = False) -> SweepSpec:
    """The grid to run in ``sweep_dir``, written to its ``sweep.toml``: ``asked`` in a new
    or empty folder, the stored grid when they are equal, the extended one with ``extend``;
    a differing grid is a ``ConfigError`` and nothing is written."""
    if (sweep_dir / SPEC_FILE).is_file():
        stored = load_spec(sweep_dir)
        if render_spec(stored) == render_spec(asked):
            return stored
        if not extend:
            raise ConfigError(
                f"{sweep_dir} holds another sweep ({'; '.join(differences(stored, asked))}):"
                " choose another --out, or --extend to add the new values to its grid"
            )
        spec = extended(stored, asked)
    elif sweep_dir.is_dir() and any(sweep_dir.iterdir()):
        raise ConfigError(
            f"--out {sweep_dir} is not empty and holds no {SPEC_FILE}: choose a new folder"
        )
    else:
        spec = asked
    atomic_write(sweep_dir / SPEC_FILE, lambda f: f.write(render_spec(spec)))
    return spec


def point_dir(sweep_dir: Path, point: Point) -> Path:
    return sweep_dir / POINTS / point.name


@dataclass(frozen=True)
class PointState:
    """How a point stands: ``completed`` (with its run folder), ``failed``, ``interrupted`` (a
    run stopped, or killed without a word: its process is gone), ``running`` (its process is
    alive) or ``pending`` (never started)."""

    status: str
    run_dir: Path | None = None
    reason: str = ""

    @property
    def finished(self) -> bool:
        return self.status == "completed"


def run_dirs(folder: Path) -> list[Path]:
    """The point's run folders, oldest first (their names start with a timestamp)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if (p / STATUS_FILE).is_file())


def run_status(run_dir: Path) -> dict:
    """The run folder's ``status.json``; a ``running`` run whose process is dead reads (and is
    rewritten) as ``interrupted`` (``runtime.run_lock.settled_status``)."""
    try:
        return settled_status(run_dir)
    except (OSError, ValueError):
        return {"status": "running", "reason": "unreadable status.json"}


def point_state(folder: Path) -> PointState:
    """The newest completed run folder wins; else the last attempt's failure."""
    attempts = [(run_dir, run_status(run_dir)) for run_dir in run_dirs(folder)]
    for run_dir, status in reversed(attempts):
        if status.get("status") == "completed":
            return PointState("completed", run_dir)
    if (folder / ERROR_FILE).is_file():
        first = (folder / ERROR_FILE).read_text().splitlines()[:1]
        return PointState("failed", None, first[0] if first else "")
    if attempts:
        run_dir, status = attempts[-1]
        return PointState(status.get("status", "running"), run_dir, status.get("reason", ""))
    return PointState("pending")
