"""The run's history: one row per round, logged in one line and rewritten on disk each round.

A row closes the recording grid's record of its round (bytes, failures, per-client metrics,
seconds). Two accuracies on the held-out test set, never mixed in one column:

* ``central_accuracy`` / ``central_loss``: the protocol's one global model (FL rounds);
* ``federated_accuracy`` / ``federated_loss``: the same model on the clients' local test
  splits, sample-weighted, when the server holds no test set (``server-data``); its spread
  over the clients is ``client_accuracy_std``;
* ``client_models_test_accuracy_mean``: the mean over clients of their own models' accuracy
  (one-shot knowledge transfer, where each client ends with a model of its own).

Client accuracy is one convention, Flower's: ``client_accuracy`` is the sample-weighted mean of
the clients' accuracies on their local test splits (the number Flower's log prints);
``client_accuracy_unweighted_mean`` the plain mean over clients (the only one where the replies
carry no test-set size: one-shot protocols, CTL, FedSA) and ``client_accuracy_std`` their
spread over clients; ``nonlocal_accuracy_mean`` (CTL) the mean accuracy of the clients on other
clients' test data.

The per-site table (``CLIENT_TABLE_FILE``, one JSON line per round with client evaluation,
appended, so that a round costs the same however many rounds came before it): each client's
training and test sizes, test samples per class, and its accuracy, balanced accuracy, AUROC
(and, binary, sensitivity and specificity) with the estimability rule of
``evaluation.clinical.site_estimates``: "not estimable" (null, with the reason) rather than a
1.000 from nine samples or a test split without the disease. ``read_client_tables`` reads it
back (a resumed run may repeat a round: its last line counts).

Clinical metrics of the global model (``evaluation.metrics.clinical_metrics``):
``central_<name>`` on the held-out test set, ``federated_<name>`` the sample-weighted mean of
the clients' values on their local test splits (clients where it is undefined left out), in
every round with client evaluation, for ``balanced_accuracy``, ``auroc`` (macro one-vs-rest)
and, for two classes, ``sensitivity``, ``specificity``, ``auroc_positive`` (of the positive
class, ``data.classes.positive_class``: the disease).

``history.json`` (and ``history.csv``) hold only what the run config and seed determine, so two
runs with the same config and seed write byte-identical files (clients in partition order:
``recording_grid``). The wall-clock seconds of each round, which no seed reproduces, are logged
and written to ``timings.csv``.
"""

from __future__ import annotations

import json
import math
import os
from logging import INFO
from pathlib import Path

import numpy as np
from flwr.common.logger import log

from ..core import progress
from ..core.clipping import KEY_UNCLIPPED
from ..core.results import plot_accuracy, write_csv, write_json
from ..core.stages import HISTORY, TRACKERS, stage
from ..evaluation.clinical import (
    SITE_COUNTS,
    TEST_CLASS_CORRECT,
    TEST_CLASS_COUNTS,
    TRAIN_EXAMPLES,
    site_estimates,
)
from ..evaluation.metrics import BINARY, CLINICAL
from .outcome import RunFailed
from .recording_grid import RecordingGrid, RoundTraffic
from .trackers import Trackers

HISTORY_COLUMNS = (
    "round",
    "train_loss",
    "central_accuracy",
    "central_loss",
    "federated_accuracy",
    "federated_loss",
    *(f"{where}_{name}" for where in ("central", "federated") for name in CLINICAL + BINARY),
    "client_models_test_accuracy_mean",
    "client_accuracy",
    "client_accuracy_unweighted_mean",
    "client_accuracy_std",
    "nonlocal_accuracy_mean",
    "clients_trained",
    "clients_failed",
    "clients_clipped",
    "dp_epsilon",
    "bytes_sent",
    "bytes_received",
)
TIMING_COLUMNS = ("round", "seconds")  # timings.csv: what differs from run to run
CLIENT_TABLE = "client_table"  # a row's per-site table, until History.add appends it to:
CLIENT_TABLE_FILE = "client_table.jsonl"  # {"round": r, "clients": {partition id: row}} a line
CLIENT_MODELS_ACCURACY = "client_models_test_accuracy_mean"
# the clinical metrics as a client's evaluation reply names them (LocalClient.evaluation_metrics)
CLIENT_CLINICAL = tuple(name.replace("_", "-") for name in CLINICAL + BINARY)


