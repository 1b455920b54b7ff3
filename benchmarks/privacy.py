"""Differential privacy: final accuracy against the privacy spent, central and local DP.

Central DP with server-side fixed clipping (``dp='central-server-fixed'``) and local DP
(``dp='local'``, Flower's ``LocalDpMod``) at several noise multipliers z, beside the
non-private run, on two offline data sets: scikit-learn's digits (the one offline image set of
this machine; MedMNIST, CIFAR-10 and MNIST need downloads) and scikit-learn's bundled
breast-cancer (569 tabular records, 30 features, 2 classes: this machine has no second offline
image set), both with the ``mlp`` model; 10 clients, Dirichlet partition (alpha 0.5 on digits;
1.0 on breast-cancer, whose 455 training records Dirichlet(0.5) cannot split into 10 clients of
at least 10 for seed 1), 20 rounds, every client every round (``fraction-train`` 1: no
sampling, so no amplification), 3 seeds;
everything else is the run-config default (2 local epochs, SGD, learning rate 0.05). Every
run is the real ServerApp / ClientApp code in this process.

Settings and why:

* z in {0.1, 0.3, 1, 3, 10} for both modes. With every client every round, central and local
  DP with the same z spend the same epsilon (both are T = 20 Gaussian releases with multiplier
  z/2 under replace-one client adjacency, docs/privacy.md), so each z compares the two modes
  at equal epsilon; the grid spans epsilon from about 4 (z = 10) to thousands (z = 0.1).
* ``dp-clipping-norm`` C: 1.0 on digits, 0.2 on breast-cancer, about the median norm of the
  clients' updates in the first rounds of the non-private run (digits: 1.2 to 1.4 in rounds 1
  and 2, 0.4 to 0.6 after round 10; breast-cancer: 0.16 to 0.2, then 0.06 to 0.1; measured
  once, seed 0). Chosen from the clients' updates without privacy, as a study may; a
  deployment must fix C without looking at the clients' data (or spend privacy on it).
* ``dp-delta`` 1e-5 (well below 1/10).

The runs are one sweep (``flowerbed.sweep``: seed x data set x privacy) in ``<out>/runs``; a
rerun skips the completed points. Writes to ``--out`` (default ``benchmarks/results/privacy``;
``--quick``: ``<out>/quick``):

* ``runs.csv``: one row per run (final and best centralized test accuracy, the epsilon of its
  last row): the committed record every table and plot is made from;
* ``table.md``: final test accuracy (mean ± sample std over seeds) per mode and z, with epsilon;
* ``accuracy_vs_epsilon.png``: the same, accuracy against epsilon (log scale);

``docs/privacy.md`` includes the full benchmark's ``table.md`` when the site is built (the
line ``result_tables.docs_include`` makes); ``tests/test_published_tables.py`` checks the file
against ``runs.csv`` and the page's include line.

    python benchmarks/privacy.py [--workers 2]
    python benchmarks/privacy.py --quick           # digits; none, central z=1, local z=1; 3 rounds
    python benchmarks/privacy.py --report-only     # table and plot from runs.csv
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from result_tables import accuracy_cell, column, measure_and_report, read_runs

from flowerbed.sweep import Axis, SweepSpec, load_history

NOISE = (0.1, 0.3, 1.0, 3.0, 10.0)
MODES = {"central": "central-server-fixed", "local": "local"}
DATASETS = {
    "digits": {"dataset": "digits", "model": "mlp", "dp-clipping-norm": 1.0},
    "breast-cancer": {
        "dataset": "breast-cancer",
        "model": "mlp",
        "dirichlet-alpha": 1.0,
        "dp-clipping-norm": 0.2,
    },
}
SETTING = {"fraction-train": 1.0, "fraction-evaluate": 0.0, "dp-delta": 1e-5}
RESULTS = Path(__file__).parent / "results" / "privacy"
# the page that includes table.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "privacy.md"
FIELDS = ("dataset", "privacy", "seed", "rounds", "final", "best", "epsilon", "stopped")


def label(mode: str, z: float) -> str:
    return f"{mode} z={z:g}"


def privacy_bundles(modes, noise) -> dict[str, dict]:
    bundles = {"none": {"dp": "none"}}
    for mode in modes:
        for z in noise:
            bundles[label(mode, z)] = {"dp": MODES[mode], "dp-noise-multiplier": z}
    return bundles


def sweep_spec(datasets, modes, noise, seeds, rounds) -> SweepSpec:
    return SweepSpec(
        (  # every cell of one seed first: partial results stay balanced
            Axis.of_key("seed", seeds),
            Axis.of_bundles("data", {d: DATASETS[d] for d in datasets}),
            Axis.of_bundles("privacy", privacy_bundles(modes, noise)),
        ),
        fixed={**SETTING, "num-server-rounds": rounds},
        num_clients=10,
    )


def run_record(labels: dict, run_dir: Path, stopped: bool) -> dict:
    """What the table reads from one run. A run the noise stopped (a round in which no client
    could send a finite update: the model had diverged) counts with the last global model it
    had, and the epsilon it had spent."""
    history = load_history(run_dir)
    accuracy = [row["central_accuracy"] for row in history]
    return {
        "dataset": labels["data"],
        "privacy": labels["privacy"],
        "seed": int(labels["seed"]),
        "rounds": len(history) - 1,
        "final": accuracy[-1],
        "best": max(accuracy[1:]),
        "epsilon": history[-1].get("dp_epsilon", math.inf),
        "stopped": history[-1]["round"] + 1 if stopped else 0,
    }


def setting_epsilon(runs, setting: str) -> float:
    """The epsilon a setting spends in a complete run (the same for every seed, data set and
    mode at one z): read from the runs that completed, else computed for their rounds."""
    complete = [r for r in runs if r["privacy"] == setting and not r["stopped"]]
    if complete:
        return max(r["epsilon"] for r in complete)
    from flowerbed.privacy import central_epsilon

    z = float(setting.split("=")[1])
    rounds = max(r["rounds"] for r in runs if not r["stopped"])
    return central_epsilon(z, rounds, 10, 10, SETTING["dp-delta"])


def epsilon_text(epsilon: float) -> str:
    if math.isinf(epsilon):
        return "∞ (no privacy)"
    return f"{epsilon:.3g}" if epsilon < 1000 else f"{epsilon:,.0f}"


def ordered_settings(runs) -> list[str]:
    present = {r["privacy"] for r in runs}
    noise = sorted({float(p.split("=")[1]) for p in present if "=" in p}, reverse=True)
    settings = ["none"] + [label(m, z) for m in MODES for z in noise]
    return [s for s in settings if s in present]


def table(runs: list[dict]) -> str:
    datasets = [d for d in DATASETS if any(r["dataset"] == d for r in runs)]
    seeds = sorted({r["seed"] for r in runs})
    rounds = sorted({r["rounds"] for r in runs if not r["stopped"]})
    caption = (
        f"10 clients (Dirichlet 0.5; breast-cancer 1.0), mlp, {'/'.join(map(str, rounds))} rounds, every client every"
        f" round; seeds {', '.join(map(str, seeds))}. Final centralized test accuracy in % (mean"
        " ± sample std over seeds). epsilon: the privacy spent after the last round, client-level"
        " (replace-one), delta = 1e-5; the same for both data sets and both modes at one z."
        " Central: server-side fixed clipping; local: Flower's LocalDpMod."
        f' "k/{len(seeds)} diverged": in k'
        " runs a round came in which no client could send a finite update, and the run stopped"
        " there; it counts with the last global model it had."
    )
    lines = [
        caption,
        "",
        "| privacy | z | epsilon | " + " | ".join(datasets) + " |",
        "|---|---|---|" + "---|" * len(datasets),
    ]
    for setting in ordered_settings(runs):
        mode, _, z = setting.partition(" z=")
        epsilon = setting_epsilon(runs, setting) if z else math.inf
        cells = [accuracy_cell(runs, "diverged", dataset=d, privacy=setting) for d in datasets]
        name = "non-private" if setting == "none" else mode
        lines.append(
            f"| {name} | {z or '–'} | {epsilon_text(epsilon)} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


def read_results(runs_csv: Path) -> list[dict]:
    return read_runs(runs_csv, ("final", "best", "epsilon"), ("seed", "rounds", "stopped"))


def report(runs_csv: Path) -> str:
    """The table (the docs' block and ``table.md``), from ``runs.csv`` alone."""
    return table(read_results(runs_csv))


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = [d for d in DATASETS if any(r["dataset"] == d for r in runs)]
    fig, axes = plt.subplots(1, len(datasets), figsize=(6 * len(datasets), 4.5), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for i, mode in enumerate(MODES):
            points = []
            for setting in ordered_settings(runs):
                if not setting.startswith(mode + " "):
                    continue
                values = column(runs, dataset=dataset, privacy=setting)
                if values:
                    std = statistics.stdev(values) if len(values) > 1 else 0.0
                    points.append((setting_epsilon(runs, setting), statistics.mean(values), std))
            points.sort()
            if points:
                xs, ys, es = zip(*points)
                ax.errorbar(
                    xs,
                    [100 * y for y in ys],
                    yerr=[100 * e for e in es],
                    marker="o",
                    capsize=3,
                    label=f"{mode} DP",
                    color=plt.get_cmap("tab10")(i),
                )
        baseline = column(runs, dataset=dataset, privacy="none")
        if baseline:
            ax.axhline(100 * statistics.mean(baseline), color="black", ls="--", label="non-private")
        ax.set_xscale("log")
        ax.set_xlabel("epsilon after the last round (delta = 1e-5, client level)")
        ax.set_ylabel("final centralized test accuracy (%)")
        ax.set_ylim(0, 100)
        ax.set_title(f"{dataset}, mlp, 10 clients: mean ± std over seeds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--noise", type=float, nargs="+", default=list(NOISE))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--workers", type=int, default=1, help="runs at the same time")
    parser.add_argument("--report-only", action="store_true", help="table and plot from runs.csv")
    parser.add_argument(
        "--quick", action="store_true", help="digits; none, central and local z=1; seed 0; 3 rounds"
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seeds, args.out = 3, [0], args.out / "quick"
        args.datasets, args.noise = ["digits"], [1.0]
    spec = (
        None
        if args.report_only
        else sweep_spec(args.datasets, args.modes, args.noise, args.seeds, args.rounds)
    )
    text = measure_and_report(args.out, spec, run_record, FIELDS, report, args.workers)
    runs_csv = args.out / "runs.csv"
    plot(read_results(runs_csv), args.out / "accuracy_vs_epsilon.png")
    print(text)
    print(f"written: {runs_csv}, {args.out / 'table.md'}, {args.out / 'accuracy_vs_epsilon.png'}")


if __name__ == "__main__":
    main()
