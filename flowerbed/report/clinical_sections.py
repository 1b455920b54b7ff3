"""The report's clinical reading: the global model on the server's test set and each site at
the last round. The global model: counts, metrics with their intervals, confusion matrices, the
ROC curve and calibration, from ``clinical.json``; each site: the per-site table and a forest
plot, from ``client_table.jsonl``; every class named (``classes.json``)."""

from __future__ import annotations

import math

import numpy as np

from ..data.classes import POSITIVE_REASONS
from ..runtime.history import CLIENT_TABLE_FILE, read_client_tables
from .markup import Section, absent, esc, fmt, img, shown, table
from .plots import png_bytes, pyplot
from .robustness_section import attacker_ids
from .run_folder import RunFolder

METRIC_LABELS = (
    ("accuracy", "accuracy"),
    ("balanced_accuracy", "balanced accuracy"),
    ("auroc", "AUROC (macro one-vs-rest)"),
    ("sensitivity", "sensitivity"),
    ("specificity", "specificity"),
    ("brier", "Brier score"),
)


def class_names(run: RunFolder, num_classes: int) -> list[str]:
    """The run's class names (``classes.json``), ``class k`` where it has none."""
    names = (run.file("classes.json") or {}).get("names") or []
    return [names[k] if k < len(names) else f"class {k}" for k in range(num_classes)]


def positive_of(run: RunFolder) -> tuple[int | None, str, str]:
    """The run's positive class (``classes.json``): its index, its name and why it is the
    positive one ("the disease"); (None, "", "") without one."""
    classes = run.file("classes.json") or {}
    positive = classes.get("positive")
    if positive is None:
        return None, "", ""
    why = POSITIVE_REASONS.get(classes.get("chosen_by"), "")
    if not why:  # a run folder from before chosen_by
        why = "the disease" if classes.get("clinical") else "class 1 by convention"
    return positive, str(classes.get("positive_name")), why


def metric_label(name: str, summary: dict) -> str:
    """'sensitivity (malignant)': a binary metric names its class."""
    label = dict(METRIC_LABELS).get(name, name)
    names, positive = summary.get("names", []), summary.get("positive")
    if positive is not None and name == "sensitivity":
        return f"{label} (recall of {names[positive]})"
    if positive is not None and name == "specificity":
        return f"{label} (recall of {names[1 - positive]})"
    if positive is not None and name == "auroc":
        return f"AUROC of P({names[positive]})"
    return label


def counts_text(names: list[str], counts: list[int]) -> str:
    """'malignant: 42, benign: 72'."""
    return ", ".join(f"{name}: {n}" for name, n in zip(names, counts, strict=True))


def interval_text(entry: dict | None) -> str:
    """'0.714 [0.564, 0.828]', or 'not estimable' for a value that is not there."""
    if not entry or entry.get("value") is None:
        return "not estimable"
    value = f"{entry['value']:.3f}"
    interval = entry.get("interval")
    if not interval or any(v is None or not math.isfinite(v) for v in interval):
        return value + " (no interval)"
    return f"{value} [{interval[0]:.3f}, {interval[1]:.3f}]"


# --- the global model ------------------------------------------------------------------------


def clinical_reading_section(run: RunFolder) -> Section | None:
    title = "Clinical reading of the global model (server's test set)"
    clinical = run.file("clinical.json")
    if clinical is None:
        return None  # no global model evaluated on a server test set (or an older run)
    last, best = clinical.get("last"), clinical.get("best")
    if not last or not last.get("n"):
        return Section("clinical-reading", title, absent("test-set predictions (n = 0)"))
    names = last["names"]
    counts = counts_text(names, last["class_counts"])
    positive, positive_name, why = positive_of(run)
    positive_text = f"{positive_name}, {why}" if positive is not None else ""
    head = (
        f"<p>n = {last['n']} test samples ({esc(counts)})."
        + (f" Positive class: {esc(positive_text)}." if positive_text else "")
        + " Intervals are 95 %: Wilson score for proportions (accuracy, sensitivity,"
        " specificity, recall), a seeded percentile bootstrap of the test set for balanced"
        " accuracy, AUROC and the Brier score (method column).</p>"
    )
    if best and best.get("round") != last.get("round"):
        rounds = [("last", last), ("best", best)]
    else:  # the best round (model_best.pt's) is the last: shown once
        rounds = [("last" if not best else "last and best", last)]
    rows = []
    for name, _ in METRIC_LABELS:
        key = "auroc_positive" if name == "auroc" and "auroc_positive" in last["metrics"] else name
        if key not in last["metrics"]:
            continue
        cells = [interval_text(summary["metrics"].get(key)) for _, summary in rounds]
        entry = last["metrics"][key]
        rows.append([metric_label(name, last), *cells, entry["n"], entry["method"]])
    header = ["metric", *(f"{which} round ({s['round']})" for which, s in rounds), "n", "method"]
    body = head + table(header, rows, text_columns=(0, 1, 2, 3, 4, 5))
    body += recall_table(rounds)
    for which, summary in rounds:
        body += f"<p>Confusion matrix, {which} round ({summary['round']}): rows true, columns predicted.</p>"
        body += confusion_table(summary)
    body += img(png_bytes(curves_figure(rounds)), "ROC curve and reliability curve")
    body += (
        "<p>Reliability: test samples binned by "
        + esc(last["reliability"]["of"])
        + "; a calibrated model's points lie on the diagonal (bars: 95 % Wilson intervals).</p>"
    )
    return Section("clinical-reading", title, body)