def traffic_columns(traffic: RoundTraffic) -> dict:
    """A closed round's traffic as history columns: clients, bytes, seconds, failures (and
    the training updates clipped, when ``max-update-norm`` is on)."""
    columns = {
        "clients_trained": traffic.clients_trained,
        "clients_failed": traffic.clients_failed,
        "bytes_sent": traffic.bytes_sent,
        "bytes_received": traffic.bytes_received,
        "seconds": traffic.seconds,
        "failures": traffic.failures,
    }
    if traffic.clients_clipped is not None:
        columns["clients_clipped"] = traffic.clients_clipped
    return columns


def round_row(
    server_round: int, grid: RecordingGrid, federated: bool = False, **accuracies: float
) -> dict:
    """One history row; for rounds >= 1 it closes the grid's record of that round.

    ``accuracies``: the row's test-set columns (``central_accuracy`` and ``central_loss``, or
    ``client_models_test_accuracy_mean``). ``federated``: add ``federated_accuracy`` and
    ``federated_loss``, the round's evaluation replies weighted by their samples (NaN in round
    0, which has none).
    """
    row = {"round": server_round, **accuracies}
    if federated:
        row.update(federated_accuracy=math.nan, federated_loss=math.nan)
    if server_round == 0:
        return row
    traffic = grid.end_round()
    if federated:
        for name in ("accuracy", "loss"):
            pairs = [(m["num-examples"], m[name]) for m in traffic.evaluate if name in m]
            row[f"federated_{name}"] = weighted_mean(pairs)
    # the clinical metrics of the clients' evaluation replies: their sample-weighted mean over
    # the clients where defined, as federated_<name> (every round with client evaluation)
    for key in CLIENT_CLINICAL:
        pairs = [(m["num-examples"], m[key]) for m in traffic.evaluate if key in m]
        if pairs:
            row[f"federated_{_column(key)}"] = weighted_mean(pairs)
    train_losses = [
        (m["num-examples"], m["train-loss"]) for m in traffic.train if "train-loss" in m
    ]
    accuracies = [(m["num-examples"], m["accuracy"]) for m in traffic.evaluate if "accuracy" in m]
    row.update(
        train_loss=weighted_mean(train_losses),
        client_accuracy=weighted_mean(accuracies),
        **unweighted_client_accuracy([accuracy for _, accuracy in accuracies]),
        client_accuracies={
            int(m["partition-id"]): m["accuracy"]
            for m in traffic.evaluate
            if "partition-id" in m and "accuracy" in m
        },
        **traffic_columns(traffic),
    )
    table = client_table(traffic.evaluate, getattr(grid, "positive_class", None))
    if table:
        row[CLIENT_TABLE] = table  # History.add moves it into CLIENT_TABLE_FILE
    # any other metric the clients' evaluation reports (Ditto's personal-accuracy): its mean
    # over the clients, as client_<name>_mean (JSON history only)
    standard = {"num-examples", "partition-id", "loss", "accuracy", *CLIENT_CLINICAL}
    standard |= SITE_COUNTS
    for key in sorted({k for m in traffic.evaluate for k in m} - standard):
        values = _numbers(traffic.evaluate, key)
        if values:
            row[f"client_{_column(key)}_mean"] = float(np.mean(values))
    # any other metric the clients' training reports (QFedFisher's fisher-kept-fraction): its
    # mean, min and max over the clients who trained (JSON history only)
    # adaptive clipping's per-client bit is left out: its exact mean is the un-noised count
    # that differential privacy releases only with noise (privacy.json has the noised one)
    standard = {"num-examples", "partition-id", "train-loss", "num-steps", KEY_UNCLIPPED}
    for key in sorted({k for m in traffic.train for k in m} - standard):
        values = _numbers(traffic.train, key)
        if values:
            for name, summary in (("mean", np.mean), ("min", np.min), ("max", np.max)):
                row[f"client_{_column(key)}_{name}"] = float(summary(values))
    return row


