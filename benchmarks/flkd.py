"""Federated then distilled: what is a federated teacher worth to a compact student? The
offline replication of "Benchmarking Federated Learning & Knowledge Distillation
for Point Cloud Classification", with the two label-free controls the paper recommends but
never reports.

Stage 1 (through the real ServerApp/ClientApp handlers, in this process): the 13 FL
strategies on 5 ``label-sorted`` clients, 20 rounds, 5 local epochs, the paper's client
optimiser (Adam, lr 1e-3, weight decay 1e-4, batch 24; FedNova SGD with momentum 0.9 and
SCAFFOLD plain SGD, lr 1e-3) and server keys; the teacher is the best round's
global model (``model_best.pt``, selected on the test set, as the paper). A teacher-quality
sweep adds FedAvg's final global model after 0, 1, 2, 3, 5, 10 and 20 rounds (round 0 = the
random initial model, a chance-level teacher), and a centrally trained teacher (the whole
training split, the same optimiser, best epoch on the test set).

Stage 2 (``kd.student.distill_student``, the code behind the ``distill-*`` run-config keys):
every teacher distilled into ``mlp-small`` (about a quarter of ``mlp``) on the whole training
split (the paper's proxy), 10 epochs (the paper's StepLR x0.7 every E/10 epochs at E = 10;
``--epochs``), with each of the eleven objectives in each mode (``labeled``,
``no-ce``, ``unlabeled``). Modes that are the same computation are run once and reported for
each (an objective with CE weight 0 and label-free terms: all three; a "(1-a) CE + a x"
objective: ``no-ce`` = ``unlabeled``). Student accuracy = best test epoch (the paper), the final
epoch is in the CSV.

Tables (Markdown ``flkd.md``; CSVs ``runs.csv`` (one row per student run), ``grid-<data>.csv``
(mean and std per teacher, objective, mode), ``table4-<data>.csv``; under ``--out``):
standalone FL (Table 1 analogue),
standalone KD from the central teacher, the teacher x objective grid per mode (mean and
sample std over seeds), and per objective and mode (Table 4 analogue): CE weight, label-free,
student behind the chance teacher, behind the best FL teacher, range over teachers, Pearson r
between student and teacher mean accuracy over the 13 FL teachers and over all 20 FL and
sweep teachers. Plots: a heat map of the grid per mode, student vs teacher accuracy per
objective.

``table.md`` (``report``, ``--report-only``): made from ``runs.csv`` alone, the table
``docs/studies-distillation.md`` includes: per data set, objective and mode, the student
behind the chance teacher, behind the best FL or sweep teacher and r20; and the paired per-seed
differences labeled minus no-ce behind the chance, the best and the central teacher. The
teachers' own tables and the student alone come from the JSONs under ``--out``, which are not
committed: they are in ``flkd.md`` only.

The long experiment (``--long``: ``long.csv``, ``long.md``; its provenance in
``long-measured.json``): Stage 2 at 10 epochs is shorter than the replication plan suggests (30-50), so on
digits, 3 seeds, the student is distilled for 50 epochs behind three teachers (the chance
teacher, FedAvg's best round, the central teacher) with every objective in labeled mode, and in
no-ce mode behind the central teacher for the four objectives whose no-ce run is soft-target
matching alone (vanilla, logit-MSE, cosine, basic); the student alone with cross-entropy is
measured at 50 and at 10 epochs. Its teachers are the main grid's (the same cache,
``<out>/teachers``, the same seeds: the same models); ``long_report`` pairs every run by seed
with the student alone and with the same run at 10 epochs in the main grid's ``runs.csv``.

Resumable and shardable: every teacher and every student run writes one JSON (a rerun skips
what exists); ``--seeds 7`` and ``--seeds 42`` may run in two processes; a run without
``--seeds`` (or ``--report``) writes the report of everything on disk.

Usage::

    python benchmarks/flkd.py --quick                 # seed 42, digits, sweep, 5 objectives: ~2 min
    python benchmarks/flkd.py --seeds 7 --datasets digits
    python benchmarks/flkd.py --report                # tables and plots of what exists
    python benchmarks/flkd.py --report-only           # table.md from runs.csv
    python benchmarks/flkd.py --long                  # long.csv, long.md: 50 epochs, ~15-20 min
    python benchmarks/flkd.py --long --report-only    # long.md from long.csv and runs.csv
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from result_tables import (
    paired_cell,
    provenance_line,
    read_runs,
    record_provenance,
    table_head,
    write_table,
)

from flowerbed.catalog import get_protocol, parse_run_config
from flowerbed.core.results import atomic_write, save_model, write_json
from flowerbed.data.federation import load_splits
from flowerbed.experiments.flkd_stage1 import ADAM, STRATEGIES, train_central
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.kd.classic_objectives import NAMES as OBJECTIVES
from flowerbed.kd.objectives import MODES, KDParams, Objective, get_objective
from flowerbed.kd.student import cpu_latency_ms, distill_student
from flowerbed.models import build_model
from flowerbed.models.classifier import parameter_count, size_bytes
from flowerbed.protocols.distill import distill_params, student_training
from flowerbed.training.loops import evaluate

SWEEP = (0, 1, 2, 3, 5, 10, 20)
DATASETS = ("digits", "breast-cancer")
SEEDS = (7, 42, 123)
TEACHER_MODEL, STUDENT_MODEL = "mlp", "mlp-small"
NUM_CLIENTS, ROUNDS, LOCAL_EPOCHS = 5, 20, 5
QUICK_OBJECTIVES = ("vanilla", "logit-mse", "feature", "crd", "dkd")
RESULTS = Path(__file__).parent / "results" / "flkd"
# the page that includes table.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-distillation.md"


def fl_overrides(dataset: str, strategy: str, rounds: int, seed: int, out: Path) -> dict:
    return {
        "strategy": strategy,
        "dataset": dataset,
        "model": TEACHER_MODEL,
        "partitioner": "label-sorted",
        "num-server-rounds": rounds,
        "local-epochs": LOCAL_EPOCHS,
        "batch-size": 24,
        "seed": seed,
        **ADAM,
        **STRATEGIES[strategy],
        "output-dir": str(out / "fl-runs"),
        "run-name": f"{dataset}-{strategy}-r{rounds}-seed{seed}",
    }


# --- Stage 1: teachers ---------------------------------------------------------------------


def teacher_names(quick: bool) -> list[str]:
    sweep = [f"fedavg-r{r}" for r in SWEEP]
    return sweep if quick else [*STRATEGIES, *sweep, "central"]


def config_of(dataset: str, seed: int, out: Path):
    return parse_run_config(resolve_run_config(fl_overrides(dataset, "fedavg", 1, seed, out)))


def make_teacher(name: str, dataset: str, seed: int, out: Path) -> tuple[dict, dict]:
    """(state dict, record) of teacher ``name``: an FL strategy's best round, FedAvg after r
    rounds, or the central model."""
    config = config_of(dataset, seed, out)
    data = load_splits(config)
    start = time.perf_counter()
    if name == "central":
        state, record = train_central(config, data, TEACHER_MODEL)
    elif name.startswith("fedavg-r") and name != "fedavg-r0":
        rounds = int(name.removeprefix("fedavg-r"))
        run_dir = run_in_process(fl_overrides(dataset, "fedavg", rounds, seed, out), NUM_CLIENTS)
        state = torch.load(run_dir / "model.pt", weights_only=True)
        history = json.loads((run_dir / "history.json").read_text())
        record = {"test_accuracy": history[-1]["central_accuracy"], "round": rounds}
    elif name == "fedavg-r0":  # the initial global model, as start_run builds it
        torch.manual_seed(seed)
        model = build_model(TEACHER_MODEL, data.input_shape, data.num_classes)
        state = model.state_dict()
        record = {"test_accuracy": evaluate(model, data.x_test, data.y_test)[1], "round": 0}
    else:
        run_dir = run_in_process(fl_overrides(dataset, name, ROUNDS, seed, out), NUM_CLIENTS)
        state = torch.load(run_dir / "model_best.pt", weights_only=True)
        best = json.loads((run_dir / "model_best.json").read_text())
        history = json.loads((run_dir / "history.json").read_text())
        record = {
            "test_accuracy": best["central_accuracy"],  # the teacher: the best round (paper)
            "round": best["round"],
            "final_accuracy": history[-1]["central_accuracy"],
            "curve": [row["central_accuracy"] for row in history],
        }
    return state, {"teacher": name, "seconds": time.perf_counter() - start, **record}


def teacher(name: str, dataset: str, seed: int, out: Path) -> tuple[torch.nn.Module, dict]:
    """The teacher from its file, made (and saved) first when missing."""
    folder = out / "teachers" / f"{dataset}-seed{seed}"
    path, meta = folder / f"{name}.pt", folder / f"{name}.json"
    if not meta.exists():
        state, record = make_teacher(name, dataset, seed, out)
        save_model(path, state)
        write_json(meta, {"dataset": dataset, "seed": seed, **record})
        print(f"teacher {dataset} seed {seed} {name}: {record['test_accuracy']:.4f}", flush=True)
    # the protocol's own global model (MOON's has a projection head)
    strategy = name if name in STRATEGIES else "fedavg"
    config = parse_run_config(resolve_run_config(fl_overrides(dataset, strategy, 1, seed, out)))
    data = load_splits(config)
    model = get_protocol(strategy).build_model(config, data.input_shape, data.num_classes)
    model.load_state_dict(torch.load(path, weights_only=True))
    return model, json.loads(meta.read_text())


# --- Stage 2: students ---------------------------------------------------------------------


def student_alone(dataset: str, seed: int, epochs: int, out: Path, runs: str = "runs") -> dict:
    """The student trained with cross-entropy alone on the proxy, the student runs' schedule:
    what the labels give without any teacher. ``runs``: the folder under ``out`` (the long
    experiment keeps its own)."""
    path = out / runs / f"{dataset}-seed{seed}" / "alone.json"
    if not path.exists():
        config = config_of(dataset, seed, out)
        start = time.perf_counter()
        _, record = train_central(config, load_splits(config), STUDENT_MODEL, epochs)
        write_json(
            path,
            {
                "dataset": dataset,
                "seed": seed,
                "best": record["test_accuracy"],
                "best_epoch": record["round"],
                "final": record["final_accuracy"],
                "epochs": epochs,
                "seconds": time.perf_counter() - start,
            },
        )
    return json.loads(path.read_text())


@functools.cache
def student_config(mode: str, epochs: int):
    """The run config of the ``distill-*`` keys: their defaults are the paper's (alpha 0.5,
    beta 0.5, T 2, DKD 1 / 8, CRD 0.07 / 128; Adam 1e-3, weight decay 1e-4, batch 24)."""
    return parse_run_config(resolve_run_config({"distill-mode": mode, "distill-epochs": epochs}))


def params_for(mode: str) -> KDParams:
    return distill_params(student_config(mode, 1))


def computed_mode(objective: Objective, mode: str) -> str:
    """The mode whose run is the same computation as ``mode``'s (module docstring)."""
    if objective.label_free(params_for("labeled")):
        return "labeled"
    if mode == "unlabeled" and not objective.terms_read_labels:
        return "no-ce"
    return mode


