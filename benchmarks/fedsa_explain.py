"""Why FedSA's orderings did not appear on digits: ``docs/studies-fedsa.md``'s hypotheses, tested.

``benchmarks/fedsa.py`` reproduces FedSA ("Federated Selective Aggregation for Knowledge
Amalgamation", Xie et al., 2022) on digits; none of the paper's orderings appeared. This
benchmark runs the experiments that test the explanations offered there, with fedsa.py's
functions and its setting (``cnn``, 10 owners, the last 5 foreign, 30 rounds, a selection
every 10, K = 3, E = 2; seeds 7, 42, 123) except where a setting below says otherwise:

1. **Teachers that can transfer** (setting ``all-class``). The hypothesis: owners that know 2
   digit classes carry nothing a linear probe can use (probe accuracy below the weak target
   model's), so amalgamation has nothing to add. Here every owner holds all 10 classes
   (``classes-per-client`` 10) and the server keeps a smaller share (``server-fraction`` 0.1,
   so the owners learn from ~130 images instead of ~86), chosen from a check at k = 1, seed
   42, before any amalgamation was run: every clean teacher's probe (69-80 %) beat the weak
   model (60 %); with 5 classes per owner (server-fraction 0.4, 0.2 or 0.1) most did not
   (38-68 % against 53-61 %), nor at k = 10 in any setting tried (the weak model: ~90 %),
   hence k = 1 only. The premise is recorded, per teacher and seed, in ``teachers.md``.
   The foreign owners stay: their probes are not expected to beat it (something for the
   selection to avoid). FedSA, Random and Least-K are compared with Scratch at k = 1.
2. **Head-only against head-only with enough steps.** The paper adapts a new head on the
   frozen amalgamated features; at k <= 2 that head gets 30 optimiser steps (30 epochs, one
   batch). Here the head learns for ``HEAD_STEPS`` steps whatever k (the adaptation's own
   optimiser and cosine schedule, epochs = steps / batches), on FedSA's amalgamated features
   and on the weak model's, paired by seed; the same at twice the steps, with the loss on
   D_T, shows whether it had flattened. Every run of both settings; FedSA in ``two-class``
   (fedsa.py's) at k = 1 and 10.
3. **The paper's positive weighting.** The paper's Random and Least-K rows are "+Positive
   Weighted": ``fedsa-weighting=positive`` (weights ~ m_n p_n) beside the uniform versions
   and FedSA, at k = 1 in both settings.
4. **Table 3 analogue**, from data: per teacher, its similarity at the first selection (both
   kinds, from the FedSA run's log) and its linear-probe transfer accuracy (fedsa.py's probe:
   the adaptation's 30 epochs; and the probe with ``HEAD_STEPS``), in ``teachers.md``.

Every teacher-based run adapts the head alone (``fedsa-adapt=head``), so its saved
``model.pt`` holds the amalgamated features untouched; the run then computes, in its own
process, the adaptation of every parameter that fedsa.py's runs end with (the same function,
seed and round: ``final_all``), the head with ``HEAD_STEPS``, and the weak model of the seed
(rebuilt: the seeded initial model trained by ``train_weak``; ``weak_check`` is its head
adaptation's difference from the run's history row 0, 0 when the rebuild is the run's).
Scratch is that weak model adapted in every parameter (fedsa.py's Scratch run, which does
exactly this).

A study of the study driver (``flowerbed.experiments.study_cli``): a point is one setting,
method and k, a run one seed of it (the FL run through the real ServerApp/ClientApp handlers
in this process, in a temporary folder, then its diagnostics). Its row holds the run's
diagnostics (the columns of ``table.md``; ``round_seconds``: the sum of its rounds) and, for
FedSA, each teacher's at the first selection (``foreign/<teacher>``,
``similarity_averaged/...``, ``similarity_per_image/...``, ``probe/...``,
``probe_steps/...``: experiment 4 and the premise). Budgets ``full`` (the default: ``GRID``,
seeds 7, 42, 123, 30 rounds: 33 runs, about 10 min of runs on one core) and ``quick`` (seed
42, k = 1, 10 rounds, 3 runs: a check that the measuring path works, into
``results/fedsa-explain/quick``).

    python benchmarks/fedsa_explain.py               # what rows.jsonl lacks of the full grid
    python benchmarks/fedsa_explain.py --workers 2   # two runs at a time
    python benchmarks/fedsa_explain.py --quick       # seed 42, k 1, 10 rounds, 3 runs
    python benchmarks/fedsa_explain.py --report-only # table.md, teachers.md from rows.jsonl

Writes into ``benchmarks/results/fedsa-explain``: ``rows.jsonl`` (one row per run: the
committed record), ``measured.jsonl`` (one line per invocation that measured), and ``table.md``
(experiments 1 to 3) and ``teachers.md`` (the premise and experiment 4), made from the rows and
the provenance beside them alone, which ``docs/studies-fedsa.md`` includes
(``tests/test_published_tables.py`` checks both). The committed rows were measured on
2026-11-26 by the script before it became a study (``measured.json``, its provenance, kept),
into ``runs.csv`` and ``teachers.csv``, and converted once into ``rows.jsonl``: to measure
anew, remove ``rows.jsonl`` and ``measured.json``.
"""

