"""Results on disk: one folder per run, every file written atomically (write, then rename).

A run folder holds ``config.json`` (the resolved run config), ``partitions.csv`` and
``partitions.json`` (label counts per client), ``history.json`` and ``history.csv`` (one row per
round, ``runtime.history``), ``accuracy.png``, ``model.pt`` (the final global model's state
dict) and, for knowledge-transfer metrics, ``kt_metrics.json``/``.csv``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _new_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0o666 less the process's umask (read by
    setting it, so once, at import, before any thread of this process writes results)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


NEW_FILE_MODE = _new_file_mode()


def atomic_write(path: Path, write: Callable[[io.IOBase], None], binary: bool = False) -> None:
    """Write through ``write(file)`` into a temporary file beside ``path``, then rename it.

    The file gets the mode a plain ``open(path, "w")`` would: the existing file's, or for a new
    one 0o666 less the umask (``mkstemp`` alone makes it 0o600: a run folder that other users
    or a container's other account could not read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, path.stat().st_mode & 0o777 if path.exists() else NEW_FILE_MODE)
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"newline": ""})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (np.floating, np.integer)):
        return _jsonable(value.item())
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def as_written(data: Any) -> Any:
    """``data`` as ``write_json`` writes it and ``json.load`` reads it back."""
    return json.loads(json.dumps(_jsonable(data)))


def write_json(path: Path, data: Any) -> None:
    atomic_write(path, lambda f: json.dump(_jsonable(data), f, indent=2))


def write_csv(path: Path, rows: list[dict], columns: tuple[str, ...] | list[str]) -> None:
    def write(f):
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    k: ("" if v is None or (isinstance(v, float) and math.isnan(v)) else v)
                    for k, v in row.items()
                }
            )

    atomic_write(path, write)


def round_seconds(run_dir: Path) -> list[float]:
    """Wall-clock seconds of rounds 1, 2, ... of a run folder (its ``timings.csv``)."""
    with open(Path(run_dir) / "timings.csv", newline="") as f:
        return [float(row["seconds"]) for row in csv.DictReader(f) if row["seconds"]]


def make_run_dir(output_dir: Path, name: str) -> Path:
    """A new, unique folder ``<output_dir>/<timestamp>-<name>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(1000):
        run_dir = output_dir / (f"{stamp}-{name}" + (f"-{attempt}" if attempt else ""))
        try:
            run_dir.mkdir(parents=True)
            return run_dir
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a new run folder under {output_dir}")


def write_partition_table(run_dir: Path, counts: np.ndarray) -> None:
    rows = [
        {
            "partition_id": pid,
            **{f"class_{c}": int(n) for c, n in enumerate(row)},
            "total": int(row.sum()),
        }
        for pid, row in enumerate(counts)
    ]
    columns = ["partition_id", *[f"class_{c}" for c in range(counts.shape[1])], "total"]
    write_csv(run_dir / "partitions.csv", rows, columns)
    write_json(run_dir / "partitions.json", {"label_counts": counts.tolist()})


def plot_accuracy(path: Path, history: list[dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [row["round"] for row in history]
    fig, ax = plt.subplots(figsize=(6, 4))
    curves = (
        ("central_accuracy", "o", "global model, test set"),
        ("federated_accuracy", "o", "global model, clients' local test (weighted)"),
        ("client_models_test_accuracy_mean", "o", "clients' own models, test set (mean)"),
        ("client_accuracy", "s", "clients, local test (sample-weighted)"),
        ("client_accuracy_unweighted_mean", "s", "clients, local test (unweighted mean)"),
    )
    for key, marker, label in curves:
        values = [row.get(key) for row in history]
        if any(v is not None and not math.isnan(v) for v in values):
            values = [np.nan if v is None else v for v in values]
            ax.plot(rounds, values, marker=marker, label=label)
    ax.set_xlabel("round")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=100), binary=True)
    plt.close(fig)


def save_model(path: Path, state_dict: dict) -> None:
    import torch

    host = {key: value.cpu() for key, value in state_dict.items()}  # loadable on any machine
    atomic_write(path, lambda f: torch.save(host, f), binary=True)
