"""The sections a protocol adds to its runs' reports: the distillation curve, QKT's
knowledge-transfer metrics, CTL's per-node curves, FedSA's selections."""

from __future__ import annotations

import math

import numpy as np

from .markup import Section, absent, esc, fmt, img, shown, table
from .plots import integer_ticks, png_bytes, pyplot, style
from .run_folder import RunFolder, number


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
