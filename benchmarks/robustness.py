"""Robust aggregation against declared attacks: which defences hold, and which do not.

Seven defences under no attack and under each of flowerbed's six declared attacks (run-config
``attack``), three of the ten clients attacking (partitions 0, 1, 2: 30 %), on scikit-learn
digits (the one offline image set of this machine; MedMNIST, CIFAR-10 and MNIST need
downloads), Dirichlet(0.5) partition, the ``mlp`` model, 20 rounds, every client every round,
three seeds; everything else is the run-config default. Every run is the real ServerApp /
ClientApp code in this process, including the server's reply checks (so an ``inflate-examples``
reply above the node's training split is dropped before any strategy sees it).

Defences (run-config settings):

* ``fedavg``: no defence;
* ``fedmedian``: coordinate-wise median;
* ``trimmedavg``: coordinate-wise trimmed mean, ``trim-fraction`` 0.3 (the attackers' share);
* ``krum``, ``multikrum``: ``num-malicious-clients`` 3 (the true number); MultiKrum averages
  ``multikrum-selected`` = n - f = 7 models;
* ``bulyan``: ``num-malicious-clients`` 1, the largest Bulyan admits with 10 clients
  (n >= 4f + 3): it is told of fewer attackers than there are;
* ``fedavg+clip``: FedAvg with ``max-update-norm`` 1.0, about the median norm of the honest
  clients' updates in the first rounds of the clean run (0.9 to 1.3 in rounds 1 to 5, 0.35 to
  0.7 after round 8; measured once, seed 0, and not tuned on the attacks).

Attacks: ``sign-flip``; ``scale`` (x10, ``attack-scale``); ``noise`` (std 1 per entry,
``attack-noise-std``); ``label-flip`` (y -> 9 - y in the attackers' training data);
``inflate-examples`` (num-examples x10); ``free-rider`` (replies the global model it received).

The runs are one sweep (``flowerbed.sweep``: seed x attack x defence) in ``<out>/runs``; a rerun
skips the completed points. Writes to ``--out`` (default ``benchmarks/results/robustness``;
``--quick``: ``<out>/quick``):

* ``runs.csv``: one row per run (final and best test accuracy, replies dropped, updates
  clipped): the committed record every table and plot is made from;
* ``table.md``: final test accuracy (mean ± sample std over seeds) per defence and attack, and
  the replies the server dropped;
* ``accuracy.png``: the same as grouped bars;

``docs/robustness.md`` includes the full benchmark's ``table.md`` when the site is built (the
line ``result_tables.docs_include`` makes); ``tests/test_published_tables.py`` checks the file
against ``runs.csv`` and the page's include line.

    python benchmarks/robustness.py [--workers 2]
    python benchmarks/robustness.py --quick           # 2 defences, 2 attacks, 1 seed, 3 rounds
    python benchmarks/robustness.py --report-only     # table and plot from runs.csv
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from result_tables import (
    accuracy_cell,
    column,
    measure_and_report,
    paired_cell,
    provenance_line,
    read_runs,
    table_head,
)

from flowerbed.sweep import Axis, SweepSpec, load_history

ATTACKERS = "0,1,2"
DEFENCES = {
    "fedavg": {"strategy": "fedavg"},
    "fedmedian": {"strategy": "fedmedian"},
    "trimmedavg": {"strategy": "trimmedavg", "trim-fraction": 0.3},
    "krum": {"strategy": "krum", "num-malicious-clients": 3},
    "multikrum": {"strategy": "multikrum", "num-malicious-clients": 3, "multikrum-selected": 7},
    "bulyan": {"strategy": "bulyan", "num-malicious-clients": 1},
    "fedavg+clip": {"strategy": "fedavg", "max-update-norm": 1.0},
}
ATTACKS = {
    "none": {"attack": "none", "attackers": ""},
    "sign-flip": {"attack": "sign-flip", "attackers": ATTACKERS},
    "scale": {"attack": "scale", "attackers": ATTACKERS, "attack-scale": 10.0},
    "noise": {"attack": "noise", "attackers": ATTACKERS, "attack-noise-std": 1.0},
    "label-flip": {"attack": "label-flip", "attackers": ATTACKERS},
    "inflate-examples": {
        "attack": "inflate-examples",
        "attackers": ATTACKERS,
        "attack-inflation": 10,
    },
    "free-rider": {"attack": "free-rider", "attackers": ATTACKERS},
}
SETTING = {"dataset": "digits", "model": "mlp", "fraction-train": 1.0, "fraction-evaluate": 0.0}
RESULTS = Path(__file__).parent / "results" / "robustness"
# the page that includes table.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "robustness.md"
FIELDS = (
    "defence",
    "attack",
    "seed",
    "rounds",
    "final",
    "best",
    "dropped",
    "clipped",
    "stopped",
)


def sweep_spec(defences, attacks, seeds, rounds) -> SweepSpec:
    return SweepSpec(
        (  # every cell of one seed first: partial results stay balanced
            Axis.of_key("seed", seeds),
            Axis.of_bundles("attack", {a: ATTACKS[a] for a in attacks}),
            Axis.of_bundles("defence", {d: DEFENCES[d] for d in defences}),
        ),
        fixed={**SETTING, "num-server-rounds": rounds},
        num_clients=10,
    )


def run_record(labels: dict, run_dir: Path, stopped: bool) -> dict:
    """What the table reads from one run. A run the attack stopped (a round in which no client
    could send a finite update: the model had diverged) counts with the last global model it
    had, which no later round would have changed."""
    history = load_history(run_dir)
    accuracy = [row["central_accuracy"] for row in history]
    return {
        "defence": labels["defence"],
        "attack": labels["attack"],
        "seed": int(labels["seed"]),
        "rounds": len(history) - 1,
        "final": accuracy[-1],
        "best": max(accuracy[1:]),
        "dropped": sum(row.get("clients_failed", 0) for row in history),
        "clipped": sum(row.get("clients_clipped", 0) for row in history),
        "stopped": history[-1]["round"] + 1 if stopped else 0,
    }


def table(runs: list[dict]) -> str:
    defences = [d for d in DEFENCES if any(r["defence"] == d for r in runs)]
    attacks = [a for a in ATTACKS if any(r["attack"] == a for r in runs)]
    seeds = sorted({r["seed"] for r in runs})
    rounds = max(r["rounds"] for r in runs)  # a stopped run has fewer
    caption = (
        f"Digits, 10 clients (Dirichlet 0.5), mlp, {rounds} rounds, every"
        f" client every round; attackers: partitions {ATTACKERS} (30 %) where attacked; seeds"
        f" {', '.join(map(str, seeds))}. Final centralized test accuracy in % (mean ± sample std"
        ' over seeds). "k/3 stopped": in k runs a round came in which no client could send a'
        " finite update (the model had diverged), and the run failed there; it counts with the"
        " last global model it had."
    )
    lines = table_head(caption, "defence", attacks)
    for defence in defences:
        cells = [
            accuracy_cell(runs, "stopped", defence=defence, attack=attack) for attack in attacks
        ]
        lines.append(f"| {defence} | " + " | ".join(cells) + " |")
    dropped = [
        f"{defence} / {attack}: {sum(column(runs, 'dropped', defence=defence, attack=attack))}"
        for defence in defences
        for attack in attacks
        if sum(column(runs, "dropped", defence=defence, attack=attack))
    ]
    lines += [
        "",
        "Replies the server dropped (its reply checks), summed over rounds and seeds: "
        + ("; ".join(dropped) if dropped else "none")
        + ".",
    ]
    return "\n".join(lines) + "\n"


def paired_table(runs: list[dict]) -> str:
    """Each defence against FedAvg under the same attack, paired by seed (same partition, same
    initial model): mean difference of final accuracy and its 95 % t interval."""
    defences = [d for d in DEFENCES if d != "fedavg" and any(r["defence"] == d for r in runs)]
    attacks = [a for a in ATTACKS if any(r["attack"] == a for r in runs)]
    caption = (
        "Final accuracy minus FedAvg's under the same attack, paired by seed, in percentage"
        " points: mean [95 % t interval]; **bold** where the interval excludes 0."
    )
    lines = table_head(caption, "defence", attacks)
    for defence in defences:
        cells = [
            paired_cell(
                runs,
                {"defence": defence, "attack": attack},
                {"defence": "fedavg", "attack": attack},
            )
            for attack in attacks
        ]
        lines.append(f"| {defence} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def read_results(runs_csv: Path) -> list[dict]:
    return read_runs(
        runs_csv, ("final", "best"), ("seed", "rounds", "dropped", "clipped", "stopped")
    )


def report(runs_csv: Path) -> str:
    """The tables (the docs' block and ``table.md``), from ``runs.csv`` alone."""
    runs = read_results(runs_csv)
    return table(runs) + "\n" + paired_table(runs) + "\n" + provenance_line(runs_csv.parent) + "\n"


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    defences = [d for d in DEFENCES if any(r["defence"] == d for r in runs)]
    attacks = [a for a in ATTACKS if any(r["attack"] == a for r in runs)]
    fig, ax = plt.subplots(figsize=(13, 5))
    width = 0.8 / len(defences)
    colors = plt.get_cmap("tab10")
    for i, defence in enumerate(defences):
        means, stds = [], []
        for attack in attacks:
            values = column(runs, defence=defence, attack=attack)
            means.append(100 * statistics.mean(values) if values else float("nan"))
            stds.append(100 * statistics.stdev(values) if len(values) > 1 else 0.0)
        positions = [j + (i - (len(defences) - 1) / 2) * width for j in range(len(attacks))]
        ax.bar(positions, means, width, yerr=stds, capsize=2, label=defence, color=colors(i))
    ax.set_xticks(range(len(attacks)), attacks)
    ax.set_xlabel("attack (3 of 10 clients)")
    ax.set_ylabel("final centralized test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.set_title("digits, 10 clients, Dirichlet(0.5), mlp: mean ± std over seeds")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(ncol=len(defences), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--defences", nargs="+", default=list(DEFENCES), choices=list(DEFENCES))
    parser.add_argument("--attacks", nargs="+", default=list(ATTACKS), choices=list(ATTACKS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--workers", type=int, default=1, help="runs at the same time")
    parser.add_argument("--report-only", action="store_true", help="table and plot from runs.csv")
    parser.add_argument(
        "--quick", action="store_true", help="fedavg, krum; none, sign-flip; seed 0; 3 rounds"
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seeds, args.out = 3, [0], args.out / "quick"
        args.defences, args.attacks = ["fedavg", "krum"], ["none", "sign-flip"]
    spec = (
        None
        if args.report_only
        else sweep_spec(args.defences, args.attacks, args.seeds, args.rounds)
    )
    text = measure_and_report(args.out, spec, run_record, FIELDS, report, args.workers)
    runs_csv = args.out / "runs.csv"
    plot(read_results(runs_csv), args.out / "accuracy.png")
    print(text)
    print(f"written: {runs_csv}, {args.out / 'table.md'}, {args.out / 'accuracy.png'}")


if __name__ == "__main__":
    main()