def student_run(
    dataset: str,
    seed: int,
    name: str,
    objective: str,
    mode: str,
    epochs: int,
    out: Path,
    runs: str = "runs",
) -> dict:
    """One student behind teacher ``name``, from its JSON under ``out / runs`` (made first when
    missing)."""
    folder = out / runs / f"{dataset}-seed{seed}"
    path = folder / f"{name}__{objective}__{mode}.json"
    if path.exists():
        return json.loads(path.read_text())
    spec = get_objective(objective)
    source = computed_mode(spec, mode)
    if source != mode:
        record = {**student_run(dataset, seed, name, objective, source, epochs, out, runs)}
        record.update(mode=mode, same_as=source, label_free=spec.label_free(params_for(mode)))
        write_json(path, record)
        return record
    model, meta = teacher(name, dataset, seed, out)
    data = load_splits(config_of(dataset, seed, out))
    params = params_for(mode)
    start = time.perf_counter()
    result = distill_student(
        model,
        lambda: build_model(STUDENT_MODEL, data.input_shape, data.num_classes),
        (data.x_train, data.y_train),
        (data.x_test, data.y_test),
        spec,
        params,
        student_training(student_config(mode, epochs)),
        seed,
    )
    record = {
        "dataset": dataset,
        "seed": seed,
        "teacher": name,
        "teacher_accuracy": meta["test_accuracy"],
        "objective": objective,
        "mode": mode,
        "ce_weight": spec.ce_weight(params),
        "label_free": spec.label_free(params),
        "best": result.best["test_accuracy"],
        "best_epoch": result.best["epoch"],
        "final": result.final_accuracy,
        "epochs": epochs,
        "seconds": time.perf_counter() - start,
        "terms": {
            key: [row[key] for row in result.reported]
            for key in result.reported[-1]
            if key.startswith("term_")
        },
    }
    write_json(path, record)
    print(
        f"{dataset} seed {seed} {name:>12} {objective:>9} {mode:>9}: student {record['best']:.4f}"
        f" (teacher {record['teacher_accuracy']:.4f}), {record['seconds']:.1f} s",
        flush=True,
    )
    return record


