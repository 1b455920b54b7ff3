"""The sections every run report has: status, configuration, curves, clinical metrics,
the partition, each client's accuracy, the files."""

from __future__ import annotations

import math

import numpy as np

from ..core.results import atomic_write
from ..runtime.run_lock import LOCK_FILE
from .clinical_sections import positive_of
from .markup import Section, absent, esc, img, shown, table
from .plots import curves_axis, partition_png, png_bytes, pyplot
from .run_folder import PARTITIONS_PNG, REPORT_FILE, RunFolder, column, number

# history columns, what they mean to a reader
ACCURACY_CURVES = (
    ("central_accuracy", "global model, server's test set"),
    ("federated_accuracy", "global model, clients' local test splits (sample-weighted)"),
    ("client_accuracy", "clients' local test accuracy (sample-weighted)"),
    ("client_accuracy_unweighted_mean", "clients' local test accuracy (unweighted mean)"),
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
    ("sensitivity", "sensitivity"),
    ("specificity", "specificity"),
)  # a binary task's auroc_positive is its macro AUROC (p0 = 1 - p1): drawn once


def clinical_labels(run: RunFolder) -> tuple[tuple[str, str], ...]:
    """``CLINICAL`` with the classes named (``classes.json``): "sensitivity (malignant)"."""
    classes = run.file("classes.json") or {}
    names, positive = classes.get("names") or [], classes.get("positive")
    if positive is None or len(names) != 2:
        return CLINICAL
    named = {
        "auroc": f"AUROC of P({names[positive]})",
        "sensitivity": f"sensitivity (recall of {names[positive]})",
        "specificity": f"specificity (recall of {names[1 - positive]})",
    }
    return tuple((name, named.get(name, label)) for name, label in CLINICAL)


# where a metric is measured: its history prefix, the curve's legend, the table's heading
WHERE = (
    ("central", "server's test set", "server"),
    ("federated", "clients' local test splits", "clients"),
)


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
    for key, label in ACCURACY_CURVES[:3] + ACCURACY_CURVES[4:5]:
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


def clinical_panels(run: RunFolder) -> list[tuple[str, str]]:
    """The clinical metrics (name, label) the run recorded, a panel and a column group each:
    one AUROC however many of its columns history.json holds (``CLINICAL``)."""
    return [
        (name, label)
        for name, label in clinical_labels(run)
        if any(column(run.history, f"{w}_{name}")[1] for w, _, _ in WHERE)
    ]


def clinical_section(run: RunFolder) -> Section | None:
    title = "Clinical metrics by round"
    present = clinical_panels(run)
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
    chance = {"auroc": 0.5}
    if classes:
        chance["balanced_accuracy"] = 1 / classes
    for ax, (name, label) in zip(axes.flat, present, strict=False):
        if name in chance:  # drawn first: the legend lists it last
            ax.axhline(chance[name], color="grey", linestyle=":", linewidth=1)
        curves = [(f"{w}_{name}", text) for w, text, _ in WHERE]
        curves_axis(ax, run.history, curves, label, label)
        if name in chance:
            ax.plot([], [], color="grey", linestyle=":", label=f"chance ({chance[name]:.2f})")
            ax.legend(fontsize=7, loc="best")
        ax.set_ylim(-0.02, 1.02)
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    fig.tight_layout()
    by_round, note = by_round_table(run.history, present)
    body = (
        "<p>Balanced accuracy: the mean recall over the classes present. AUROC: one-vs-rest,"
        " from the model's softmax probabilities, averaged over the classes present in the"
        " evaluated labels. Binary tasks: sensitivity and specificity of the most probable"
        f" class, {esc(positive_text(run))}. Federated: the clients' values on their local"
        " test splits, sample-weighted over the clients where defined. Counts and intervals:"
        " the clinical reading below.</p>"
        + img(png_bytes(fig), "clinical metrics by round")
        + "<p>By round: each metric on the server's test set (<i>server</i>: history.json's"
        " central_ columns) and on the clients' local test splits (<i>clients</i>: its"
        " federated_ columns).</p>" + by_round + note
    )
    return Section("clinical", title, body)


def by_round_table(history: list[dict], metrics: list[tuple[str, str]]) -> tuple[str, str]:
    """The ``metrics`` (name, label) by round, a column per place that measured them, under
    the metric's label (two header rows: a binary run's eight columns fit the page); the
    table and the note of ``shown``."""
    groups, header, keys = [("", 1)], ["round"], []
    for name, label in metrics:
        measured = [(f"{w}_{name}", h) for w, _, h in WHERE if column(history, f"{w}_{name}")[1]]
        groups.append((label, len(measured)))
        header += [h for _, h in measured]
        keys += [k for k, _ in measured]
    rows, note = shown([[r["round"], *(number(r.get(k)) for k in keys)] for r in history])
    return table(header, rows, groups=groups), note


def positive_text(run: RunFolder) -> str:
    positive, name, why = positive_of(run)
    if positive is None:
        return "no positive class (set positive-class)"
    return f"positive class {name} ({why})"


def partition_section(run: RunFolder) -> Section:
    title = "Partition: label counts per client"
    if not run.partitions:
        return Section("partition", title, absent("partitions.json"))
    counts = np.asarray(run.partitions, dtype=np.int64)
    if counts.ndim != 2 or counts.size == 0:
        return Section("partition", title, absent("label counts (partitions.json is empty)"))
    names = (run.file("classes.json") or {}).get("names")
    png = partition_png(counts, f"Label counts per client: {run.title}", names)
    atomic_write(run.path / PARTITIONS_PNG, lambda f: f.write(png), binary=True)
    totals = counts.sum(axis=1)
    body = (
        f"<p>{counts.shape[0]} clients, {counts.shape[1]} classes, {int(totals.sum()):,}"
        f" samples in the clients' partitions; per client {int(totals.min()):,} to"
        f" {int(totals.max()):,} (partitions.csv has the table; also saved as"
        f" {PARTITIONS_PNG}).</p>" + img(png, "label counts per client and class")
    )
    return Section("partition", title, body)


def files_section(run: RunFolder) -> Section:
    """The files in the run folder as the report is written (after every other section: with
    partitions.png), but the report itself and run.lock, held while the report is written and
    removed when the run ends: the list names what a reader finds in the folder."""
    transient = {REPORT_FILE, LOCK_FILE}
    files = sorted(
        p for p in run.path.iterdir() if not p.name.startswith(".") and p.name not in transient
    )
    rows = []
    for path in files:
        if path.is_dir():
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            rows.append([path.name + "/", f"{size / 1e6:.2f} MB"])
        else:
            rows.append([path.name, f"{path.stat().st_size / 1e3:.1f} kB"])
    return Section("files", "Files in the run folder", table(["file", "size"], rows))