def unweighted_client_accuracy(accuracies: list[float]) -> dict[str, float]:
    """``client_accuracy_unweighted_mean`` and ``client_accuracy_std`` of the clients'
    accuracies (NaN ones, from empty test splits, left out)."""
    values = [a for a in accuracies if math.isfinite(a)]
    return {
        "client_accuracy_unweighted_mean": float(np.mean(values)) if values else math.nan,
        "client_accuracy_std": float(np.std(values)) if values else math.nan,
    }


def client_table(replies: list[dict], positive: int | None) -> dict[int, dict]:
    """Partition id -> the client's row of the per-site table
    (``evaluation.clinical.site_estimates``), for the evaluation replies that carry per-class
    counts; ``positive``: the run's positive class (the grid's ``positive_class``, set from
    ``classes.json``), None for none."""
    table = {}
    for m in replies:
        if TEST_CLASS_COUNTS not in m or "partition-id" not in m:
            continue
        site = site_estimates(
            list(m[TEST_CLASS_COUNTS]),
            list(m.get(TEST_CLASS_CORRECT, [])),
            m.get("auroc", math.nan),
            positive=positive,
        )
        table[int(m["partition-id"])] = {"n_train": m.get(TRAIN_EXAMPLES), **site}
    return dict(sorted(table.items()))


def append_client_table(path: Path, server_round: int, table: dict) -> None:
    """One round's per-site table as one line of ``path`` (flushed and synced: a crash leaves
    at most a partial last line, which ``read_client_tables`` skips)."""
    line = json.dumps({"round": server_round, "clients": table}, default=float) + "\n"
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_client_tables(path: Path) -> dict[int, dict]:
    """Round -> that round's per-site table (partition id as a string -> row), from
    ``CLIENT_TABLE_FILE``; empty when there is none. A round written twice (a resumed run
    repeats the rounds after its last checkpoint) keeps its last line."""
    tables: dict[int, dict] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return tables
    for line in lines:
        try:
            entry = json.loads(line)
            tables[int(entry["round"])] = entry["clients"]
        except (ValueError, KeyError, TypeError):
            continue  # a partial line from a crash
    return tables


def _numbers(metrics: list[dict], key: str) -> list[float]:
    return [m[key] for m in metrics if isinstance(m.get(key), (int, float))]


def _column(metric: str) -> str:
    return metric.replace("-", "_")


def weighted_mean(pairs: list[tuple[float, float]]) -> float:
    """Sample-weighted mean; clients with no training step (NaN loss) are left out."""
    pairs = [(n, v) for n, v in pairs if math.isfinite(v)]
    total = sum(n for n, _ in pairs)
    return sum(n * v for n, v in pairs) / total if total else math.nan


def format_round(row: dict, num_rounds: int) -> str:
    """The concise per-round log line."""
    if "central_accuracy" in row:
        accuracy = f"test acc {row['central_accuracy']:.4f} loss {row['central_loss']:.4f}"
    elif "federated_accuracy" in row:
        accuracy = (
            f"clients' test acc {row['federated_accuracy']:.4f}"
            f" loss {row['federated_loss']:.4f} (federated)"
        )
    else:
        accuracy = f"client models' test acc {row[CLIENT_MODELS_ACCURACY]:.4f}"
    text = f"flowerbed round {row['round']}/{num_rounds}: {accuracy}"
    if row["round"] == 0:
        return text + " (initial model)"
    privacy = f" | epsilon {row['dp_epsilon']:.3g}" if "dp_epsilon" in row else ""  # dp
    return text + (
        f" | train loss {row['train_loss']:.4f} | {client_accuracy_text(row)}"
        f" | clients {row['clients_trained']} ok,"
        f" {row['clients_failed']} failed | {row['bytes_sent'] / 1e6:.2f} MB sent,"
        f" {row['bytes_received'] / 1e6:.2f} MB received | {row['seconds']:.1f} s{privacy}"
    )