from __future__ import annotations

import functools
import json
import math
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from fedsa import NUM_CLIENTS, SETTING, foreign_draws, overrides
from result_tables import (
    interval_cell,
    measured_where,
    paired_cell,
    percent_cell,
    table_head,
    write_table,
)
from scipy import stats

from flowerbed.catalog import parse_run_config
from flowerbed.core.results import round_seconds
from flowerbed.data.federation import load_splits
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.fedsa_transfer import owner_teacher
from flowerbed.experiments.study_runs import one_thread_quietly
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.methods.fedsa.target import adapt, target_set, train_weak
from flowerbed.models import run_model
from flowerbed.runtime.context import initial_model
from flowerbed.sweep import load_history
from flowerbed.training.loops import evaluate

RESULTS = Path(__file__).parent / "results" / "fedsa-explain"
DATA = RESULTS / ROWS
TABLE, TEACHERS_TABLE = RESULTS / "table.md", RESULTS / "teachers.md"
# what teachers.md is made of: the teachers of the same rows (report's argument)
TEACHER_ROWS = f"{ROWS}:teachers"
PUBLISHED = [(DATA, TABLE), (RESULTS / TEACHER_ROWS, TEACHERS_TABLE)]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-fedsa.md"  # includes both tables

# optimiser steps of the head-only adaptation, whatever k: at 1000 the head fits D_T (loss
# ~0.1) and test accuracy moves by about a point up to 4000 (checked at k = 1 and 10)
HEAD_STEPS = 1000
HEAD = {"fedsa-adapt": "head"}  # model.pt keeps the amalgamated features
# label -> (slug, keys); "+PW": the paper's positive weighting (weights ~ m_n p_n)
METHODS = {
    "FedSA": ("saliency", {"fedsa-selection": "saliency", **HEAD}),
    "Random": ("random", {"fedsa-selection": "random", **HEAD}),
    "Least-K": ("least-k", {"fedsa-selection": "least-k", **HEAD}),
    "Random+PW": (
        "random-pw",
        {"fedsa-selection": "random", "fedsa-weighting": "positive", **HEAD},
    ),
    "Least-K+PW": (
        "least-k-pw",
        {"fedsa-selection": "least-k", "fedsa-weighting": "positive", **HEAD},
    ),
}
# name -> fixed keys: fedsa.py's setting, and owners whose teachers transfer
SETTINGS = {
    "two-class": SETTING,
    "all-class": {**SETTING, "classes-per-client": 10, "server-fraction": 0.1},
}
# (setting, methods, ks): the points of a budget
GRID = (
    ("two-class", tuple(METHODS), (1,)),
    ("two-class", ("FedSA",), (10,)),
    ("all-class", tuple(METHODS), (1,)),
)
QUICK_GRID = (("two-class", ("FedSA",), (1,)), ("all-class", ("FedSA", "Least-K+PW"), (1,)))
# the paired comparisons of experiments 1 and 3 (mine, base), on final_all
COMPARISONS = (
    ("FedSA", "Scratch"),
    ("Random", "Scratch"),
    ("Least-K", "Scratch"),
    ("Random+PW", "Scratch"),
    ("Least-K+PW", "Scratch"),
    ("FedSA", "Random"),
    ("Random", "Least-K"),
    ("Random+PW", "Random"),
    ("Least-K+PW", "Least-K"),
    ("FedSA", "Random+PW"),
    ("Random+PW", "Least-K+PW"),
)
# a FedSA run's values of each teacher at the first selection (``teacher/<partition>``)
TEACHER_VALUES = ("foreign", "similarity_averaged", "similarity_per_image", "probe", "probe_steps")