def recall_table(rounds: list[tuple[str, dict]]) -> str:
    """Recall of every class, named (multi-class: the per-class reading)."""
    last = rounds[0][1]
    if len(last["names"]) <= 2:
        return ""
    rows = []
    for c, entry in enumerate(last["recall"]):
        cells = [
            interval_text(
                {"value": s["recall"][c]["recall"], "interval": s["recall"][c]["interval"]}
            )
            for _, s in rounds
        ]
        rows.append([entry["class"], entry["n"], *cells])
    header = ["class", "n", *(f"recall, {which} round ({s['round']})" for which, s in rounds)]
    return "<p>Per-class recall (Wilson intervals).</p>" + table(
        header, rows, text_columns=(0, 2, 3)
    )


def confusion_table(summary: dict) -> str:
    """Rows the true class, columns the predicted one, "predicted" said once above them (a
    column per class stays as narrow as the class's name: ten classes fit a printed page)."""
    names, matrix = summary["names"], summary["confusion_matrix"]
    rows = [[name, *row] for name, row in zip(names, matrix, strict=True)]
    grid = table(["true class", *names], rows, groups=[("", 1), ("predicted class", len(names))])
    return f'<div class="wide">{grid}</div>'


def curves_figure(rounds: list[tuple[str, dict]]):
    plt = pyplot()
    binary = "roc" in rounds[0][1]
    fig, axes = plt.subplots(
        1, 2 if binary else 1, figsize=(9 if binary else 4.8, 4), squeeze=False
    )
    axes = list(axes.flat)
    if binary:
        ax = axes.pop(0)
        for (which, summary), style in zip(rounds, ("-", "--"), strict=False):
            roc = summary["roc"]
            area = summary["metrics"]["auroc_positive"]["value"]
            ax.plot(
                roc["fpr"],
                roc["tpr"],
                style,
                label=f"{which} round {summary['round']} (AUROC {area:.3f})",
            )
            if roc["operating_point"]:
                ax.plot(*roc["operating_point"], "o", color=ax.lines[-1].get_color())
        ax.plot([0, 1], [0, 1], ":", color="grey", label="chance")
        names, positive = rounds[0][1]["names"], rounds[0][1]["positive"]
        ax.set_xlabel(f"1 - specificity (false-positive rate, {names[1 - positive]})")
        ax.set_ylabel(f"sensitivity ({names[positive]})")
        ax.set_title("ROC curve; dot: the most probable class", fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
        ax.set_aspect("equal")
    ax = axes[0]
    for (which, summary), marker in zip(rounds, ("o", "s"), strict=False):
        bins = summary["reliability"]["bins"]
        predicted = [b["predicted"] for b in bins]
        observed = [b["observed"] for b in bins]
        low = [b["observed"] - b["observed_interval"][0] for b in bins]
        high = [b["observed_interval"][1] - b["observed"] for b in bins]
        brier = summary["metrics"]["brier"]["value"]
        ax.errorbar(predicted, observed, yerr=[low, high], marker=marker, capsize=2,
                    label=f"{which} round {summary['round']} (Brier {brier:.3f})")  # fmt: skip
    ax.plot([0, 1], [0, 1], ":", color="grey", label="perfect calibration")
    of = rounds[0][1]["reliability"]["of"]
    ax.set_xlabel(of if of.startswith("the ") else f"predicted {of}")
    ax.set_ylabel("observed frequency")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Reliability (calibration)", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


# --- each site -----------------------------------------------------------------------------------


SITE_METRICS = ("accuracy", "balanced_accuracy", "auroc", "sensitivity", "specificity")


def sites_section(run: RunFolder) -> Section | None:
    title = "Each site at the last round"
    tables = read_client_tables(run.path / CLIENT_TABLE_FILE)
    if not tables:
        return client_accuracy_only(run)
    last_round = max(tables)
    last = next((r for r in run.history if r.get("round") == last_round), {"round": last_round})
    sites = {int(k): v for k, v in tables[last_round].items()}
    num_classes = len(next(iter(sites.values()))["test_counts"])
    names = class_names(run, num_classes)
    positive, _, _ = positive_of(run)
    attackers = set(attacker_ids(run.config))
    metrics = [m for m in SITE_METRICS if any(m in s for s in sites.values())]
    labels = {
        "accuracy": "accuracy",
        "balanced_accuracy": "balanced accuracy",
        "auroc": "AUROC",
        "sensitivity": f"sensitivity ({names[positive]})" if positive is not None else "",
        "specificity": f"specificity ({names[1 - positive]})" if positive is not None else "",
    }
    rows = []
    for pid, site in sorted(sites.items()):
        counts = counts_text(names, site["test_counts"])
        cells = [site_cell(site, m) for m in metrics]
        label = f"{pid} (attacker)" if pid in attackers else pid
        flag = site_reason(site, names)
        rows.append([label, site.get("n_train"), site["n_test"], counts, *cells, flag])
    rows, note = shown(rows)
    flagged = sum(1 for s in sites.values() if s.get("not_estimable"))
    body = (
        f"<p>{len(sites)} sites evaluated the global model of round {last['round']} on their"
        " local test splits. A value is <b>not estimable</b> when the site's test split has"
        " fewer than 20 samples (every metric) or lacks a class (every metric but accuracy):"
        f" {flagged} of {len(sites)} sites are flagged. Intervals are 95 %: Wilson for"
        " proportions, Agresti-Coull per class for balanced accuracy (approximate), Hanley and"
        " McNeil for a binary AUROC. Client accuracy over the sites, sample-weighted:"
        f" {fmt(last.get('client_accuracy'))}.</p>"
    )
    header = [
        "site",
        "n train",
        "n test",
        "test samples per class",
        *(labels[m] for m in metrics),
        "flag",
    ]
    body += table(header, rows, text_columns=range(3, len(header))) + note
    forest = forest_figure(
        sites, [m for m in ("balanced_accuracy", "auroc") if m in metrics], labels, last
    )
    if forest is not None:
        body += img(png_bytes(forest), "forest plot of each site's metrics with intervals")
    return Section("clients", title, body)


def site_cell(site: dict, metric: str) -> str:
    if metric not in site:
        return "-"
    return interval_text({"value": site[metric], "interval": site.get(f"{metric}_interval")})


def site_reason(site: dict, names: list[str]) -> str:
    """The site's flag, its missing classes named."""
    if not site.get("not_estimable"):
        return ""
    parts = []
    if site["n_test"] < 20:
        parts.append(f"{site['n_test']} test samples (< 20)")
    missing = [names[c] for c in site.get("missing_classes", [])]
    if missing:
        parts.append("no " + ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else ""))
    return "not estimable: " + "; ".join(parts)


