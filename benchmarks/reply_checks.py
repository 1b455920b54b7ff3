"""What the server's reply checks cost per reply, beside what the reply costs to produce.

For three models (``mlp`` and ``cnn`` on digits' 8x8 inputs, ``resnet18`` on CIFAR-10's 32x32x3),
one FL training reply (the model the server sent plus a small update) is checked with the FL
rounds' rules (``trust.reply_checks.check_reply``: decoding, keys, shapes and dtypes,
finiteness, the update's norm in float32, metric types, num-examples), and clipped
(``clip_update``, run-config ``max-update-norm``). Each is timed a budget's repeats (median,
one thread); beside them, the median time of one local training step of that model on one
batch of 32 samples, the least work a client does per round.

A study of the study driver (``flowerbed.experiments.study_cli``): the points are the models,
one run each (seed 0), run in turn and one at a time (``alternate``); budgets ``full`` (20
repeats, the default) and ``quick`` (3 repeats, a few seconds: a check that the measuring path
works, into ``results/reply_checks/quick``).

    python benchmarks/reply_checks.py                  # measures what rows.jsonl lacks
    python benchmarks/reply_checks.py --quick          # 3 repeats, into reply_checks/quick
    python benchmarks/reply_checks.py --report-only    # table.md from rows.jsonl

Writes into ``benchmarks/results/reply_checks``: ``rows.jsonl`` (one row per model: its size,
the repeats and the three median times in seconds: the committed record), ``measured.jsonl``
(one line per invocation that measured) and ``table.md``, which ``report`` makes from
``rows.jsonl`` and the provenance beside it alone and ``docs/robustness.md`` includes
(``tests/test_published_tables.py`` checks both). The committed rows were measured on
2026-11-27 by the script before it became a study (``measured.json``, its provenance, kept):
to measure anew, remove ``rows.jsonl`` and ``measured.json``.
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from result_tables import unrecorded_provenance_line, write_table

from flowerbed.core.clipping import clip_update
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.models import build_model
from flowerbed.trust.reply_checks import (
    TRAIN,
    NodeSizes,
    ReplyRules,
    check_reply,
    model_like_sent,
)

MODELS = {"mlp": ((1, 8, 8), 10), "cnn": ((1, 8, 8), 10), "resnet18": ((3, 32, 32), 10)}
RESULTS = Path(__file__).parent / "results" / "reply_checks"
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "robustness.md"  # includes table.md
BUDGETS = {"full": 20, "quick": 3}  # repeats


class ReplyChecks:
    """The study (module docstring): one run per model, the row ``measure`` makes."""

    name = "reply_checks"
    budgets = BUDGETS
    default_budget = "full"
    alternate = True

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        repeats = budget_of(BUDGETS, budget)
        return [Point(model, {"repeats": repeats}) for model in MODELS], [0]

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        torch.set_num_threads(1)
        return measure(point.name, point.settings["repeats"])

    def report(self, rows: list[dict[str, Value]]) -> dict:
        return {TABLE.name: partial(table, rows)}


def median_seconds(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, repeats: int) -> dict:
    shape, classes = MODELS[name]
    torch.manual_seed(0)
    model = build_model(name, shape, classes)
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    rng = np.random.default_rng(0)
    trained = {
        k: (v + rng.normal(0, 1e-3, v.shape).astype(v.dtype) if v.dtype.kind == "f" else v)
        for k, v in state.items()
    }
    sent = RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in state.items()})})
    metrics = MetricRecord({"num-examples": 100, "train-loss": 0.5, "partition-id": 0})

    def reply():
        arrays = ArrayRecord({k: Array(v) for k, v in trained.items()})
        return RecordDict({"arrays": arrays, "metrics": metrics})

    rules = ReplyRules(arrays=model_like_sent, list_metrics=frozenset(), examples=TRAIN)
    sizes = NodeSizes(train=100, test=20)
    made = [reply() for _ in range(repeats)]
    check = median_seconds(lambda: check_reply(made.pop(), sent, rules, sizes, 0), repeats)
    made = [reply() for _ in range(repeats)]
    clip = median_seconds(lambda: clip_update(made.pop(), sent, 1e-6), repeats)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, *shape), torch.randint(0, classes, (32,))

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    train_step = median_seconds(step, repeats)
    megabytes = sum(v.nbytes for v in state.values()) / 1e6
    return {"mb": megabytes, "repeats": repeats, "check": check, "clip": clip, "step": train_step}


def report(data: Path) -> str:
    """``table.md``, from ``rows.jsonl`` (and the provenance beside it) alone."""
    return table(measured_rows(data.parent), data.parent)


def table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``table.md`` from the rows, in ``MODELS``' order, and where they were measured."""
    rows = sorted(
        (r for r in rows if r["point"] in MODELS), key=lambda r: list(MODELS).index(r["point"])
    )
    repeats = "/".join(map(str, dict.fromkeys(r["repeats"] for r in rows)))
    caption = (
        f"Median of {repeats} repeats, one thread. `check`: the FL rounds' checks of one training"
        " reply; `clip`: max-update-norm's clipping of it; `step`: one local SGD step on a batch"
        " of 32 (a client runs many per round)."
    )
    lines = [
        caption,
        "",
        "| model | MB per reply | check (ms) | clip (ms) | one training step (ms) | check / step |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['point']} | {r['mb']:.2f} | {1e3 * r['check']:.2f} | {1e3 * r['clip']:.2f} |"
            f" {1e3 * r['step']:.2f} | {r['check'] / r['step']:.2f} |"
        )
    provenance = " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder)
    lines += ["", provenance]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(ReplyChecks(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