@dataclass(frozen=True)
class Budget:
    """A budget's points (``GRID``'s shape), seeds and rounds."""

    grid: tuple[tuple[str, tuple[str, ...], tuple[int, ...]], ...]
    seeds: tuple[int, ...]
    rounds: int


BUDGETS = {"full": Budget(GRID, (7, 42, 123), 30), "quick": Budget(QUICK_GRID, (42,), 10)}


class FedsaExplain:
    """The study (module docstring): a row per setting, method, k and seed, what ``run_row``
    measures."""

    name = "fedsa_explain"
    budgets = BUDGETS
    default_budget = "full"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        points = [
            Point(
                f"{setting}/{METHODS[label][0]}/k{k}",
                {"setting": setting, "method": label, "k": k, "rounds": chosen.rounds},
            )
            for setting, labels, ks in chosen.grid
            for k in ks
            for label in labels
        ]
        return points, list(chosen.seeds)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        settings = point.settings
        with one_thread_quietly(), tempfile.TemporaryDirectory(prefix="flowerbed-fedsa-") as out:
            return run_row(
                settings["setting"],
                settings["method"],
                settings["k"],
                seed,
                settings["rounds"],
                Path(out),
            )

    def report(self, rows: list[dict[str, Value]]) -> dict:
        runs = in_grid_order(rows)
        if not runs:  # nothing measured yet: no table
            return {}
        return {
            TABLE.name: partial(report_runs, runs),
            TEACHERS_TABLE.name: partial(report_teachers, runs),
        }


def run_setup(setting: str, label: str, k: int, seed: int, rounds: int):
    """(run config, parsed config, data, D_T) of one run, rebuilt as the run built them."""
    run_config = resolve_run_config(overrides(label, k, seed, rounds, SETTINGS[setting], METHODS))
    config = parse_run_config(run_config)
    return run_config, config, load_splits(config), target_set(config)


def weak_model(config, data, x, y):
    """The run's weak target model (Algorithm 1, line 4, at round 0): the seeded initial
    model trained on D_T, as ``WeakTarget`` trains it."""
    model = initial_model(config, run_model, data.input_shape, data.num_classes)
    train_weak(model, x, y, config, 0)
    return model


def head_with_steps(model, x, y, config, steps: int):
    """A copy of ``model`` with a new head trained on its frozen features for at least
    ``steps`` optimiser steps (the adaptation's optimiser and schedule, longer)."""
    batches = math.ceil(len(y) / config.batch_size)
    longer = config.replace(fedsa_adapt_epochs=math.ceil(steps / batches))
    return adapt(model, x, y, longer, "head", 0)


