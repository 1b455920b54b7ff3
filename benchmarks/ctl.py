"""CTL's two simulations ("Distributed Collaborative Learning with Representative Knowledge
Sharing", Casey et al., Mathematics 2025), with the NumPy reference simulator
(``flowerbed.methods.ctl.reference``) for the sweeps and the Flower protocol for one seed as a
cross-check.

Simulation 1 (Sec. 4.1): breast cancer, 300 shifted copies (``breast-cancer-shifted``), 10
nodes by one k-means iteration on two principal components (``kmeans-pca``), each node
predicting its own test data and that of 2 other nodes, 100 rounds, alpha 0.85, for the five
guest rules of the paper (best, all, random, worst, local) and two variants (random re-drawn
every round; local with the (1 - alpha)-scaled cross-entropy step, a fair comparison that the
authors' code does not make). A simulation in which a node lacks a class in its training or
test data is discarded, as in the authors' code; the count is reported.

Simulation 2 (Sec. 4.2): Gaussian nodes (``ctl-gaussian``) at (spread 3, dispersion 0.5) and
(spread 0.5, dispersion 3), alpha 0.15, best vs local (and all).

Also measured: whether exact energy coefficients (pairwise, on 300-sample subsets) instead of
the moment approximation change the guest choice or the accuracy (simulation 1, ``worst``,
whose choice depends on H; ``best`` picks the task owners, whose H is 0 either way).

Resumable: every (simulation, seed, rule) writes one JSON under ``<out>/runs``; a rerun skips
what exists (``--quick`` writes to its own folder). Outputs under ``--out`` (default
``benchmarks/results/ctl``): ``ctl.md`` (the tables), ``ctl_sim1.csv``, ``ctl_sim2.csv``,
``ctl_sim1.png`` (mean curves with 95 % intervals, as the paper's Fig. 2), and ``table.md``:
the tables of both simulations made from ``ctl_sim1.csv`` and ``ctl_sim2.csv`` alone
(``report``, ``--report-only``), which ``docs/ctl.md`` includes. The two CSVs hold means and
interval half-widths over simulations, not per-simulation values, so ``table.md`` has no paired
differences between rules; ``ctl.md`` (the run's log: seconds per simulation, discarded seeds,
the exact-energy check, the Flower cross-check) is written by the run only.

Usage::

    python benchmarks/ctl.py --quick                 # 4 simulations, 40 rounds (~3 min)
    python benchmarks/ctl.py --report-only           # table.md from the two CSVs
    python benchmarks/ctl.py                         # 20 simulations, 100 rounds (~20 min)
    python benchmarks/ctl.py --simulations 100       # the paper's count
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from result_tables import provenance_line, record_provenance, table_head

from flowerbed.catalog import parse_run_config
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.methods.ctl.reference import nodes_for, params_for, simulate

NUM_NODES = 10
TARGET = 0.85
RULES_1 = (
    ("Best", {"guests": "best"}),
    ("All", {"guests": "all"}),
    ("Random", {"guests": "random"}),
    ("Worst", {"guests": "worst"}),
    ("Local", {"guests": "local"}),
    ("Random (re-drawn)", {"guests": "random-redraw"}),
    ("Local (scaled CE)", {"guests": "local", "local_ce": "scaled"}),
)
RULES_2 = (("Best", {"guests": "best"}), ("All", {"guests": "all"}), ("Local", {"guests": "local"}))
SETTINGS_2 = (("spread 3, dispersion 0.5", 3.0, 0.5), ("spread 0.5, dispersion 3", 0.5, 3.0))
RESULTS = Path(__file__).parent / "results" / "ctl"
# what ``report`` reads (the folder of ctl_sim1.csv and ctl_sim2.csv) and writes
DATA = RESULTS
TABLE = RESULTS / "table.md"
# the page that includes table.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "ctl.md"


def simulation_1_config(seed: int, rounds: int, shifts: int):
    return parse_run_config(
        resolve_run_config(
            {
                "strategy": "ctl",
                "dataset": "breast-cancer-shifted",
                "sim-shifts": shifts,
                "partitioner": "kmeans-pca",
                "num-server-rounds": rounds,
                "ctl-alpha": 0.85,
                "seed": seed,
            }
        )
    )


def simulation_2_config(seed: int, rounds: int, spread: float, dispersion: float):
    return parse_run_config(
        resolve_run_config(
            {
                "strategy": "ctl",
                "dataset": "ctl-gaussian",
                "sim-spread": spread,
                "sim-dispersion": dispersion,
                "sim-nodes": NUM_NODES,
                "partitioner": "dataset-nodes",
                "num-server-rounds": rounds,
                "ctl-alpha": 0.15,
                "seed": seed,
            }
        )
    )


def usable_nodes(config, test_classes: bool):
    """The nodes of a simulation, or the reason it is discarded: a node lacks a class in its
    training data (CTL needs both representatives) or, with ``test_classes``, in its test data
    (the authors' rule for simulation 1)."""
    try:
        nodes = nodes_for(config, NUM_NODES)
    except ValueError as error:  # an empty cluster
        return None, str(error)
    for k, node in enumerate(nodes):
        splits = (("training", node.y_train), ("test", node.y_test))
        for split, labels in splits[: 2 if test_classes else 1]:
            if len(np.unique(labels)) != 2:
                return None, f"node {k} lacks a class in its {split} data"
    return nodes, ""


def curves(accuracy: np.ndarray) -> dict[str, list[float]]:
    """Mean over nodes per round: own task, other tasks, all tasks."""
    return {
        "own": accuracy[:, :, 0].mean(axis=1).tolist(),
        "other": accuracy[:, :, 1:].mean(axis=(1, 2)).tolist(),
        "all": accuracy.mean(axis=(1, 2)).tolist(),
    }


def run_sweep(
    store: Path, name: str, first_seed: int, wanted: int, make_config, rules, test_classes: bool
) -> tuple[dict, list[int], list[str]]:
    """Seeds from ``first_seed`` on until ``wanted`` simulations are usable (at most 20 times
    as many tried): {rule label: [curves per usable seed]}, the usable seeds, the discarded
    seeds with reasons."""
    results: dict[str, list[dict]] = {label: [] for label, _ in rules}
    used, discarded = [], []
    for seed in range(first_seed, first_seed + 20 * wanted):
        if len(used) == wanted:
            break
        marker = store / f"{name}-seed{seed}-discarded.json"
        if marker.is_file():
            discarded.append(f"seed {seed}: {json.loads(marker.read_text())['reason']}")
            continue
        nodes = None
        for label, change in rules:
            path = store / f"{name}-seed{seed}-{label.replace(' ', '_')}.json"
            if not path.is_file():
                config = make_config(seed)
                if nodes is None:
                    nodes, reason = usable_nodes(config, test_classes)
                    if nodes is None:
                        marker.write_text(json.dumps({"reason": reason}))
                        break
                started = time.perf_counter()
                out = simulate(nodes, replace(params_for(config), **change))
                record = {
                    **curves(out["accuracy"]),
                    "seconds": time.perf_counter() - started,
                    "clipped": int(out["clipped"]),
                }
                path.write_text(json.dumps(record))
            results[label].append(json.loads(path.read_text()))
        if marker.is_file():
            discarded.append(f"seed {seed}: {json.loads(marker.read_text())['reason']}")
        else:
            used.append(seed)
    return results, used, discarded


def mean_ci(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over axis 0 and the half-width of its 95 % t interval."""
    n = len(values)
    mean = values.mean(axis=0)
    if n < 2:
        return mean, np.full_like(mean, np.nan)
    return mean, stats.t.ppf(0.975, n - 1) * values.std(axis=0, ddof=1) / math.sqrt(n)


def first_round_at(curve: np.ndarray, target: float) -> str:
    above = np.flatnonzero(curve >= target)
    return str(int(above[0])) if len(above) else "never"


def plot_simulation_1(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("all", "(a) all tasks", None),
        ("other", "(b) non-local tasks", None),
        ("own", "(c) local tasks", None),
        ("other", "(d) non-local tasks, first 25 rounds", 26),
    )
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    for ax, (key, title, limit) in zip(axes, panels):
        for label, runs in results.items():
            if not runs:
                continue
            mean, half = mean_ci(np.array([r[key] for r in runs]))
            rounds = np.arange(len(mean))[:limit]
            ax.plot(rounds, mean[:limit], label=label)
            ax.fill_between(rounds, (mean - half)[:limit], (mean + half)[:limit], alpha=0.2)
        if key == "other":
            ax.axhline(TARGET, color="grey", linestyle=":", linewidth=1)
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.set_ylabel("mean test accuracy")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def exact_energy_check(seeds, rounds: int, shifts: int) -> list[str]:
    """Moments vs exact coefficients on the first usable seeds, ``worst`` guests."""
    lines = []
    for seed in seeds:
        config = simulation_1_config(seed, rounds, shifts)
        nodes, _ = usable_nodes(config, test_classes=True)
        params = replace(params_for(config), guests="worst")
        approx = simulate(nodes, params)
        exact = simulate(nodes, replace(params, energy="exact"))
        chosen_a, chosen_e = approx["lambdas"][1:] > 0, exact["lambdas"][1:] > 0
        differ = np.mean(np.any(chosen_a != chosen_e, axis=2))
        h_error = np.abs(approx["coefficients"] - exact["coefficients"]).max()
        final = curves(approx["accuracy"])["other"][-1], curves(exact["accuracy"])["other"][-1]
        lines.append(
            f"| {seed} | {100 * differ:.0f} % | {h_error:.3f} | {final[0]:.4f} | {final[1]:.4f} |"
        )
    return lines


def cross_check(seed: int, rounds: int, shifts: int) -> str:
    """The Flower protocol in process against the reference simulator, one seed, ``best``."""
    config = simulation_1_config(seed, rounds, shifts)
    nodes, _ = usable_nodes(config, test_classes=True)
    started = time.perf_counter()
    run_dir = run_in_process(config.to_dict() | {"output-dir": "/tmp/flowerbed-ctl-bench"}, 10)
    flower_seconds = time.perf_counter() - started
    log = json.loads((run_dir / "ctl_metrics.json").read_text())
    flower = np.array([[n["task-accuracies"] for n in r["nodes"]] for r in log["rounds"]])
    started = time.perf_counter()
    reference = simulate(nodes, params_for(config))["accuracy"]
    reference_seconds = time.perf_counter() - started
    return (
        f"Flower protocol (in process) vs reference simulator, seed {seed}, best, {rounds}"
        f" rounds: largest accuracy difference {np.abs(flower - reference).max():.2e};"
        f" {flower_seconds:.1f} s vs {reference_seconds:.1f} s"
        f" ({flower_seconds / reference_seconds:.1f} x)."
    )


def report(folder: Path) -> str:
    """The tables of both simulations (``table.md``), from ``ctl_sim1.csv`` and
    ``ctl_sim2.csv`` in ``folder`` alone: mean over simulations ± the half-width of its 95 % t
    interval; the first round at which the mean non-local curve reaches TARGET."""
    import csv

    with (folder / "ctl_sim1.csv").open() as f:
        sim1 = list(csv.DictReader(f))
    # the setting holds a comma and is not quoted: the last four fields are split off
    header, *rows = (folder / "ctl_sim2.csv").read_text().splitlines()
    sim2 = [dict(zip(header.split(","), row.rsplit(",", 4))) for row in rows]
    rules = list(dict.fromkeys(r["rule"] for r in sim1))
    curve = {(r["rule"], r["metric"]): [] for r in sim1}
    for r in sim1:
        curve[r["rule"], r["metric"]].append((float(r["mean"]), float(r["ci95"])))
    last = len(curve[rules[0], "other"]) - 1
    lines = table_head(
        f"Simulation 1 (breast cancer, {NUM_NODES} nodes), after round {last}: mean over nodes"
        " and simulations ± the half-width of the 95 % t interval over simulations (`ctl_sim1.csv`).",
        "guests",
        [f"first round non-local ≥ {TARGET}", "final non-local", "final local", "final all"],
    )
    for rule in rules:
        other = np.array([m for m, _ in curve[rule, "other"]])
        cells = [
            f"{curve[rule, key][-1][0]:.4f} ± {curve[rule, key][-1][1]:.4f}"
            for key in ("other", "own", "all")
        ]
        lines.append(f"| {rule} | {first_round_at(other, TARGET)} | {' | '.join(cells)} |")
    settings = list(dict.fromkeys(r["setting"] for r in sim2))
    labels = list(dict.fromkeys(r["rule"] for r in sim2))
    lines += [""] + table_head(
        "Simulation 2 (Gaussian nodes), final accuracy on all tasks: mean ± the half-width of"
        " the 95 % t interval over simulations (`ctl_sim2.csv`).",
        "setting",
        [*labels, "simulations"],
    )
    for setting in settings:
        rows = {r["rule"]: r for r in sim2 if r["setting"] == setting}
        cells = [
            f"{float(rows[rule]['final_all_mean']):.4f} ± {float(rows[rule]['ci95']):.4f}"
            for rule in labels
        ]
        count = "/".join(sorted({rows[rule]["simulations"] for rule in labels}))
        lines.append(f"| {setting} | {' | '.join(cells)} | {count} |")
    lines += [
        "",
        (
            "The CSVs hold means and interval half-widths, not per-simulation values: no paired"
            " difference between two rules can be computed from them."
        ),
        "",
        provenance_line(folder),
    ]
    return "\n".join(lines) + "\n"


def write_report(folder: Path) -> str:
    text = report(folder)
    (folder / "table.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--simulations", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--shifts", type=int, default=300)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="4 simulations, 40 rounds")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/ctl"))
    parser.add_argument("--report-only", action="store_true", help="table.md from the two CSVs")
    args = parser.parse_args()
    if args.report_only:
        print(write_report(args.out))
        return
    if args.quick:
        args.simulations, args.rounds = 4, 40
        args.out = args.out / "quick"
    logging.getLogger("flwr").setLevel(logging.WARNING)
    store = args.out / "runs"
    store.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def emit(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    started = time.perf_counter()
    results, used, discarded = run_sweep(
        store,
        f"sim1-r{args.rounds}-s{args.shifts}",
        args.first_seed,
        args.simulations,
        lambda seed: simulation_1_config(seed, args.rounds, args.shifts),
        RULES_1,
        test_classes=True,
    )
    emit(
        f"### Simulation 1: breast cancer, {args.shifts} shifts, {NUM_NODES} nodes, {args.rounds}"
        f" rounds, {len(used)} simulations (seeds {used[0]}..{used[-1]}; {len(discarded)} seeds"
        " discarded: a node lacked a class in its training or test data)\n"
    )
    emit(
        "| guests | first round non-local >= 0.85 | final non-local | final local | final all |"
        " s / simulation |"
    )
    emit("|---|---|---|---|---|---|")
    csv_rows = ["rule,round,metric,mean,ci95"]
    for label, runs in results.items():
        cells = []
        for key in ("other", "own", "all"):
            mean, half = mean_ci(np.array([r[key] for r in runs]))
            cells.append(f"{mean[-1]:.4f} ± {half[-1]:.4f}")
            csv_rows += [
                f"{label},{t},{key},{m:.6f},{h:.6f}" for t, (m, h) in enumerate(zip(mean, half))
            ]
        other_mean = np.array([r["other"] for r in runs]).mean(axis=0)
        seconds = np.median([r["seconds"] for r in runs])
        emit(
            f"| {label} | {first_round_at(other_mean, TARGET)} | {' | '.join(cells)} |"
            f" {seconds:.1f} |"
        )
    emit("\n(± : half-width of the 95 % t interval over simulations.)")
    if discarded:
        emit("Discarded: " + "; ".join(discarded[:10]) + ("; ..." if len(discarded) > 10 else ""))
    (args.out / "ctl_sim1.csv").write_text("\n".join(csv_rows) + "\n")
    plot_simulation_1(results, args.out / "ctl_sim1.png")

    emit("\n### Simulation 2: Gaussian nodes, alpha 0.15, final accuracy on all tasks\n")
    emit(
        "| setting | " + " | ".join(label for label, _ in RULES_2) + " | Best - Local |"
        " simulations (discarded) |"
    )
    emit("|---|" + "---|" * (len(RULES_2) + 2))
    csv_rows = ["setting,rule,final_all_mean,ci95,simulations"]
    for setting, spread, dispersion in SETTINGS_2:
        results_2, used_2, discarded_2 = run_sweep(
            store,
            f"sim2-r{args.rounds}-sp{spread}-di{dispersion}",
            args.first_seed,
            args.simulations,
            lambda seed, s=spread, d=dispersion: simulation_2_config(seed, args.rounds, s, d),
            RULES_2,
            test_classes=False,
        )
        finals = {
            label: np.array([r["all"][-1] for r in runs]) for label, runs in results_2.items()
        }
        cells = []
        for label, values in finals.items():
            mean, half = mean_ci(values)
            cells.append(f"{mean:.4f} ± {half:.4f}")
            csv_rows.append(f"{setting},{label},{mean:.6f},{half:.6f},{len(values)}")
        gap, gap_half = mean_ci(finals["Best"] - finals["Local"])
        emit(
            f"| {setting} | {' | '.join(cells)} | {gap:+.4f} ± {gap_half:.4f} |"
            f" {len(used_2)} ({len(discarded_2)}) |"
        )
    (args.out / "ctl_sim2.csv").write_text("\n".join(csv_rows) + "\n")

    emit("\n### Moment approximation vs exact energy coefficients (simulation 1, worst guests)\n")
    emit(
        "| seed | rounds whose guest set changes | largest H difference | final non-local (moments) | (exact) |"
    )
    emit("|---|---|---|---|---|")
    for line in exact_energy_check(used[:3], args.rounds, args.shifts):
        emit(line)

    emit("\n" + cross_check(used[0], args.rounds, args.shifts))
    emit(f"\nTotal {time.perf_counter() - started:.0f} s.")
    (args.out / "ctl.md").write_text("\n".join(lines) + "\n")
    if not args.quick:
        record_provenance(args.out, sys.argv)
    write_report(args.out)


if __name__ == "__main__":
    main()
