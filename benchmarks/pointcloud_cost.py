"""What a point-cloud run costs on this machine: seconds per training batch (forward, backward,
Adam step) and per evaluation batch of the paper's models, and what that makes a FedAvg round
and a distillation epoch on ModelNet40 (9,843 training shapes, 1,024 points, batch 24; 5 clients
and 5 local epochs as the FL + KD benchmark: a round trains every shape 5 times).

A study of the study driver (``flowerbed.experiments.study_cli``): the points are the models,
the seeds are repeats, and the models alternate within each repeat (``alternate``), one at a
time, on one torch thread and random clouds of the paper's size. A run times one training batch
and one evaluation batch, each after a warm-up one; the table gives the median over repeats and
each model's training batch over ``pointnet``'s paired by repeat (the median ratio, lowest –
highest). A distillation epoch = one training batch of the student + one evaluation batch of the
teacher per batch (the teacher's outputs are computed once per run in flowerbed, so this is an
upper bound for the first epoch only). Budgets: ``full`` (the default: 1,024 points, 5 repeats,
about 6 minutes of one core) and ``quick`` (32 points, 2 repeats: well under a minute, a check
that the measuring path works, not a measurement).

    python benchmarks/pointcloud_cost.py                 # into results/pointcloud_cost
    python benchmarks/pointcloud_cost.py --quick         # into results/pointcloud_cost/quick
    python benchmarks/pointcloud_cost.py --report-only   # table.md from rows.jsonl

Writes ``rows.jsonl`` (one row per run), ``measured.jsonl`` (one line per invocation that
measured, said under the table) and ``table.md``. Nothing is committed yet: the numbers
``docs/data.md`` quotes were printed by the script before it became a study.
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from pathlib import Path

import torch
from result_tables import ratio_cell, unrecorded_provenance_line, write_table

from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import Point, Value, budget_of
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.experiments.stats import paired_ratio
from flowerbed.models import build_model

RESULTS = Path(__file__).parent / "results" / "pointcloud_cost"
MODELS = ("pointnet", "pointnet2-small", "pointnet2")
BASE = "pointnet"  # the ratios' denominator
TRAIN_SHAPES, BATCH, CLASSES, LOCAL_EPOCHS = 9843, 24, 40, 5
BUDGETS = {"full": {"points": 1024, "repeats": 5}, "quick": {"points": 32, "repeats": 2}}


class PointcloudCost:
    """The study (module docstring): one run per (model, repeat)."""

    name = "pointcloud_cost"
    budgets = BUDGETS
    default_budget = "full"
    alternate = True

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        points = [Point(model, {"points": chosen["points"]}) for model in MODELS]
        return points, list(range(chosen["repeats"]))

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        n = point.settings["points"]
        x = torch.rand(BATCH, n, 3) * 2 - 1
        y = torch.randint(0, CLASSES, (BATCH,))
        model = build_model(point.name, (n, 3), CLASSES)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

        def train_step():
            model.train()
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()

        def eval_step():
            model.eval()
            with torch.no_grad():
                model(x)

        return {"points": n, "train": after_warm_up(train_step), "eval": after_warm_up(eval_step)}

    def report(self, rows: list[dict[str, Value]]) -> dict:
        return {"table.md": partial(table, rows)}


def after_warm_up(step) -> float:
    """Seconds of one ``step`` after a first one."""
    step()
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``table.md`` from the rows: per model the median seconds per batch over the repeats, the
    paired ratio to ``pointnet``'s training batch and a FedAvg round's hours; the distillation
    epoch's hours; then where the rows were measured."""
    train: dict[str, dict[int, float]] = {model: {} for model in MODELS}
    evaluate: dict[str, dict[int, float]] = {model: {} for model in MODELS}
    for r in rows:
        train[r["point"]][r["seed"]], evaluate[r["point"]][r["seed"]] = r["train"], r["eval"]
    points = "/".join(map(str, dict.fromkeys(r["points"] for r in rows)))
    repeats = "/".join(map(str, dict.fromkeys(len(by_seed) for by_seed in train.values())))
    batches = -(-TRAIN_SHAPES // BATCH)
    measured = [model for model in MODELS if train[model]]
    seconds = {m: statistics.median(train[m].values()) for m in measured}
    eval_seconds = {m: statistics.median(evaluate[m].values()) for m in measured}
    lines = [
        (
            f"{points} points, batch {BATCH}, {CLASSES} classes, one CPU thread; median of"
            f" {repeats} repeats, the models in turn within each repeat."
        ),
        "",
        (
            f"| model | s / train batch | s / eval batch | train batch / `{BASE}`'s, paired by"
            " repeat | FedAvg round on ModelNet40 (h) |"
        ),
        "|---|---|---|---|---|",
    ]
    for model in measured:
        ratio = "1" if model == BASE else ratio_cell(paired_ratio(train[model], train[BASE]), 1)
        round_hours = seconds[model] * batches * LOCAL_EPOCHS / 3600
        lines.append(
            f"| `{model}` | {seconds[model]:.2f} | {eval_seconds[model]:.2f} | {ratio}"
            f" | {round_hours:.1f} |"
        )
    if {"pointnet2-small", "pointnet2"} <= set(measured):
        kd = (seconds["pointnet2-small"] + eval_seconds["pointnet2"]) * batches / 3600
        lines += ["", KD.format(kd)]
    provenance = " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder)
    return "\n".join(lines + ["", provenance]) + "\n"


KD = (
    "Distillation epoch on ModelNet40, `pointnet2` teacher into `pointnet2-small`: {:.1f} h"
    " (student training + teacher inference per batch)."
)


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(PointcloudCost(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
