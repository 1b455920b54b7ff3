"""FedSA ("Federated Selective Aggregation for Knowledge Amalgamation", Xie et al., 2022) on
digits, an offline replication: does saliency-based teacher selection help a
server's target model learn from k labelled images per class, and does it avoid the teachers
that live in another domain?

Setting: digits, ``cnn`` target and teachers, 10 clients (teachers) on the pathological
partition (2 classes each) of the clients' pool; the server keeps 40 % of the training pool
(``server-fraction``), of which k images per class are its target set D_T; clients 5..9 are
foreign (their private inputs pixel-permuted); 30 rounds, a selection every 10 rounds, K = 3
teachers per selection, 2 hint-distillation epochs. Methods (``fedsa-selection``): FedSA
(``saliency``), Scratch (D_T alone), FedAvg+ (``all``), Random, Top-K, Least-K; k in
{1, 2, 5, 10}; seeds 7, 42, 123. Every run goes through the real ServerApp/ClientApp handlers
in this process (``run_in_process``).

Measured: the adapted target model's final test accuracy (and the weak model's: history row
0 of the FedSA runs); every method minus Scratch and the paper's orderings (c) as paired
per-seed differences; the share of the drawn teachers that were foreign. The paper's Table 3
analogue for this setting (per teacher, its similarity at the first selection against its
linear-probe transfer accuracy) is measured by ``benchmarks/fedsa_explain.py`` (its
``two-class`` setting is this one).

A study of the study driver (``flowerbed.experiments.study_cli``): a point is one method at
one k (``<method slug>/k<k>/r<rounds>``), a run one seed of it, in a temporary folder, one
torch thread (``sweep_study.run_cell``); a worker's first teacher-using run of a seed also
pays the teachers' pre-training (~9 s; they are cached per process). Its row: ``method``,
``k``, ``rounds``, ``final_accuracy``, ``weak_accuracy``, ``round_seconds`` (the sum of its
rounds), ``foreign_draws`` and ``draws`` (over its selections, multiplicities counted) and
``accuracy/<round>`` (the adapted target model's test accuracy after every round, 0 the weak
model's). Budgets ``full`` (the default: every method, k 1, 2, 5 and 10, seeds 7, 42, 123, 30
rounds: 84 runs) and ``quick`` (FedSA, Scratch, Random and Least-K, k 1 and 5, seed 42, 10
rounds: 8 runs, a check that the measuring path works, into ``results/fedsa/quick``).

    python benchmarks/fedsa.py                  # what rows.jsonl lacks of the full budget
    python benchmarks/fedsa.py --workers 2      # two runs at a time
    python benchmarks/fedsa.py --quick          # 8 runs of 10 rounds
    python benchmarks/fedsa.py --report-only    # table.md from rows.jsonl

Writes into ``benchmarks/results/fedsa``: ``rows.jsonl`` (one row per run: the committed
record), ``measured.jsonl`` (one line per invocation that measured), ``table.md`` (the accuracy,
paired-difference and foreign-share tables), made from the rows and the provenance beside them
alone, which ``docs/studies-fedsa.md`` includes (``tests/test_published_tables.py`` checks it),
and ``fedsa_curves.png`` (mean accuracy per round at k = 5), drawn with it from the rows that
hold their rounds. The committed rows were measured on 2026-11-22 by the script before it
became a study, into ``fedsa.csv`` (its provenance not recorded: ``provenance.json``, kept),
and converted once into ``rows.jsonl`` (the table's caption still names ``fedsa.csv``; its
``run_dir`` column, the deleted run folders, is kept): they hold no rounds, so the committed
``fedsa_curves.png`` and ``fedsa.md`` (that script's log, with its Table 3 analogue from
probes that were not committed) are that measurement's, kept. To measure anew, remove
``rows.jsonl`` and ``provenance.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from result_tables import (
    measured_where,
    paired_cell,
    percent_cell,
    table_head,
    write_table,
)
from sweep_study import run_cell

from flowerbed.core.results import round_seconds
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.sweep import load_history

NUM_CLIENTS, FOREIGN = 10, 5
# label -> (file slug, overrides). Every method adapts all parameters at the end (the authors'
# code), as Scratch does: the same final step for all; "FedSA (head)" is the paper's head-only
# adaptation, shown beside it.
METHODS = {
    "FedSA": ("saliency", {"fedsa-selection": "saliency"}),
    "FedSA (head)": ("saliency-head", {"fedsa-selection": "saliency", "fedsa-adapt": "head"}),
    "Scratch": ("scratch", {"fedsa-selection": "scratch"}),
    "FedAvg+": ("all", {"fedsa-selection": "all"}),
    "Random": ("random", {"fedsa-selection": "random"}),
    "Top-K": ("top-k", {"fedsa-selection": "top-k"}),
    "Least-K": ("least-k", {"fedsa-selection": "least-k"}),
}
QUICK_METHODS = ("FedSA", "Scratch", "Random", "Least-K")
CURVE_K = 5  # the k of the curves


SETTING = {
    "strategy": "fedsa",
    "dataset": "digits",
    "model": "cnn",
    "server-fraction": 0.4,
    "partitioner": "pathological",
    "classes-per-client": 2,
    "fedsa-foreign-teachers": FOREIGN,
    "fedsa-selection-gap": 10,
    "fedsa-num-selected": 3,
    "fedsa-local-epochs": 2,
}
RESULTS = Path(__file__).parent / "results" / "fedsa"
# what ``report`` reads and writes
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
PLOT = RESULTS / "fedsa_curves.png"
# the file the committed rows were converted from, which the table's caption names
CONVERTED = "fedsa.csv"
# the page that includes table.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-fedsa.md"
# the paired comparisons of the paper's orderings (c): (mine, base)
ORDERINGS = (("FedSA", "FedAvg+"), ("FedSA", "Random"), ("Random", "Least-K"))


@dataclass(frozen=True)
class Budget:
    """A budget's methods, ks, seeds and rounds."""

    methods: tuple[str, ...]
    ks: tuple[int, ...]
    seeds: tuple[int, ...]
    rounds: int