def forest_figure(sites: dict, metrics: list[str], labels: dict, row: dict):
    """Each estimable site's value and interval, one panel per metric, the pooled
    (sample-weighted federated) value as a dashed line; None when no site is estimable."""
    panels = []
    for metric in metrics:
        points = [
            (pid, s[metric], s.get(f"{metric}_interval"))
            for pid, s in sorted(sites.items())
            if s.get(metric) is not None
        ]
        if points:
            panels.append((metric, points))
    if not panels:
        return None
    plt = pyplot()
    height = max(2.5, 0.28 * max(len(p) for _, p in panels) + 1.2)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), height), squeeze=False)
    for ax, (metric, points) in zip(axes.flat, panels, strict=True):
        y = np.arange(len(points))[::-1]
        for yi, (_, value, interval) in zip(y, points, strict=True):
            if interval:
                ax.plot(interval, [yi, yi], color="black", linewidth=1)
            ax.plot(value, yi, "s", color="#3b6ea5")
        ax.set_yticks(y, [f"site {pid}" for pid, _, _ in points], fontsize=8)
        pooled = row.get(f"federated_{metric}")
        if isinstance(pooled, (int, float)) and math.isfinite(pooled):
            ax.axvline(
                pooled, color="grey", linestyle="--", linewidth=1, label=f"pooled {pooled:.3f}"
            )
            ax.legend(fontsize=7, loc="lower left")
        ax.set_xlim(-0.02, 1.02)
        ax.set_xlabel(labels[metric] + " (95 % interval)")
        ax.set_title(f"{labels[metric]}: {len(points)} estimable sites", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def client_accuracy_only(run: RunFolder) -> Section | None:
    """Runs without per-site counts (one-shot protocols, CTL, older runs): each client's
    accuracy at the last round, as a table."""
    title = "Each client's accuracy at the last round"
    last = next((r for r in reversed(run.history) if r.get("client_accuracies")), None)
    if last is None:
        return None
    pairs = sorted((int(k), v) for k, v in last["client_accuracies"].items())
    rows, note = shown([[k, v] for k, v in pairs])
    body = (
        f"<p>{len(pairs)} clients in round {last['round']}; this protocol's replies carry no"
        " test-set counts, so no interval or estimability flag is shown.</p>"
        + table(["client (partition id)", "accuracy on its local test split"], rows)
        + note
    )
    return Section("clients", title, body)
