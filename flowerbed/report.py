"""``report.html``: what a run shows, in one self-contained file built from its run folder alone.

``write_run_report(run_dir)`` reads the files a run leaves (``runtime.results``: config,
status, history, timings, partitions, the best model's round, and what a protocol adds:
``distill_history.json``/``distill.json``, QKT's ``kt_metrics.json``, CTL's
``ctl_metrics.json``, FedSA's ``fedsa_selection.json``) and writes ``report.html`` beside them:
the run's status (and the end of ``error.log`` when it failed), its configuration, accuracy and
loss by round (the global model on the server's test set and on the clients' local test
splits, the clients' training loss), the clinical metrics by round (``metrics.
clinical_metrics``), the partition as a clients x classes heatmap (also ``partitions.png``),
each client's accuracy at the last round, the distillation curve, and the protocol's own
results. A file a run did not write (an old run, a run that ended early, another protocol)
leaves its section out, or says it is absent when the run was meant to write it.

The page needs nothing else: no network, no server, no script; the plots are PNG images
embedded as base64 ``data:`` URIs, drawn for print (axis labels, units, legends, markers that
tell the lines apart without colour). The ServerApp writes it when a run ends, completed,
failed or interrupted (``report_at_run_end``, never fatal); ``flowerbed report RUN_DIR``
rebuilds it for any run folder (``sweep.report``). Setting ``FLOWERBED_REPORT=0`` in the
ServerApp's environment skips it (the test suite does: a report costs about a second).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from logging import WARNING
from pathlib import Path
from typing import Any

import numpy as np
from flwr.common.logger import log

from .runtime.results import atomic_write

REPORT_FILE = "report.html"
PARTITIONS_PNG = "partitions.png"
ENV_SWITCH = "FLOWERBED_REPORT"  # "0": the ServerApp writes no report at the end of a run
DPI = 100
MAX_TABLE_ROWS = 25  # longer tables show evenly spaced rows, the first and the last
MAX_ANNOTATED = 20  # heatmaps with at most this many rows and columns print their counts
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
LINESTYLES = ("-", "--", "-.", ":")

# history columns, what they mean to a reader
ACCURACY_CURVES = (
    ("central_accuracy", "global model, server's test set"),
    ("federated_accuracy", "global model, clients' local test splits (sample-weighted)"),
    ("client_accuracy_mean", "clients' local test accuracy (mean over clients)"),
    ("client_models_test_accuracy_mean", "clients' own models, test set (mean)"),
    ("nonlocal_accuracy_mean", "clients' models on other clients' test data (mean)"),
)
LOSS_CURVES = (
    ("central_loss", "global model, server's test set"),
    ("federated_loss", "global model, clients' local test splits (sample-weighted)"),
    ("train_loss", "clients' local training (sample-weighted)"),
)
CLINICAL = (
    ("balanced_accuracy", "balanced accuracy"),
    ("auroc", "macro AUROC (one-vs-rest)"),
    ("sensitivity", "sensitivity (recall of class 1)"),
    ("specificity", "specificity (recall of class 0)"),
    ("auroc_positive", "AUROC of class 1"),
)
WHERE = (("central", "server's test set"), ("federated", "clients' local test splits"))

STYLE = """
body { font-family: Helvetica, Arial, sans-serif; max-width: 60em; margin: 1.5em auto;
  padding: 0 1em; color: #111; line-height: 1.4; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em;
  border-bottom: 1px solid #999; page-break-after: avoid; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.15em 0.5em; text-align: right; }
th { background: #eee; } td.text, th.text { text-align: left; }
img { max-width: 100%; page-break-inside: avoid; display: block; margin: 0.5em 0; }
.absent { color: #555; font-style: italic; }
.status-completed { color: #185; font-weight: bold; }
.status-failed, .status-interrupted, .status-running { color: #b20; font-weight: bold; }
pre { background: #f4f4f4; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }
nav a { margin-right: 0.8em; }
"""


# --- reading a run folder ------------------------------------------------------------------


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


# --- plots ---------------------------------------------------------------------------------


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig) -> bytes:
    """The figure as PNG (no software metadata), closed."""
    plt = pyplot()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def style(i: int) -> dict:
    """Line ``i``'s marker and dash pattern: lines stay apart in black and white."""
    return {
        "marker": MARKERS[i % len(MARKERS)],
        "linestyle": LINESTYLES[(i // len(MARKERS) + i) % len(LINESTYLES)],
        "markersize": 4,
    }


def curves_axis(ax, rows: list[dict], curves, ylabel: str, title: str) -> int:
    """Draw the ``curves`` (column, label) that have values; the number drawn."""
    drawn = 0
    for key, label in curves:
        rounds, values = column(rows, key)
        if values:
            ax.plot(rounds, values, label=label, **style(drawn))
            drawn += 1
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    integer_ticks(ax)
    if drawn:
        ax.legend(fontsize=7, loc="best")
    return drawn


def integer_ticks(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


# --- HTML pieces ---------------------------------------------------------------------------


def esc(value) -> str:
    return html.escape(str(value))


def fmt(value, digits: int = 4) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    if isinstance(value, float):
        return "-" if not math.isfinite(value) else f"{value:.{digits}f}"
    return str(value)


def table(header: list[str], rows: Iterable[list], text_columns: Iterable[int] = (0,)) -> str:
    text_columns = set(text_columns)

    def cell(tag: str, i: int, value) -> str:
        kind = ' class="text"' if i in text_columns else ""
        return f"<{tag}{kind}>{esc(fmt(value))}</{tag}>"

    lines = ["<table>", "<tr>" + "".join(cell("th", i, h) for i, h in enumerate(header)) + "</tr>"]
    for row in rows:
        lines.append("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>")
    return "\n".join(lines + ["</table>"])


def shown(rows: list, limit: int = MAX_TABLE_ROWS) -> tuple[list, str]:
    """At most ``limit`` evenly spaced rows (always the first and the last), and a note."""
    if len(rows) <= limit:
        return rows, ""
    keep = sorted({round(float(i)) for i in np.linspace(0, len(rows) - 1, limit)})
    return [rows[i] for i in keep], f"<p>{len(keep)} of {len(rows)} rows shown, evenly spaced.</p>"


def absent(what: str) -> str:
    return f'<p class="absent">Absent: {esc(what)}</p>'


class Section:
    def __init__(self, anchor: str, title: str, body: str) -> None:
        self.anchor, self.title, self.body = anchor, title, body

    def html(self) -> str:
        return f'<h2 id="{self.anchor}">{esc(self.title)}</h2>\n{self.body}'


# --- the run report ------------------------------------------------------------------------


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


def status_section(run: RunFolder) -> Section:
    status = run.status.get("status")
    if status is None:
        return Section("status", "Status", absent("status.json (not a run folder, or an old one)"))
    words = {
        "running": "running, or stopped without a word (killed): no end was recorded",
        "interrupted": "interrupted (stopped by a signal); the rounds below are those finished",
    }
    body = [
        f'<p>Status: <span class="status-{esc(status)}">{esc(words.get(status, status))}</span>'
        + (f" at {esc(run.status['time'])}" if run.status.get("time") else "")
        + "</p>"
    ]
    if run.status.get("reason"):
        body.append(f"<p>Reason: {esc(run.status['reason'])}</p>")
    error = run.path / "error.log"
    if error.is_file():
        lines = error.read_text(errors="replace").splitlines()
        body.append(f"<p>The end of error.log ({len(lines)} lines):</p>")
        body.append(f"<pre>{esc(chr(10).join(lines[-20:]))}</pre>")
    facts = []
    rounds = [r["round"] for r in run.history]
    if rounds:
        planned = run.config.get("num-server-rounds")
        facts.append(
            ["rows in history.json", f"{len(rounds)} (rounds {min(rounds)}-{max(rounds)})"]
        )
        if planned is not None:
            facts.append(["num-server-rounds", planned])
    last = run.history[-1] if run.history else {}
    for key, label in ACCURACY_CURVES[:2] + ACCURACY_CURVES[3:4]:
        if math.isfinite(number(last.get(key))):
            facts.append([f"last {key} ({label})", number(last.get(key))])
    if run.best:
        picked = {k: v for k, v in run.best.items() if k not in ("round", "selected_on")}
        for key, value in picked.items():
            facts.append([f"model_best.pt: round {run.best.get('round')}, {key}", number(value)])
    if run.timings:
        seconds = list(run.timings.values())
        facts.append(["seconds of all rounds (timings.csv)", f"{sum(seconds):.1f}"])
        facts.append(["seconds per round (mean)", f"{np.mean(seconds):.2f}"])
    if facts:
        body.append(table(["", "value"], facts, text_columns=(0, 1)))
    return Section("status", "Status", "\n".join(body))


KEY_SETTINGS = (
    "strategy",
    "protocol-defaults",  # the keys that took the protocol's own defaults, when any did
    "dataset",
    "model",
    "num-partitions",
    "partitioner",
    "num-server-rounds",
    "local-epochs",
    "batch-size",
    "learning-rate",
    "optimizer",
    "fraction-train",
    "fraction-evaluate",
    "seed",
    "distill-objective",
    "best-model-metric",
)


def config_section(run: RunFolder) -> Section:
    if not run.config:
        return Section("configuration", "Configuration", absent("config.json"))
    main = [[k, run.config[k]] for k in KEY_SETTINGS if k in run.config]
    rest = [[k, v] for k, v in run.config.items() if k not in KEY_SETTINGS]
    body = table(["key", "value"], main, text_columns=(0, 1))
    body += (
        f"<details><summary>All {len(run.config)} keys (config.json)</summary>\n"
        + table(["key", "value"], rest, text_columns=(0, 1))
        + "</details>"
    )
    return Section("configuration", "Configuration", body)


def curves_section(run: RunFolder) -> Section:
    title = "Accuracy and loss by round"
    if not run.history:
        return Section("curves", title, absent("history.json (no round was recorded)"))
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    curves_axis(left, run.history, ACCURACY_CURVES, "accuracy (fraction correct)", "Accuracy")
    left.set_ylim(-0.02, 1.02)
    drawn = curves_axis(
        right, run.history, LOSS_CURVES, "cross-entropy loss (nats per sample)", "Loss"
    )
    if not drawn:
        right.text(0.5, 0.5, "no loss recorded", ha="center", transform=right.transAxes)
    fig.suptitle(run.title, fontsize=11)
    fig.tight_layout()
    note = (
        "<p>Round 0 is the initial model. The clients' local test splits are their own held-out"
        " data; the server's test set is the data set's test split. In one-shot protocols a"
        " round is a phase (local training, then the transfer), and its training loss is that"
        " phase's objective.</p>"
    )
    return Section("curves", title, note + img(png_bytes(fig), "accuracy and loss by round"))


def clinical_section(run: RunFolder) -> Section | None:
    title = "Clinical metrics by round"
    present = [
        (name, label)
        for name, label in CLINICAL
        if any(column(run.history, f"{w}_{name}")[1] for w, _ in WHERE)
    ]
    if not present:
        if run.history and any("central_accuracy" in r for r in run.history):
            return Section(
                "clinical", title, absent("clinical metrics (a run from before they existed)")
            )
        return None  # protocols without a global model have none
    plt = pyplot()
    cols = min(3, len(present))
    nrows = math.ceil(len(present) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.6 * cols, 3.2 * nrows), squeeze=False)
    classes = len(run.partitions[0]) if run.partitions else 0
    chance = {"auroc": 0.5, "auroc_positive": 0.5}
    if classes:
        chance["balanced_accuracy"] = 1 / classes
    for ax, (name, label) in zip(axes.flat, present, strict=False):
        if name in chance:  # drawn first: the legend lists it last
            ax.axhline(chance[name], color="grey", linestyle=":", linewidth=1)
        curves = [(f"{w}_{name}", text) for w, text in WHERE]
        curves_axis(ax, run.history, curves, label, label)
        if name in chance:
            ax.plot([], [], color="grey", linestyle=":", label=f"chance ({chance[name]:.2f})")
            ax.legend(fontsize=7, loc="best")
        ax.set_ylim(-0.02, 1.02)
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    fig.tight_layout()
    keys = [f"{w}_{name}" for name, _ in present for w, _ in WHERE]
    keys = [k for k in keys if column(run.history, k)[1]]
    rows, note = shown([[r["round"], *(number(r.get(k)) for k in keys)] for r in run.history])
    body = (
        "<p>Balanced accuracy: the mean recall over the classes present. AUROC: one-vs-rest,"
        " from the model's softmax probabilities, averaged over the classes present in the"
        " evaluated labels. Binary tasks: sensitivity and specificity of the most probable"
        " class, class 1 positive. Federated: the clients' values on their local test splits,"
        " sample-weighted over the clients where defined.</p>"
        + img(png_bytes(fig), "clinical metrics by round")
        + table(["round", *keys], rows)
        + note
    )
    return Section("clinical", title, body)


def partition_png(counts: np.ndarray, title: str = "") -> bytes:
    """The clients x classes label counts as a heatmap (a row per client)."""
    plt = pyplot()
    clients, classes = counts.shape
    height = min(9.0, max(2.5, 0.28 * clients + 1.5))
    width = min(10.0, max(4.5, 0.5 * classes + 2.5))
    fig, ax = plt.subplots(figsize=(width, height))
    image = ax.imshow(counts, cmap="Blues", aspect="auto", interpolation="nearest")
    bar = fig.colorbar(image, ax=ax)
    bar.set_label("samples in the client's partition")
    ax.set_xlabel("class")
    ax.set_ylabel("client (partition id)")
    if classes <= 30:
        ax.set_xticks(range(classes))
    if clients <= 40:
        ax.set_yticks(range(clients))
    if clients <= MAX_ANNOTATED and classes <= MAX_ANNOTATED:
        top = counts.max() if counts.size else 0
        for (i, j), value in np.ndenumerate(counts):
            dark = top and value > 0.6 * top
            ax.text(
                j, i, str(value), ha="center", va="center", fontsize=7,
                color="white" if dark else "black",
            )  # fmt: skip
    ax.set_title(title or "Label counts per client", fontsize=10)
    fig.tight_layout()
    return png_bytes(fig)


def partition_section(run: RunFolder) -> Section:
    title = "Partition: label counts per client"
    if not run.partitions:
        return Section("partition", title, absent("partitions.json"))
    counts = np.asarray(run.partitions, dtype=np.int64)
    if counts.ndim != 2 or counts.size == 0:
        return Section("partition", title, absent("label counts (partitions.json is empty)"))
    png = partition_png(counts, f"Label counts per client: {run.title}")
    atomic_write(run.path / PARTITIONS_PNG, lambda f: f.write(png), binary=True)
    totals = counts.sum(axis=1)
    body = (
        f"<p>{counts.shape[0]} clients, {counts.shape[1]} classes, {int(totals.sum()):,}"
        f" samples in the clients' partitions; per client {int(totals.min()):,} to"
        f" {int(totals.max()):,} (partitions.csv has the table; also saved as"
        f" {PARTITIONS_PNG}).</p>" + img(png, "label counts per client and class")
    )
    return Section("partition", title, body)


def client_accuracy_section(run: RunFolder) -> Section | None:
    title = "Each client's accuracy at the last round"
    last = next((r for r in reversed(run.history) if r.get("client_accuracies")), None)
    if last is None:
        if run.history:
            return Section("clients", title, absent("per-client accuracies (client_accuracies)"))
        return None
    pairs = sorted((int(k), number(v)) for k, v in last["client_accuracies"].items())
    pairs = [(k, v) for k, v in pairs if math.isfinite(v)]
    if not pairs:
        return Section("clients", title, absent("finite per-client accuracies"))
    plt = pyplot()
    ids, values = [k for k, _ in pairs], [v for _, v in pairs]
    fig, ax = plt.subplots(figsize=(min(10, max(5, 0.3 * len(ids) + 2)), 3.6))
    if len(ids) <= 40:
        ax.bar([str(i) for i in ids], values, color="#6a8fc0", edgecolor="black", linewidth=0.5)
        ax.set_xlabel("client (partition id)")
    else:
        ax.bar(range(len(ids)), sorted(values), width=1.0, color="#6a8fc0")
        ax.set_xlabel(f"clients, sorted by accuracy ({len(ids)})")
    mean = float(np.mean(values))
    ax.axhline(mean, color="black", linestyle="--", linewidth=1)
    ax.set_ylabel("accuracy on its local test split")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Round {last['round']}; dashed line: the mean, {mean:.3f}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    body = (
        f"<p>{len(ids)} clients evaluated in round {last['round']}: min {min(values):.3f},"
        f" max {max(values):.3f}, std {np.std(values):.3f}.</p>"
        + img(png_bytes(fig), "per-client accuracy at the last round")
    )
    return Section("clients", title, body)


def distill_section(run: RunFolder) -> Section | None:
    title = "Distillation into a compact student"
    rows = run.file("distill_history.json")
    summary = run.file("distill.json")
    objective = run.config.get("distill-objective", "none")
    if not rows:
        if objective not in ("none", None):
            return Section("distill", title, absent("distill_history.json (no epoch finished)"))
        return None
    plt = pyplot()
    epochs_per_generation = max(r["epoch"] for r in rows)
    steps = [(r["generation"] - 1) * epochs_per_generation + r["epoch"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.plot(steps, [number(r.get("test_accuracy")) for r in rows], label="student", **style(0))
    teacher = (summary or {}).get("teacher", {}).get("test_accuracy")
    if teacher is not None:
        left.axhline(teacher, color="black", linestyle="--", linewidth=1, label="teacher (fixed)")
    left.set_xlabel("epoch")
    left.set_ylabel("test accuracy (fraction correct)")
    left.set_ylim(-0.02, 1.02)
    left.set_title("Student's test accuracy", fontsize=10)
    names = {"train_loss": "training loss (all terms)", "test_loss": "test cross-entropy"}
    names.update({k: f"term {k[5:]} (weighted)" for k in rows[-1] if k.startswith("term_")})
    for i, (key, label) in enumerate(names.items()):
        right.plot(steps, [number(r.get(key)) for r in rows], label=label, **style(i))
    right.set_xlabel("epoch")
    right.set_ylabel("loss (per sample; terms weighted)")
    right.set_title("Loss and its weighted terms", fontsize=10)
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        integer_ticks(ax)
        generations = max(r["generation"] for r in rows)
        for g in range(1, generations):
            ax.axvline(g * epochs_per_generation + 0.5, color="grey", linewidth=0.8)
    fig.tight_layout()
    body = img(png_bytes(fig), "distillation curve")
    if summary:
        facts = [
            ["objective (mode)", f"{summary.get('objective')} ({summary.get('mode')})"],
            ["label-free", summary.get("label_free")],
        ]
        for who in ("teacher", "student"):
            part = summary.get(who, {})
            facts.append([f"{who}: model", part.get("model")])
            facts.append([f"{who}: test accuracy", number(part.get("test_accuracy"))])
            facts.append([f"{who}: parameters", part.get("parameters")])
            facts.append([f"{who}: CPU latency (ms per batch)", number(part.get("cpu_latency_ms"))])
        body += table(["", "value"], facts, text_columns=(0,))
    else:
        body += absent("distill.json (the distillation did not finish)")
    return Section("distill", title, body)


def qkt_section(run: RunFolder) -> Section | None:
    data = run.file("kt_metrics.json")
    title = "Knowledge transfer (kt_metrics.json)"
    if not data:
        wants = run.config.get("strategy") in ("qkt", "qkt-light") or run.config.get("kt-metrics")
        return Section("protocol", title, absent("kt_metrics.json")) if wants else None
    summary = data.get("summary", {})
    names = ("acc", "acc_pre", "query_gain", "forgetting", "uniform_acc")
    body = table(
        ["metric (mean over clients)", "value"], [[n, number(summary.get(n))] for n in names]
    )
    clients = data.get("clients", [])
    if clients:
        plt = pyplot()
        ids = [c.get("partition_id", i) for i, c in enumerate(clients)]
        x = np.arange(len(ids))
        fig, ax = plt.subplots(figsize=(min(10, max(5, 0.5 * len(ids) + 2)), 3.6))
        for offset, key, label, hatch in (
            (-0.2, "acc_pre", "before the transfer", ""),
            (0.2, "acc", "after the transfer", "//"),
        ):
            values = [number(c.get(key)) for c in clients]
            ax.bar(x + offset, values, 0.4, label=label, hatch=hatch, edgecolor="black",
                   color="white" if hatch else "#6a8fc0", linewidth=0.5)  # fmt: skip
        ax.set_xticks(x, [str(i) for i in ids])
        ax.set_xlabel("client (partition id)")
        ax.set_ylabel("average accuracy (fraction)")
        ax.set_ylim(0, 1.02)
        ax.set_title("Each client's average accuracy, before and after", fontsize=10)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        body += img(png_bytes(fig), "per-client accuracy before and after the transfer")
        rows = [
            [c.get("partition_id"), " ".join(map(str, c.get("query", []))),
             *(number(c.get(n)) for n in names)]
            for c in clients
        ]  # fmt: skip
        rows, note = shown(rows)
        body += table(["client", "query", *names], rows, text_columns=(1,)) + note
    return Section("protocol", title, body)


def ctl_section(run: RunFolder) -> Section | None:
    data = run.file("ctl_metrics.json")
    title = "CTL: each node's accuracy by round (ctl_metrics.json)"
    if not data:
        return (
            Section("protocol", title, absent("ctl_metrics.json"))
            if run.config.get("strategy") == "ctl"
            else None
        )
    rounds = data.get("rounds", [])
    if not rounds:
        return Section("protocol", title, absent("rounds in ctl_metrics.json"))
    nodes = sorted({n["partition"] for r in rounds for n in r.get("nodes", [])})
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for i, node in enumerate(nodes):
        xs, own, other = [], [], []
        for r in rounds:
            entry = next((n for n in r["nodes"] if n["partition"] == node), None)
            if entry and entry.get("task-accuracies"):
                accuracies = [number(a) for a in entry["task-accuracies"]]
                xs.append(r["round"])
                own.append(accuracies[0])
                other.append(np.nanmean(accuracies[1:]) if len(accuracies) > 1 else math.nan)
        left.plot(xs, own, label=f"node {node}", **style(i))
        right.plot(xs, other, label=f"node {node}", **style(i))
    left.set_title("On its own task", fontsize=10)
    right.set_title("On the other tasks it is scored on (mean)", fontsize=10)
    left.set_ylabel("accuracy (fraction correct)")
    for ax in (left, right):
        ax.set_xlabel("round")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        integer_ticks(ax)
    (left if len(nodes) <= 12 else right).legend(fontsize=7, ncol=2 if len(nodes) > 6 else 1)
    fig.tight_layout()
    last = rounds[-1]
    body = (
        f"<p>Guests: {esc(data.get('guests'))}. Last round {last.get('round')}: all tasks"
        f" {fmt(number(last.get('all-tasks')))}, own task {fmt(number(last.get('own-task')))},"
        f" other tasks {fmt(number(last.get('other-tasks')))}.</p>"
        + img(png_bytes(fig), "CTL per-node accuracy by round")
    )
    return Section("protocol", title, body)


def fedsa_section(run: RunFolder) -> Section | None:
    data = run.file("fedsa_selection.json")
    title = "FedSA: teachers and their selection (fedsa_selection.json)"
    if not data:
        return (
            Section("protocol", title, absent("fedsa_selection.json"))
            if run.config.get("strategy") == "fedsa"
            else None
        )
    teachers = data.get("teachers", [])
    body = (
        f"<p>Selection {esc(data.get('selection'))}, weighting {esc(data.get('weighting'))},"
        f" saliency {esc(data.get('saliency'))}.</p>"
    )
    body += table(
        ["teacher (partition)", "model", "foreign", "accuracy on its local test split"],
        [[t.get("partition"), t.get("model"), t.get("foreign"), number(t.get("accuracy"))]
         for t in teachers],
        text_columns=(1, 2),
    )  # fmt: skip
    selections = data.get("selections", [])
    if selections and teachers:
        plt = pyplot()
        count = len(teachers)
        chosen = np.zeros((len(selections), count))
        probabilities = np.full((len(selections), count), np.nan)
        for i, s in enumerate(selections):
            for teacher, times in s.get("selected", {}).items():
                chosen[i, int(teacher)] = times
            for teacher, p in zip(
                s.get("candidates", []), s.get("probabilities", []), strict=False
            ):
                probabilities[i, int(teacher)] = p
        rounds = [s.get("round") for s in selections]
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
        for t in range(count):
            left.plot(rounds, probabilities[:, t], label=f"teacher {t}", **style(t))
        left.set_xlabel("selection round")
        left.set_ylabel("selection probability")
        left.set_title("Each teacher's probability", fontsize=10)
        left.grid(alpha=0.3)
        integer_ticks(left)
        left.legend(fontsize=7, ncol=2 if count > 6 else 1)
        image = right.imshow(chosen.T, cmap="Greys", aspect="auto", vmin=0, interpolation="nearest")
        bar = fig.colorbar(image, ax=right, ticks=range(int(chosen.max()) + 1))
        bar.set_label("times selected")
        right.set_xticks(range(len(rounds)), [str(r) for r in rounds])
        right.set_xlabel("selection round")
        right.set_ylabel("teacher (partition id)")
        right.set_yticks(range(count))
        right.set_title("Teachers selected", fontsize=10)
        fig.tight_layout()
        body += img(png_bytes(fig), "FedSA selections")
    return Section("protocol", title, body)


def files_section(run: RunFolder) -> Section:
    files = sorted(
        p for p in run.path.iterdir() if not p.name.startswith(".") and p.name != REPORT_FILE
    )
    rows = []
    for path in files:
        if path.is_dir():
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            rows.append([path.name + "/", f"{size / 1e6:.2f} MB"])
        else:
            rows.append([path.name, f"{path.stat().st_size / 1e3:.1f} kB"])
    return Section("files", "Files in the run folder", table(["file", "size"], rows))


RUN_SECTIONS: tuple[Callable[[RunFolder], Section | None], ...] = (
    status_section,
    config_section,
    curves_section,
    clinical_section,
    partition_section,
    client_accuracy_section,
    distill_section,
    qkt_section,
    ctl_section,
    fedsa_section,
    files_section,
)


def page(title: str, subtitle: str, sections: list[Section]) -> str:
    nav = " ".join(f'<a href="#{s.anchor}">{esc(s.title)}</a>' for s in sections)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{esc(title)}</title>",
            f"<style>{STYLE}</style></head><body>",
            f"<h1>{esc(title)}</h1>",
            f"<p>{esc(subtitle)}</p>",
            f"<nav>{nav}</nav>",
            *(s.html() for s in sections),
            "</body></html>",
        ]
    )


def write_run_report(run_dir: Path) -> Path:
    """``report.html`` (and ``partitions.png``) in ``run_dir``, from its files alone."""
    run = RunFolder(Path(run_dir))
    sections = [s for build in RUN_SECTIONS if (s := build(run)) is not None]
    # protocol-specific sections share one anchor: number them if several are present
    seen: dict[str, int] = {}
    for s in sections:
        seen[s.anchor] = seen.get(s.anchor, 0) + 1
        if seen[s.anchor] > 1:
            s.anchor += f"-{seen[s.anchor]}"
    made = time.strftime("%Y-%m-%d %H:%M")
    text = page(run.title, f"Run folder {run.path.name}; report written {made}.", sections)
    path = run.path / REPORT_FILE
    atomic_write(path, lambda f: f.write(text))
    return path


def report_at_run_end(run_dir: Path) -> None:
    """The ServerApp's report when a run ends, however it ended: never raises (a report that
    fails is a warning; the run's own outcome stands); skipped with ``FLOWERBED_REPORT=0``."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return
    try:
        write_run_report(run_dir)
    except Exception as error:  # noqa: BLE001 - the report never changes how a run ended
        log(WARNING, "flowerbed: no report.html (%s: %s)", type(error).__name__, error)


@contextmanager
def written_report(run_dir: Path) -> Iterator[None]:
    """``report_at_run_end(run_dir)`` when the block ends, however it ends."""
    try:
        yield
    finally:
        report_at_run_end(run_dir)