BUDGETS = {
    "full": Budget(tuple(METHODS), (1, 2, 5, 10), (7, 42, 123), 30),
    "quick": Budget(QUICK_METHODS, (1, 5), (42,), 10),
}


def method_overrides(label: str, methods: dict = METHODS) -> dict:
    """A method's keys; every method adapts all parameters unless it says otherwise.
    ``methods``: label -> (slug, keys), ``METHODS`` or another benchmark's."""
    return {"fedsa-adapt": "all", **methods[label][1]}


def point_config(
    label: str, k: int, rounds: int, setting: dict = SETTING, methods: dict = METHODS
) -> dict:
    """One (method, k) point's run config, without its seed (``setting``: the fixed keys,
    ``SETTING`` or another benchmark's variant of it)."""
    return {
        **setting,
        **method_overrides(label, methods),
        "num-server-rounds": rounds,
        "fedsa-labels-per-class": k,
    }


def overrides(
    label: str, k: int, seed: int, rounds: int, setting: dict = SETTING, methods: dict = METHODS
) -> dict:
    """One (method, k, seed) run's run config (``point_config`` with its seed)."""
    return {**point_config(label, k, rounds, setting, methods), "seed": seed}


class Fedsa:
    """The study (module docstring): a row per method, k and seed, what ``run_record`` reads
    of the run."""

    name = "fedsa"
    budgets = BUDGETS
    default_budget = "full"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        points = []
        for k in chosen.ks:
            for label in chosen.methods:
                config = point_config(label, k, chosen.rounds)  # the seed: ``run_cell``'s
                labels = {"method": label, "k": k, "rounds": chosen.rounds}
                name = f"{METHODS[label][0]}/k{k}/r{chosen.rounds}"
                points.append(Point(name, {"labels": labels, "config": config}))
        return points, list(chosen.seeds)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        return run_cell(point, seed, NUM_CLIENTS, run_record)

    def report(self, rows: list[dict[str, Value]]) -> dict:
        if not rows:  # nothing measured yet: no table
            return {}
        return {TABLE.name: partial(table_and_plot, in_order(rows))}


def run_record(run_dir: Path, stopped: bool) -> dict[str, Value]:
    """What the table and the plot read from one run folder (module docstring). A run stopped
    by a round in which no client succeeded has no adapted model to measure: it fails."""
    if stopped:
        raise RuntimeError(f"{run_dir.name} stopped: a round had no client that succeeded")
    history = load_history(run_dir)
    log_path = run_dir / "fedsa_selection.json"
    log = json.loads(log_path.read_text()) if log_path.is_file() else None
    foreign, draws = foreign_draws({"selection_log": log})
    return {
        "final_accuracy": history[-1]["central_accuracy"],
        "weak_accuracy": history[0]["central_accuracy"],
        "round_seconds": sum(round_seconds(run_dir)),
        "foreign_draws": foreign,
        "draws": draws,
        **{f"accuracy/{t}": row["central_accuracy"] for t, row in enumerate(history)},
    }


def foreign_draws(record: dict) -> tuple[int, int]:
    """(foreign draws, all draws) over the run's selections, multiplicities counted."""
    log = record["selection_log"]
    if not log:
        return 0, 0
    foreign = {t["partition"] for t in log["teachers"] if t["foreign"]}
    draws = [(int(pid), m) for s in log["selections"] for pid, m in s["selected"].items()]
    return sum(m for pid, m in draws if pid in foreign), sum(m for _, m in draws)


def in_order(rows: list[dict[str, Value]]) -> list[dict[str, Value]]:
    """The rows of known methods by seed, k and method (``METHODS``' order): the order in which
    the table's means are summed, that of the old ``fedsa.csv``."""
    methods = list(METHODS)
    known = [row for row in rows if row["method"] in METHODS]
    return sorted(known, key=lambda r: (r["seed"], r["k"], methods.index(r["method"])))


def curve(row: dict[str, Value]) -> list[float]:
    """A run's accuracy after every round (round 0: the weak model); none in the converted
    rows."""
    values = []
    while f"accuracy/{len(values)}" in row:
        values.append(float(row[f"accuracy/{len(values)}"]))
    return values