def head_results(model, x, y, config, test) -> tuple[float, float, float, float]:
    """Test accuracy and D_T loss of the head with HEAD_STEPS and with twice as many."""
    short, long = (head_with_steps(model, x, y, config, n) for n in (HEAD_STEPS, 2 * HEAD_STEPS))
    return test(short), test(long), evaluate(short, x, y)[0], evaluate(long, x, y)[0]


@functools.cache
def weak_results(setting: str, k: int, seed: int, rounds: int) -> dict:
    """The weak model's adaptations for one setting, k and seed (the same in every method's
    run: computed once per process): every parameter (Scratch), the head with HEAD_STEPS and
    twice as many (test accuracy, D_T loss), and the paper's head (the run's row 0)."""
    _, config, data, (x, y) = run_setup(setting, "FedSA", k, seed, rounds)

    def test(model) -> float:
        return evaluate(model, data.x_test, data.y_test)[1]

    weak = weak_model(config, data, x, y)
    keys = ("weak_head_steps", "weak_head_steps_2x", "weak_head_loss", "weak_head_loss_2x")
    return {
        "weak_all": test(adapt(weak, x, y, config, "all", 0)),
        **dict(zip(keys, head_results(weak, x, y, config, test))),
        "weak_head": test(adapt(weak, x, y, config, "head", 0)),
    }


def run_row(setting: str, label: str, k: int, seed: int, rounds: int, out: Path) -> dict:
    """One run (module docstring), in ``out``, and its row: the diagnostics
    (``diagnose_run``) and, for FedSA, its teachers' (``diagnose_teachers``)."""
    keys = overrides(label, k, seed, rounds, SETTINGS[setting], METHODS)
    run_dir = run_in_process({**keys, "output-dir": str(out)}, NUM_CLIENTS)
    history = load_history(run_dir)
    log_path = run_dir / "fedsa_selection.json"
    record = {
        "method": label,
        "k": k,
        "seed": seed,
        "rounds": rounds,
        "final_accuracy": history[-1]["central_accuracy"],
        "weak_accuracy": history[0]["central_accuracy"],
        "round_seconds": sum(round_seconds(run_dir)),
        "selection_log": json.loads(log_path.read_text()) if log_path.is_file() else None,
    }
    state = torch.load(run_dir / "model.pt")
    row = diagnose_run(setting, record, state)
    if label == "FedSA":
        row |= diagnose_teachers(setting, record)
    return row


def diagnose_run(setting: str, record: dict, state: dict) -> dict:
    """One finished run's diagnostics (module docstring), from its record and its final
    model's ``state``."""
    label, k, seed, rounds = record["method"], record["k"], record["seed"], record["rounds"]
    _, config, data, (x, y) = run_setup(setting, label, k, seed, rounds)

    def test(model) -> float:
        return evaluate(model, data.x_test, data.y_test)[1]

    weak = weak_results(setting, k, seed, rounds)
    amalgamated = initial_model(config, run_model, data.input_shape, data.num_classes)
    amalgamated.load_state_dict(state)
    head = head_results(amalgamated, x, y, config, test)
    foreign, draws = foreign_draws(record)
    return {
        "setting": setting,
        "method": label,
        "k": k,
        "rounds": rounds,
        "final_head_run": record["final_accuracy"],
        "final_all": test(adapt(amalgamated, x, y, config, "all", rounds)),
        **dict(zip(("head_steps", "head_steps_2x", "head_loss", "head_loss_2x"), head)),
        **{key: value for key, value in weak.items() if key != "weak_head"},
        "weak_check": abs(weak["weak_head"] - record["weak_accuracy"]),
        "foreign_draws": foreign,
        "draws": draws,
        "round_seconds": record["round_seconds"],
    }


