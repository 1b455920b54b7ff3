"""A run folder's files as the report reads them (missing ones are None or empty)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

REPORT_FILE = "report.html"


PARTITIONS_PNG = "partitions.png"


def read_json(path: Path) -> Any:
    """The file's JSON, or None when it is missing or unreadable (a run killed mid-write)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_timings(path: Path) -> dict[int, float]:
    try:
        with open(path, newline="") as f:
            return {int(r["round"]): float(r["seconds"]) for r in csv.DictReader(f) if r["seconds"]}
    except (OSError, ValueError, KeyError):
        return {}


def number(value) -> float:
    """A history value as a float: NaN for None (JSON's NaN), a missing key or a non-number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def column(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """Rounds and values of ``key`` over the rows that hold a finite value."""
    pairs = [(row["round"], number(row.get(key))) for row in rows if "round" in row]
    pairs = [(r, v) for r, v in pairs if math.isfinite(v)]
    return [r for r, _ in pairs], [v for _, v in pairs]


class RunFolder:
    """The files of one run folder, read once (missing ones are None or empty)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir)
        self.config = read_json(self.path / "config.json") or {}
        self.status = read_json(self.path / "status.json") or {}
        self.history = [r for r in read_json(self.path / "history.json") or [] if "round" in r]
        self.timings = read_timings(self.path / "timings.csv")
        self.partitions = (read_json(self.path / "partitions.json") or {}).get("label_counts")
        self.best = read_json(self.path / "model_best.json")

    def file(self, name: str) -> Any:
        return read_json(self.path / name)

    @property
    def title(self) -> str:
        strategy, dataset = self.config.get("strategy"), self.config.get("dataset")
        what = f"{strategy} on {dataset}" if strategy and dataset else self.path.name
        clients = self.config.get("num-partitions")
        return what + (f" ({clients} clients)" if clients else "")