def client_accuracy_text(row: dict) -> str:
    """The log line's client accuracy: sample-weighted where the replies allow (Flower's
    number), else the unweighted mean, named so; ± the spread over clients where there is one.
    A round without client accuracies (``fraction-evaluate=0``) says so instead of NaN."""
    if _finite(row.get("client_accuracy")):
        text = f"client acc {row['client_accuracy']:.4f} (sample-weighted)"
    elif _finite(row.get("client_accuracy_unweighted_mean")):
        text = f"client acc {row['client_accuracy_unweighted_mean']:.4f} (unweighted mean)"
    else:
        return "no client accuracy"
    if _finite(row.get("client_accuracy_std")):
        text += f" ± {row['client_accuracy_std']:.4f} (std over clients)"
    return text


def round_pace(rows: list[dict], num_rounds: int) -> str:
    """The log line's timing: the median seconds per round so far (rounds >= 1; the first
    round's start-up does not skew it) and the time the remaining rounds of ``num_rounds``
    would take at that pace; empty before round 1."""
    row = rows[-1]
    seconds = [r["seconds"] for r in rows if r["round"] >= 1 and _finite(r.get("seconds"))]
    if row["round"] < 1 or not seconds:
        return ""
    return " | " + progress.pace(float(np.median(seconds)), num_rounds - row["round"], "round")


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def failures_text(row: dict) -> str:
    """How many clients failed in a round and the first one's reason (the others are in
    ``history.json``'s ``failures``)."""
    failures = row.get("failures", [])
    if not failures:
        return "no reply"
    more = f"; {len(failures) - 1} more in history.json" if len(failures) > 1 else ""
    return f"{row.get('clients_failed', len(failures))} failed; {failures[0]}{more}"


class History:
    """The rows of one run; ``add`` logs a row, rewrites ``history.json``/``.csv`` and then
    hands the row to the run's trackers (``runtime.trackers``: live curves; never fatal).

    A round in which no client succeeded fails the run (``RunFailed``) once more than
    ``max_failed_rounds`` such rounds have happened: a run with nothing to aggregate must not
    end looking completed.
    """

    def __init__(
        self, run_dir: Path, max_failed_rounds: int = 0, trackers: Trackers | None = None
    ) -> None:
        self.run_dir = run_dir
        self.trackers = trackers or Trackers()
        self.rows: list[dict] = []
        self.max_failed_rounds = max_failed_rounds
        self.failed_rounds = 0

    def add(self, row: dict, num_rounds: int, note: str = "") -> None:
        with stage(HISTORY, row["round"]):
            table = row.pop(CLIENT_TABLE, None)
            if table is not None:
                append_client_table(self.run_dir / CLIENT_TABLE_FILE, row["round"], table)
            self.rows.append(row)
            line = format_round(row, num_rounds) + round_pace(self.rows, num_rounds)
            log(INFO, line + (f" ({note})" if note else ""))
            timed = TIMING_COLUMNS[1:]
            reproducible = [{k: v for k, v in r.items() if k not in timed} for r in self.rows]
            write_json(self.run_dir / "history.json", reproducible)
            columns = [c for c in HISTORY_COLUMNS if any(c in r for r in reproducible)]
            write_csv(self.run_dir / "history.csv", reproducible, columns)
            write_csv(self.run_dir / "timings.csv", self.rows, TIMING_COLUMNS)
        with stage(TRACKERS, row["round"]):
            self.trackers.log(row)
        if row["round"] >= 1 and row.get("clients_trained", 1) == 0:
            self.failed_rounds += 1
            if self.failed_rounds > self.max_failed_rounds:
                raise RunFailed(
                    f"round {row['round']}: no client succeeded ({failures_text(row)}); a run"
                    f" survives max-failed-rounds={self.max_failed_rounds} such rounds"
                )

    def plot(self, title: str) -> None:
        plot_accuracy(self.run_dir / "accuracy.png", self.rows, title)