# --- report --------------------------------------------------------------------------------


def mean_std(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return math.nan, math.nan
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def cell(values: list[float]) -> str:
    mean, std = mean_std(values)
    if math.isnan(mean):
        return "-"
    return f"{100 * mean:.1f}" if len(values) == 1 else f"{100 * mean:.1f} ± {100 * std:.1f}"


def signed(r: float) -> str:
    return "-" if math.isnan(r) else f"{r:+.2f}"


def spread(values: list[float]) -> str:
    mean, std = mean_std(values)
    return "-" if math.isnan(mean) else f"{mean:+.2f} ± {std:.2f}"


def pearson(x: list[float], y: list[float]) -> float:
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def load(out: Path, pattern: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob(pattern))]


def log_report(out: Path, datasets, names: list[str], objectives, epochs: int) -> list[str]:
    """``flkd.md`` and the CSVs, from the teacher and run JSONs under ``out``."""
    teachers = load(out, "teachers/*/*.json")
    runs = [x for x in load(out, "runs/*/*.json") if "objective" in x]
    alone = load(out, "runs/*/alone.json")
    lines = [
        "# Federated then distilled (benchmarks/flkd.py)",
        "",
        (
            f"Stage 1: {NUM_CLIENTS} label-sorted clients, {ROUNDS} rounds, {LOCAL_EPOCHS} local"
            f" epochs, {TEACHER_MODEL}; Stage 2: {STUDENT_MODEL}, {epochs} epochs, proxy = the"
            " whole training split. Accuracy % (best on the test set, as the paper), mean ±"
            " sample std over seeds."
        ),
    ]
    csv_rows = []
    for dataset in datasets:
        t = [r for r in teachers if r["dataset"] == dataset]
        r = [x for x in runs if x["dataset"] == dataset]
        if not t:
            continue
        seeds = sorted({x["seed"] for x in t})
        acc = {n: [x["test_accuracy"] for x in t if x["teacher"] == n] for n in names}
        lines += ["", f"## {dataset} (seeds {', '.join(map(str, seeds))})", ""]
        lines += [footprints(dataset, seeds[0], out), ""]
        lines += ["### Standalone FL (Table 1 analogue) and the teachers", ""]
        lines += ["| teacher | best round % | final % | seeds |", "|---|---|---|---|"]
        for n in sorted(names, key=lambda n: -mean_std(acc[n])[0] if acc[n] else 1):
            final = [x.get("final_accuracy", x["test_accuracy"]) for x in t if x["teacher"] == n]
            lines.append(f"| {n} | {cell(acc[n])} | {cell(final)} | {len(acc[n])} |")
        student, per_seed = {}, {}
        for x in r:
            key = (x["teacher"], x["objective"], x["mode"])
            student.setdefault(key, []).append(x["best"])
            per_seed.setdefault((x["objective"], x["mode"], x["seed"]), []).append(
                (x["teacher_accuracy"], x["best"])
            )
            csv_rows.append(x)
        alone_accuracy = [x["best"] for x in alone if x["dataset"] == dataset]
        lines += [
            "",
            (
                f"The student trained alone with cross-entropy on the proxy (no teacher, the same"
                f" schedule): {cell(alone_accuracy)} %."
            ),
        ]
        if "central" in names:
            lines += ["", "### Standalone KD from the central teacher", ""]
            lines += ["| objective | " + " | ".join(MODES) + " |", "|---|---|---|---|"]
            for o in objectives:
                cells = [cell(student.get(("central", o, m), [])) for m in MODES]
                lines.append(f"| {o} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "### Per objective and mode (Table 4 analogue)",
            "",
            (
                "chance = FedAvg after 0 rounds (the initial model); best = the FL or sweep"
                " teacher with the highest mean accuracy; range = max - min of the student over"
                " the FL and sweep teachers; r = Pearson between the student's and the teacher's"
                " mean accuracy over the 13 FL teachers (r13) and the 20 FL and sweep teachers"
                " (r20), and r20 within each seed (mean ± std over seeds)."
            ),
            "",
            (
                "| objective | mode | CE weight | label-free | chance teacher | best teacher | range |"
                " r13 | r20 | r20 per seed |"
            ),
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        graded = [n for n in names if n != "central" and acc[n]]
        fl = [n for n in graded if n in STRATEGIES]
        best_teacher = max(graded, key=lambda n: mean_std(acc[n])[0]) if graded else None
        summary = []
        for o in objectives:
            for m in MODES:
                means = {n: mean_std(student.get((n, o, m), []))[0] for n in graded}
                have = [n for n in graded if math.isfinite(means[n])]
                if not have:
                    continue
                spec, params = get_objective(o), params_for(m)
                values = [means[n] for n in have]
                row = {
                    "objective": o,
                    "mode": m,
                    "ce_weight": spec.ce_weight(params),
                    "label_free": spec.label_free(params),
                    "chance": means.get("fedavg-r0", math.nan),
                    "best": means.get(best_teacher, math.nan),
                    "range": max(values) - min(values),
                    "r13": pearson(
                        [means[n] for n in fl if n in have],
                        [mean_std(acc[n])[0] for n in fl if n in have],
                    ),
                    "r20": pearson(values, [mean_std(acc[n])[0] for n in have]),
                    "r20_per_seed": [
                        pearson([t for t, _ in pairs], [v for _, v in pairs])
                        for (o_, m_, _), pairs in sorted(per_seed.items())
                        if (o_, m_) == (o, m) and len(pairs) >= 3
                    ],
                }
                summary.append(row)
                lines.append(
                    f"| {o} | {m} | {row['ce_weight']:g} | {'yes' if row['label_free'] else 'no'}"
                    f" | {100 * row['chance']:.1f} | {100 * row['best']:.1f}"
                    f" | {100 * row['range']:.1f} | {signed(row['r13'])} | {signed(row['r20'])}"
                    f" | {spread(row['r20_per_seed'])} |"
                )
        write_csv(out / f"table4-{dataset}.csv", summary)
        for m in MODES:
            lines += ["", f"### Grid, mode {m}: student % by teacher (rows) and objective", ""]
            lines += ["| teacher (acc %) | " + " | ".join(objectives) + " |"]
            lines += ["|---" * (len(objectives) + 1) + "|"]
            for n in names:
                if not acc[n]:
                    continue
                cells = [cell(student.get((n, o, m), [])) for o in objectives]
                lines.append(
                    f"| {n} ({100 * mean_std(acc[n])[0]:.1f}) | " + " | ".join(cells) + " |"
                )
        grid_rows = [
            {
                "teacher": n,
                "teacher_accuracy": mean_std(acc[n])[0],
                "objective": o,
                "mode": m,
                "student_mean": mean_std(values)[0],
                "student_std": mean_std(values)[1],
                "seeds": len(values),
            }
            for (n, o, m), values in sorted(student.items())
        ]
        write_csv(out / f"grid-{dataset}.csv", grid_rows)
        plot_grid(out / f"grid-{dataset}.png", names, objectives, acc, student)
        plot_scatter(out / f"scatter-{dataset}.png", graded, objectives, acc, student)
    write_csv(out / "runs.csv", [{k: v for k, v in x.items() if k != "terms"} for x in csv_rows])
    return lines


def report(runs_csv: Path) -> str:
    """``table.md``, from ``runs.csv`` alone: per data set, objective and mode, the student's
    mean accuracy behind the chance teacher (``fedavg-r0``) and behind the FL or sweep teacher
    of highest mean accuracy, and r20 (Pearson between the student's and the teacher's mean
    accuracy over the FL and sweep teachers); then labeled minus no-ce, paired by seed. Given
    ``long.csv``: ``long_report``'s table."""
    if runs_csv.name == LONG_DATA.name:
        return long_report(runs_csv)
    runs = read_runs(runs_csv, ("teacher_accuracy", "best", "ce_weight"), ("seed",))
    lines = []
    for dataset in [d for d in DATASETS if any(r["dataset"] == d for r in runs)]:
        rows = [r for r in runs if r["dataset"] == dataset]
        seeds = sorted({r["seed"] for r in rows})
        teachers = list(dict.fromkeys(r["teacher"] for r in rows))
        accuracy = {
            n: np.mean(
                list({r["seed"]: r["teacher_accuracy"] for r in rows if r["teacher"] == n}.values())
            )
            for n in teachers
        }
        graded = [n for n in teachers if n != "central"]
        best_teacher = max(graded, key=lambda n: accuracy[n])
        student: dict[tuple, list[float]] = {}
        for r in rows:
            student.setdefault((r["teacher"], r["objective"], r["mode"]), []).append(r["best"])
        objectives = [o for o in OBJECTIVES if any(r["objective"] == o for r in rows)]

        def mean(teacher: str, objective: str, mode: str, student=student) -> float:
            return float(np.mean(student.get((teacher, objective, mode), [math.nan])))

        lines += table_head(
            f"{dataset}, seeds {', '.join(map(str, seeds))}: student accuracy % behind the chance"
            f" teacher (fedavg-r0, {100 * accuracy['fedavg-r0']:.1f} %) / behind the best FL or"
            f" sweep teacher ({best_teacher}, {100 * accuracy[best_teacher]:.1f} %) / r20 over"
            f" the {len(graded)} FL and sweep teachers; means over seeds (`runs.csv`).",
            "objective",
            ["CE weight (labeled)", *MODES],
        )
        for o in objectives:
            cells = []
            for m in MODES:
                means = [mean(n, o, m) for n in graded]
                r20 = pearson(means, [accuracy[n] for n in graded])
                cells.append(
                    f"{100 * mean('fedavg-r0', o, m):.1f} / {100 * mean(best_teacher, o, m):.1f}"
                    f" / {signed(r20)}"
                )
            ce = next(
                r["ce_weight"] for r in rows if r["objective"] == o and r["mode"] == "labeled"
            )
            lines.append(f"| {o} | {ce:g} | " + " | ".join(cells) + " |")
        behind = {
            "fedavg-r0": "chance teacher",
            best_teacher: "best teacher",
            "central": "central teacher",
        }
        lines += [""] + table_head(
            f"{dataset}: labeled minus no-ce, paired by seed, in points: mean [95 % t interval],"
            " bold where the interval excludes 0.",
            "objective",
            [f"behind the {what}" for what in behind.values()],
        )
        for o in objectives:
            cells = [
                paired_cell(
                    rows,
                    {"teacher": n, "objective": o, "mode": "labeled"},
                    {"teacher": n, "objective": o, "mode": "no-ce"},
                    "best",
                )
                for n in behind
            ]
            lines.append(f"| {o} | " + " | ".join(cells) + " |")
        fl = [n for n in teachers if n in STRATEGIES and n != "fedavg"]
        taught = list({(r["seed"], r["teacher"]): r for r in rows}.values())
        lines += [""] + table_head(
            f"{dataset}: FL teacher accuracy (best round) minus FedAvg's, paired by seed, in"
            " points: mean [95 % t interval], bold where the interval excludes 0.",
            "teacher",
            ["teacher %", "− fedavg"],
        )
        for n in sorted(fl, key=lambda n: -accuracy[n]):
            gap = paired_cell(taught, {"teacher": n}, {"teacher": "fedavg"}, "teacher_accuracy")
            lines.append(f"| {n} | {100 * accuracy[n]:.1f} | {gap} |")
        lines.append("")
    lines.append(provenance_line(runs_csv.parent))
    return "\n".join(lines) + "\n"


# --- the long experiment: does longer distillation change the student? ----------------------

# the teachers: chance level, FedAvg's best round, the central model
LONG_TEACHERS = ("fedavg-r0", "fedavg", "central")
LONG_OBJECTIVES = OBJECTIVES
# no-ce runs (the student following the teacher's function alone), behind these teachers
LONG_NO_CE = {"central": ("vanilla", "logit-mse", "cosine", "basic")}
LONG_EPOCHS, SHORT_EPOCHS = 50, 10  # SHORT_EPOCHS: Stage 2's, the pairing in runs.csv
LONG_DATA, LONG_TABLE = RESULTS / "long.csv", RESULTS / "long.md"
LONG_PROVENANCE = "long-measured.json"  # measured.json is the main grid's
ALONE = "alone"  # the objective column of the student trained alone with cross-entropy
# (data, table) of every published table; long.md once long.csv is measured (the docs page
# includes it then)
PUBLISHED = [(RESULTS / "runs.csv", RESULTS / "table.md"), (LONG_DATA, LONG_TABLE)]


def long_runs(dataset: str, seeds, epochs: int, objectives, out: Path) -> list[dict]:
    """The long experiment's rows (``long.csv``): per seed, the student alone at ``epochs`` and
    at ``SHORT_EPOCHS``, and every objective behind every ``LONG_TEACHERS`` teacher in labeled
    mode (and no-ce as ``LONG_NO_CE`` lists) at ``epochs``. Teachers come from (and go to) the
    main grid's cache, ``out/teachers``; the students' JSONs to ``out/long-runs``."""
    rows = []
    for seed in seeds:
        for e in dict.fromkeys((epochs, SHORT_EPOCHS)):
            alone = student_alone(dataset, seed, e, out, f"long-runs/{e}-epochs")
            rows.append({**alone, "teacher": "none", "teacher_accuracy": math.nan})
            rows[-1].update(objective=ALONE, mode="labeled")
        for name in LONG_TEACHERS:
            runs = [(o, "labeled") for o in objectives]
            runs += [(o, "no-ce") for o in LONG_NO_CE.get(name, ()) if o in objectives]
            for objective, mode in runs:
                rows.append(
                    student_run(
                        dataset,
                        seed,
                        name,
                        objective,
                        mode,
                        epochs,
                        out,
                        f"long-runs/{epochs}-epochs",
                    )
                )
    columns = ("dataset", "seed", "teacher", "teacher_accuracy", "objective", "mode", "epochs")
    columns += ("best", "best_epoch", "final", "seconds")
    return [{key: row[key] for key in columns} for row in rows]


def long_report(long_csv: Path) -> str:
    """``long.md``, from ``long.csv`` and the main grid's ``runs.csv`` beside it (its
    ``SHORT_EPOCHS`` runs of the same teacher, objective, mode and seed are the 10-epoch
    pairing): per teacher, objective and mode, the best and the final epoch's accuracy, the
    epoch of the best, and paired per-seed differences against the student alone and against
    the same run at ``SHORT_EPOCHS`` epochs."""
    numbers = (("teacher_accuracy", "best", "final"), ("seed", "epochs", "best_epoch"))
    long = read_runs(long_csv, *numbers)
    epochs = max(r["epochs"] for r in long if r["objective"] != ALONE)
    short_csv = long_csv.parent / "runs.csv"
    keys = {(r["dataset"], r["teacher"], r["objective"], r["mode"]) for r in long}
    short = []
    if short_csv.is_file():
        short = [
            r
            for r in read_runs(short_csv, *numbers)
            if r["epochs"] == SHORT_EPOCHS
            and (r["dataset"], r["teacher"], r["objective"], r["mode"]) in keys
        ]
    rows = long + short
    lines = []
    for dataset in [d for d in DATASETS if any(r["dataset"] == d for r in long)]:
        mine = [r for r in rows if r["dataset"] == dataset]
        seeds = sorted({r["seed"] for r in mine if r["epochs"] == epochs})
        teacher_accuracy = {
            (r["seed"], r["teacher"], r["epochs"] == epochs): r["teacher_accuracy"]
            for r in mine
            if r["teacher"] != "none"
        }
        differing = sorted(
            f"{teacher} seed {seed}"
            for (seed, teacher, is_long), value in teacher_accuracy.items()
            if is_long and teacher_accuracy.get((seed, teacher, False), value) != value
        )
        if not any(key[2] is False for key in teacher_accuracy):
            same = "no run is there to pair with"
        elif differing:
            same = f"the teachers differ from those of `runs.csv` for {', '.join(differing)}"
        else:
            same = "the teachers are those of `runs.csv`: the same test accuracy on every seed"
        alone = {"objective": ALONE, "epochs": epochs}
        lines += table_head(
            f"{dataset}, seeds {', '.join(map(str, seeds))}: the student (`{STUDENT_MODEL}`)"
            f" distilled for {epochs} epochs (StepLR x0.7 every {max(1, epochs // 10)}), test"
            " accuracy % (mean ± sample std over seeds): best epoch (the paper's metric), final"
            " epoch, the epoch of the best (mean, min–max); then paired per-seed differences in"
            f" points, mean [95 % t interval], bold where it excludes 0: against the student"
            f" trained alone with cross-entropy for {epochs} epochs (best and final), and"
            f" against the same run at {SHORT_EPOCHS} epochs (best; `runs.csv`, where {same}).",
            "teacher (acc %)",
            [
                "objective",
                "mode",
                "best",
                "final",
                "epoch of best",
                "− alone (best)",
                "− alone (final)",
                f"− {SHORT_EPOCHS} epochs (best)",
            ],
        )
        order = [("none", ALONE, "labeled")] + sorted(
            {(r["teacher"], r["objective"], r["mode"]) for r in mine if r["teacher"] != "none"},
            key=lambda k: (
                LONG_TEACHERS.index(k[0]) if k[0] in LONG_TEACHERS else len(LONG_TEACHERS),
                MODES.index(k[2]),
                OBJECTIVES.index(k[1]),
            ),
        )
        for teacher_name, objective, mode in order:
            labels = {"teacher": teacher_name, "objective": objective, "mode": mode}
            runs = [r for r in mine if r["epochs"] == epochs and column_match(r, labels)]
            if not runs:
                continue
            first = epochs_cell([r["best_epoch"] for r in runs])
            at_epochs = {**labels, "epochs": epochs}
            short_cell = paired_cell(mine, at_epochs, {**labels, "epochs": SHORT_EPOCHS}, "best")
            if objective == ALONE:
                name, versus_alone = f"none (student alone, {epochs} epochs)", ["–", "–"]
            else:
                accuracy = np.mean([r["teacher_accuracy"] for r in runs])
                name = f"{teacher_name} ({100 * accuracy:.1f})"
                versus_alone = [paired_cell(mine, at_epochs, alone, k) for k in ("best", "final")]
            cells = [objective, mode, cell([r["best"] for r in runs])]
            cells += [cell([r["final"] for r in runs]), first, *versus_alone, short_cell]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
            alone_short = [
                r for r in mine if r["epochs"] == SHORT_EPOCHS and r["objective"] == ALONE
            ]
            if objective == ALONE and alone_short and SHORT_EPOCHS != epochs:
                cells = [objective, mode, cell([r["best"] for r in alone_short])]
                cells += [
                    cell([r["final"] for r in alone_short]),
                    epochs_cell([r["best_epoch"] for r in alone_short]),
                ]
                lines.append(
                    f"| none (student alone, {SHORT_EPOCHS} epochs) | "
                    + " | ".join(cells + ["–"] * 3)
                    + " |"
                )
        lines.append("")
    lines.append(provenance_line(long_csv.parent, LONG_PROVENANCE))
    return "\n".join(lines) + "\n"


def column_match(row: dict, labels: dict) -> bool:
    return all(row[key] == value for key, value in labels.items())


def epochs_cell(values: list[int]) -> str:
    """``"31 (12–48)"``: mean, min–max of the epochs of the best."""
    return f"{np.mean(values):.0f} ({min(values)}–{max(values)})"


def footprints(dataset: str, seed: int, out: Path) -> str:
    """Teacher and student: parameters, bytes, CPU latency of one batch of 24 test images."""
    data = load_splits(config_of(dataset, seed, out))
    batch = data.x_test[:24]
    text = []
    for name in (TEACHER_MODEL, STUDENT_MODEL):
        model = build_model(name, data.input_shape, data.num_classes)
        count = parameter_count(model)
        text.append(
            f"`{name}` {count:,} parameters, {size_bytes(model) / 1024:.1f} KiB,"
            f" {cpu_latency_ms(model, batch):.3f} ms per batch of 24"
        )
    return "Models: " + "; ".join(text) + " (CPU, one thread)."


def write_csv(path: Path, rows: list[dict]) -> None:
    import csv

    if not rows:
        return
    columns = list(dict.fromkeys(k for row in rows for k in row))

    def write(f):
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)

    atomic_write(path, write)