def diagnose_teachers(setting: str, record: dict) -> dict[str, Value]:
    """Table 3 analogue and premise of one FedSA run (its seed and k): per teacher, whether it
    is foreign, its similarities at the first selection, its probe (fedsa.py's: the
    adaptation's epochs) and its probe with HEAD_STEPS, as ``<value>/<teacher>``."""
    k, seed, rounds = record["k"], record["seed"], record["rounds"]
    run_config, config, data, (x, y) = run_setup(setting, "FedSA", k, seed, rounds)

    def test(model) -> float:
        return evaluate(model, data.x_test, data.y_test)[1]

    log = record["selection_log"]
    first = log["selections"][0]
    values: dict[str, Value] = {}
    for i, pid in enumerate(first["candidates"]):
        _, teacher = owner_teacher(run_config, config, pid)
        values |= {
            f"foreign/{pid}": int(log["teachers"][pid]["foreign"]),
            f"similarity_averaged/{pid}": first["similarity-averaged"][i],
            f"similarity_per_image/{pid}": first["similarity-per-image"][i],
            f"probe/{pid}": test(adapt(teacher, x, y, config, "head", 0)),
            f"probe_steps/{pid}": test(head_with_steps(teacher, x, y, config, HEAD_STEPS)),
        }
    return values


def in_grid_order(rows: list[dict[str, Value]]) -> list[dict[str, Value]]:
    """The rows by setting, k, method (in ``SETTINGS``' and ``METHODS``' order) and seed: the
    order of the tables, whatever order the runs finished in."""
    settings, methods = list(SETTINGS), list(METHODS)
    return sorted(
        rows,
        key=lambda r: (settings.index(r["setting"]), r["k"], methods.index(r["method"]), r["seed"]),
    )


def teacher_rows(runs: list[dict[str, Value]]) -> list[dict]:
    """One dict per teacher of every FedSA run (in the runs' order, teachers by partition):
    setting, k, seed, teacher, its ``TEACHER_VALUES`` and the run's weak model's accuracies."""
    teachers = []
    for run in runs:
        partitions = sorted(int(key.split("/")[1]) for key in run if key.startswith("probe/"))
        for pid in partitions:
            teachers.append(
                {key: run[key] for key in ("setting", "k", "seed")}
                | {"teacher": pid}
                | {key: run[f"{key}/{pid}"] for key in TEACHER_VALUES}
                | {key: run[key] for key in ("weak_all", "weak_head_steps")}
            )
    return teachers


# --- report ----------------------------------------------------------------------------------


