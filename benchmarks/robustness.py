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

A study of the study driver (``flowerbed.experiments.study_cli``): a point is one attack and
defence at a number of rounds, a run one seed of it, the run config above run in this process
in a temporary folder (``sweep_study.run_cell``, one torch thread); its row holds the final
and best centralized test accuracy, the replies the server dropped and the updates it clipped
(summed over rounds), the rounds it ran and, for a run the attack stopped, the round it stopped
at. Budgets ``full`` (the default: every defence and attack, seeds 0, 1, 2, 20 rounds, 147
runs) and ``quick`` (fedavg and krum; none and sign-flip; seed 0; 3 rounds: a check that the
measuring path works, into ``results/robustness/quick``).

    python benchmarks/robustness.py                # what rows.jsonl lacks of the full grid
    python benchmarks/robustness.py --workers 2    # two runs at a time
    python benchmarks/robustness.py --quick        # 4 runs of 3 rounds
    python benchmarks/robustness.py --report-only  # the table and the plot from rows.jsonl

Writes into ``benchmarks/results/robustness``: ``rows.jsonl`` (one row per run: the committed
record), ``measured.jsonl`` (one line per invocation that measured), and, made from the rows and
the provenance beside them alone, ``table.md`` (final test accuracy, mean ± sample std over
seeds, per defence and attack; the replies the server dropped; each defence against FedAvg
paired by seed) and ``accuracy.png`` (the same as grouped bars), drawn with it.
``docs/robustness.md`` includes ``table.md`` when the site is built (the line
``result_tables.docs_include`` makes); ``tests/test_published_tables.py`` checks the file
against ``rows.jsonl`` and the page's include line. The committed rows were measured by the
script when it was a sweep (``measured.json``, its provenance, kept), into ``runs.csv``,
converted once into ``rows.jsonl``: to measure anew, remove ``rows.jsonl`` and
``measured.json``.
"""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path

from matplotlib import colormaps
from matplotlib.figure import Figure
from result_tables import (
    accuracy_cell,
    column,
    measured_where,
    paired_cell,
    table_head,
    write_table,
)
from sweep_study import cell_point, run_cell, seed_major

from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.sweep import load_history

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
NUM_CLIENTS = 10
RESULTS = Path(__file__).parent / "results" / "robustness"
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
PLOT = RESULTS / "accuracy.png"
# the page that includes table.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "robustness.md"
# seeds, defences, attacks, rounds
BUDGETS = {
    "full": ((0, 1, 2), list(DEFENCES), list(ATTACKS), 20),
    "quick": ((0,), ["fedavg", "krum"], ["none", "sign-flip"], 3),
}


class Robustness:
    """The study (module docstring): a row per attack, defence, rounds and seed."""

    name = "robustness"
    budgets = BUDGETS
    default_budget = "full"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        seeds, defences, attacks, rounds = budget_of(BUDGETS, budget)
        points = [
            cell_point(
                {"attack": attack, "defence": defence},
                {**SETTING, **ATTACKS[attack], **DEFENCES[defence]},
                rounds,
            )
            for attack in attacks
            for defence in defences
        ]
        return points, list(seeds)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        return run_cell(point, seed, NUM_CLIENTS, run_record)

    def report(self, rows: list[dict[str, Value]]) -> dict:
        if not rows:  # nothing measured yet: no table
            return {}
        return {TABLE.name: partial(table_and_plot, seed_major(rows))}


def run_record(run_dir: Path, stopped: bool) -> dict[str, Value]:
    """What the table reads from one run. A run the attack stopped (a round in which no client
    could send a finite update: the model had diverged) counts with the last global model it
    had, which no later round would have changed."""
    history = load_history(run_dir)
    accuracy = [row["central_accuracy"] for row in history]
    return {
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


def table_text(runs: list[dict], folder: Path) -> str:
    """``table.md``, from the runs and where they were measured: the accuracy table and the
    paired one."""
    return table(runs) + "\n" + paired_table(runs) + "\n" + measured_where(folder) + "\n"


def table_and_plot(runs: list[dict], folder: Path) -> str:
    """``table_text``, with the plot of the same runs drawn beside it."""
    plot(runs, folder / PLOT.name)
    return table_text(runs, folder)


def report(data: Path) -> str:
    """``table.md``, from the rows in ``data``'s folder and the provenance beside them alone."""
    return table_text(seed_major(measured_rows(data.parent)), data.parent)


def plot(runs: list[dict], path: Path) -> None:
    """Final accuracy per attack, a bar per defence (mean ± sample std over seeds)."""
    defences = [d for d in DEFENCES if any(r["defence"] == d for r in runs)]
    attacks = [a for a in ATTACKS if any(r["attack"] == a for r in runs)]
    fig = Figure(figsize=(13, 5))
    ax = fig.subplots()
    width = 0.8 / len(defences)
    colors = colormaps["tab10"]
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


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(Robustness(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