def plot_grid(path: Path, names, objectives, acc, student) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [n for n in names if acc[n]]
    fig, axes = plt.subplots(1, len(MODES), figsize=(6 * len(MODES), 0.35 * len(rows) + 2))
    for ax, m in zip(axes, MODES):
        grid = np.array(
            [[100 * mean_std(student.get((n, o, m), []))[0] for o in objectives] for n in rows]
        )
        image = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(objectives)), objectives, rotation=60, ha="right")
        ax.set_yticks(range(len(rows)), [f"{n} ({100 * mean_std(acc[n])[0]:.0f})" for n in rows])
        ax.set_title(f"student accuracy %, mode {m}")
        for i in range(len(rows)):
            for j in range(len(objectives)):
                if math.isfinite(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize=6)
    fig.colorbar(image, ax=axes, shrink=0.6)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_scatter(path: Path, teachers, objectives, acc, student) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = 4
    rows = math.ceil(len(objectives) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3.6 * rows), squeeze=False)
    for ax, o in zip(axes.flat, objectives):
        for m, marker in zip(MODES, "os^"):
            points = [
                (100 * mean_std(acc[n])[0], 100 * mean_std(student.get((n, o, m), []))[0])
                for n in teachers
            ]
            points = [(x, y) for x, y in points if math.isfinite(y)]
            if points:
                ax.scatter(*zip(*points), marker=marker, label=m, alpha=0.7)
        ax.plot([0, 100], [0, 100], "k:", linewidth=0.8)
        ax.set_title(o)
        ax.set_xlabel("teacher %")
        ax.set_ylabel("student %")
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 100)
    for ax in list(axes.flat)[len(objectives) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="seed 42, digits, sweep, 5 objectives")
    parser.add_argument("--seeds", type=int, nargs="*", help="run only these seeds (a shard)")
    parser.add_argument("--datasets", nargs="*", choices=DATASETS, default=list(DATASETS))
    parser.add_argument(
        "--epochs", type=int, help=f"student epochs (default 10; --long: {LONG_EPOCHS})"
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="the long-distillation experiment: long.csv, long.md (with --report-only: long.md)",
    )
    parser.add_argument("--report", action="store_true", help="only write the report")
    parser.add_argument("--report-only", action="store_true", help="table.md from runs.csv")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/flkd"))
    args = parser.parse_args()
    if args.long and args.datasets not in (list(DATASETS), ["digits"]):
        parser.error("--long runs on digits only: leave --datasets out")
    logging.getLogger("flwr").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    out = args.out / "quick" if args.quick else args.out
    names = teacher_names(args.quick)
    objectives = QUICK_OBJECTIVES if args.quick else OBJECTIVES
    datasets = ["digits"] if args.quick else args.datasets
    epochs = 5 if args.quick else args.epochs or (LONG_EPOCHS if args.long else SHORT_EPOCHS)
    seeds = [42] if args.quick else (args.seeds or list(SEEDS))
    start = time.perf_counter()
    if args.long:
        if not args.report_only:
            objectives = QUICK_OBJECTIVES if args.quick else LONG_OBJECTIVES
            rows = long_runs("digits", seeds, epochs, objectives, out)
            write_csv(out / LONG_DATA.name, rows)
            if not args.quick:
                record_provenance(out, sys.argv, LONG_PROVENANCE)
        text = write_table(out / LONG_TABLE.name, lambda: long_report(out / LONG_DATA.name))
        print(text)
        print(f"{time.perf_counter() - start:.0f} s")
        return
    if args.report_only:
        text = write_table(out / "table.md", lambda: report(out / "runs.csv"))
        print(text)
        return
    if not args.report:
        for dataset in datasets:
            for seed in seeds:
                student_alone(dataset, seed, epochs, out)
                for name in names:
                    for objective in objectives:
                        for mode in MODES:
                            student_run(dataset, seed, name, objective, mode, epochs, out)
    lines = log_report(out, datasets, names, objectives, epochs)
    lines += ["", f"Command: `python benchmarks/flkd.py {' '.join(sys.argv[1:])}`"]
    text = "\n".join(lines) + "\n"
    atomic_write(out / "flkd.md", lambda f: f.write(text))
    write_table(out / "table.md", lambda: report(out / "runs.csv"))
    print(text)
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