def scaled_cell(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    """``result_tables.interval_cell`` of per-seed values times ``scale`` (fractions as points
    by default)."""
    return interval_cell([scale * v for v in values], digits)


def groups(rows: list[dict], *keys: str) -> list[tuple]:
    """The distinct values of ``keys`` in ``rows``, in order of first appearance."""
    return list(dict.fromkeys(tuple(r[key] for key in keys) for r in rows))


def report_runs(runs: list[dict[str, Value]], folder: Path) -> str:
    """``table.md``: experiments 1 and 3 (final accuracy after the adaptation of every
    parameter, paired differences, foreign share) and experiment 2 (head-only with
    HEAD_STEPS, amalgamated against weak features), from the runs' rows (``in_grid_order``)
    and where they were measured."""
    lines = []
    for setting, k in groups(runs, "setting", "k"):
        mine = [r for r in runs if r["setting"] == setting and r["k"] == k]
        labels = [m for m in METHODS if any(r["method"] == m for r in mine)]
        if not labels:
            continue
        # Scratch: the seed's weak model adapted in every parameter (the same in every run)
        scratch = {r["seed"]: r["weak_all"] for r in mine}
        table = mine + [
            {"method": "Scratch", "seed": s, "final_all": v} for s, v in scratch.items()
        ]
        seeds = ", ".join(map(str, sorted(scratch)))
        lines += table_head(
            f"Setting `{setting}`, k = {k}: final test accuracy after the adaptation of every"
            f" parameter, in % (mean ± sample std over seeds {seeds}; Scratch: the weak model),"
            " and the share of the drawn teachers that were foreign (all selections and seeds).",
            "method",
            ["final accuracy", "foreign draws / draws"],
        )
        for m in [*labels, "Scratch"]:
            values = [r["final_all"] for r in table if r["method"] == m]
            foreign = sum(r["foreign_draws"] for r in mine if r["method"] == m)
            draws = sum(r["draws"] for r in mine if r["method"] == m)
            share = f"{foreign} / {draws} ({100 * foreign / draws:.0f} %)" if draws else "–"
            lines.append(f"| {m} | {percent_cell(values)} | {share} |")
        lines += [""] + table_head(
            f"Setting `{setting}`, k = {k}: differences of the final accuracy, paired by seed,"
            " in points: mean [95 % t interval], bold where the interval excludes 0.",
            "difference",
            ["mean [95 % t interval]"],
        )
        for a, b in COMPARISONS:
            if a in labels and (b in labels or b == "Scratch"):
                cell = paired_cell(table, {"method": a}, {"method": b}, "final_all")
                lines.append(f"| {a} − {b} | {cell} |")
        lines.append("")

    lines += table_head(
        f"Head-only adaptation with {HEAD_STEPS} optimiser steps whatever k: test accuracy in %"
        " (mean ± sample std over seeds) on the run's amalgamated features and on the weak"
        " model's; their difference paired by seed (points, mean [95 % t interval], bold where"
        f" it excludes 0); the run's own head-only result (the adaptation's 30 epochs); the"
        f" change from {HEAD_STEPS} to {2 * HEAD_STEPS} steps (accuracy in points, loss on D_T:"
        " mean over seeds), small where the head had flattened.",
        "setting, method, k",
        [
            f"amalgamated, {HEAD_STEPS} steps",
            f"weak, {HEAD_STEPS} steps",
            "amalgamated − weak",
            "run's head (30 epochs)",
            "Δ accuracy amalgamated / weak",
            "D_T loss amalgamated / weak",
        ],
    )
    for setting, label, k in groups(runs, "setting", "method", "k"):
        mine = [r for r in runs if (r["setting"], r["method"], r["k"]) == (setting, label, k)]

        def col(key: str, mine=mine) -> list[float]:
            return [r[key] for r in mine]

        delta = [
            f"{100 * np.mean(np.subtract(col(f'{p}_2x'), col(p))):+.1f}"
            for p in ("head_steps", "weak_head_steps")
        ]
        loss = [
            f"{np.mean(col(p)):.3f} → {np.mean(col(f'{p}_2x')):.3f}"
            for p in ("head_loss", "weak_head_loss")
        ]
        gap = scaled_cell(list(np.subtract(col("head_steps"), col("weak_head_steps"))))
        lines.append(
            f"| {setting}, {label}, k = {k} | {percent_cell(col('head_steps'))}"
            f" | {percent_cell(col('weak_head_steps'))} | {gap}"
            f" | {percent_cell(col('final_head_run'))} | {' / '.join(delta)} | {' / '.join(loss)} |"
        )
    worst = max(r["weak_check"] for r in runs)
    lines += [
        "",
        (
            "Weak-model rebuild: largest difference of its head adaptation from the runs'"
            f" history row 0: {100 * worst:.2f} points over {len(runs)} runs."
        ),
        "",
        measured_where(folder),
    ]
    return "\n".join(lines) + "\n"


def report_teachers(runs: list[dict[str, Value]], folder: Path) -> str:
    """``teachers.md``: the premise of experiment 1 (probe accuracy of every teacher against
    the weak model's) and the Table 3 analogue (Spearman between first-selection similarity
    and probe accuracy; clean minus foreign similarity), from the teachers of the FedSA runs
    (``teacher_rows``) and where they were measured."""
    rows = teacher_rows(runs)
    lines = table_head(
        f"Premise: linear-probe test accuracy of the teachers (teacher frozen, a new head on"
        f" D_T; fedsa.py's probe with the adaptation's 30 epochs, and with {HEAD_STEPS} steps),"
        " in % (mean ± sample std over teachers and seeds), against the weak target model"
        " adapted in every parameter (Scratch) and head-only with the same steps; how many"
        " clean teachers' probes (teachers x seeds) beat Scratch, and the weak model's head.",
        "setting, k",
        [
            "clean: probe (30 epochs)",
            f"clean: probe ({HEAD_STEPS} steps)",
            f"foreign: probe ({HEAD_STEPS} steps)",
            "weak: all",
            f"weak: head ({HEAD_STEPS} steps)",
            f"clean probes ({HEAD_STEPS} steps) > Scratch",
            f"clean probes ({HEAD_STEPS} steps) > weak head",
        ],
    )
    for setting, k in groups(rows, "setting", "k"):
        mine = [r for r in rows if r["setting"] == setting and r["k"] == k]
        clean = [r for r in mine if not r["foreign"]]
        foreign = [r for r in mine if r["foreign"]]
        per_seed = {r["seed"]: r for r in mine}.values()
        beats = [
            sum(r["probe_steps"] > r[bar] for r in clean) for bar in ("weak_all", "weak_head_steps")
        ]
        lines.append(
            f"| {setting}, k = {k} | {percent_cell([r['probe'] for r in clean])}"
            f" | {percent_cell([r['probe_steps'] for r in clean])}"
            f" | {percent_cell([r['probe_steps'] for r in foreign])}"
            f" | {percent_cell([r['weak_all'] for r in per_seed])}"
            f" | {percent_cell([r['weak_head_steps'] for r in per_seed])}"
            f" | {beats[0]} / {len(clean)} | {beats[1]} / {len(clean)} |"
        )
    lines += [""] + table_head(
        "Table 3 analogue: Spearman's rank correlation over the 10 teachers between the"
        " similarity at the first selection and the probe's accuracy, per seed, then mean [95 % t"
        " interval] over seeds; clean minus foreign mean similarity, per seed, the same way"
        " (bold where the interval excludes 0).",
        "setting, k, similarity",
        [
            "Spearman, probe (30 epochs)",
            f"Spearman, probe ({HEAD_STEPS} steps)",
            "clean − foreign similarity",
        ],
    )
    for setting, k in groups(rows, "setting", "k"):
        for kind in ("averaged", "per_image"):
            spearman = {"probe": [], "probe_steps": []}
            gaps = []
            for (seed,) in groups(
                [r for r in rows if (r["setting"], r["k"]) == (setting, k)], "seed"
            ):
                mine = [r for r in rows if (r["setting"], r["k"], r["seed"]) == (setting, k, seed)]
                similarity = np.array([r[f"similarity_{kind}"] for r in mine])
                foreign = np.array([r["foreign"] for r in mine], dtype=bool)
                for probe, values in spearman.items():
                    accuracy = [r[probe] for r in mine]
                    values.append(stats.spearmanr(similarity, accuracy).statistic)
                gaps.append(similarity[~foreign].mean() - similarity[foreign].mean())
            lines.append(
                f"| {setting}, k = {k}, {kind.replace('_', '-')}"
                f" | {scaled_cell(spearman['probe'], 1.0, 2)}"
                f" | {scaled_cell(spearman['probe_steps'], 1.0, 2)}"
                f" | {scaled_cell(gaps, 1.0, 3)} |"
            )
    lines += ["", measured_where(folder)]
    return "\n".join(lines) + "\n"


def report(data: Path) -> str:
    """The table made from the rows in ``data``'s folder (and the provenance beside them)
    alone: ``teachers.md`` for their teachers (``TEACHER_ROWS``), else ``table.md``."""
    runs = in_grid_order(measured_rows(data.parent))
    make = report_teachers if data.name == TEACHER_ROWS else report_runs
    return make(runs, data.parent)


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(FedsaExplain(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