def plot_curves(runs: list[dict[str, Value]], path: Path) -> None:
    """Mean accuracy per round at k = CURVE_K, per method (Scratch, one number: a line)."""
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for label in METHODS:
        curves = [curve(r) for r in runs if r["method"] == label and r["k"] == CURVE_K]
        curves = [c for c in curves if c]
        if not curves:
            continue
        mean = np.mean(curves, axis=0)
        if len(mean) == 1:  # Scratch: the target set alone, one number
            ax.axhline(mean[0], linestyle="--", color="grey", label=label)
        else:
            ax.plot(np.arange(len(mean)), mean, label=label)
    ax.set_xlabel("round (0: the weak model)")
    ax.set_ylabel("adapted target model's test accuracy")
    ax.set_title(f"FedSA on digits, k = {CURVE_K} labels per class, mean over seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def table_and_plot(runs: list[dict[str, Value]], folder: Path) -> str:
    """``table``, with the plot of the same runs drawn beside it where they hold their rounds
    at k = CURVE_K (the converted rows do not: the committed plot stays)."""
    if any(curve(r) for r in runs if r["k"] == CURVE_K):
        plot_curves(runs, folder / PLOT.name)
    return table(runs, folder)


def table(runs: list[dict[str, Value]], folder: Path) -> str:
    """The tables of ``table.md``, from the runs (``in_order``) and where they were measured:
    final accuracy (mean ± sample std over seeds), every method minus Scratch and the orderings
    (c) as paired per-seed differences with 95 % t intervals (``result_tables.paired_cell``),
    the share of foreign draws."""
    labels = [m for m in METHODS if any(r["method"] == m for r in runs)]
    ks = sorted({r["k"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    columns = [f"k = {k}" for k in ks]

    def finals(method: str, k: int, key: str = "final_accuracy") -> list[float]:
        return [r[key] for r in runs if r["method"] == method and r["k"] == k]

    lines = table_head(
        f"Final test accuracy of the adapted target model in %, mean ± sample std over seeds"
        f" {', '.join(map(str, seeds))} (`{CONVERTED}`; weak model: history row 0 of the FedSA"
        " runs).",
        "method",
        columns,
    )
    for m in labels:
        lines.append(f"| {m} | " + " | ".join(percent_cell(finals(m, k)) for k in ks) + " |")
    weak = [percent_cell(finals("FedSA", k, "weak_accuracy")) for k in ks]
    lines.append("| weak model (row 0 of FedSA) | " + " | ".join(weak) + " |")

    def pair(mine: str, base: str, k: int) -> str:
        return paired_cell(
            runs, {"method": mine, "k": k}, {"method": base, "k": k}, "final_accuracy"
        )

    lines += [""] + table_head(
        "Each method minus Scratch, paired by seed, in points: mean [95 % t interval], bold"
        " where the interval excludes 0.",
        "method − Scratch",
        columns,
    )
    for m in labels:
        if m != "Scratch":
            lines.append(f"| {m} | " + " | ".join(pair(m, "Scratch", k) for k in ks) + " |")
    lines += [""] + table_head(
        "The paper's orderings (c), paired by seed, in points: mean [95 % t interval], bold"
        " where the interval excludes 0.",
        "difference",
        columns,
    )
    for mine, base in ORDERINGS:
        if mine in labels and base in labels:
            lines.append(
                f"| {mine} − {base} | " + " | ".join(pair(mine, base, k) for k in ks) + " |"
            )
    lines += [""] + table_head(
        "Share of the drawn teachers that were foreign (all selections, k and seeds); minus"
        " Random's: per seed (over k), paired by seed, in points, mean [95 % t interval], bold"
        " where the interval excludes 0.",
        "method",
        ["foreign draws / draws", "share", "share − Random's"],
    )
    shares = []  # one row per (method, seed): the seed's share over k
    for m in labels:
        for seed in seeds:
            mine = [r for r in runs if r["method"] == m and r["seed"] == seed]
            draws = sum(r["draws"] for r in mine)
            if draws:
                foreign = sum(r["foreign_draws"] for r in mine)
                shares.append({"method": m, "seed": seed, "share": foreign / draws})
    for m in labels:
        foreign = sum(r["foreign_draws"] for r in runs if r["method"] == m)
        draws = sum(r["draws"] for r in runs if r["method"] == m)
        share = f"{100 * foreign / draws:.0f} %" if draws else "– (no teachers)"
        gap = (
            paired_cell(shares, {"method": m}, {"method": "Random"}, "share")
            if m != "Random"
            else "–"
        )
        lines.append(f"| {m} | {foreign} / {draws} | {share} | {gap} |")
    lines += ["", measured_where(folder)]
    return "\n".join(lines) + "\n"


def report(data: Path) -> str:
    """``table.md``, from the rows in ``data``'s folder and the provenance beside them alone."""
    return table(in_order(measured_rows(data.parent)), data.parent)


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(Fedsa(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
