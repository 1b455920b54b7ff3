"""What the server's reply checks cost per reply, beside what the reply costs to produce.

For three models (``mlp`` and ``cnn`` on digits' 8x8 inputs, ``resnet18`` on CIFAR-10's 32x32x3),
one FL training reply (the model the server sent plus a small update) is checked with the FL
rounds' rules (``trust.reply_checks.check_reply``: decoding, keys, shapes and dtypes,
finiteness, the update's norm in float32, metric types, num-examples), and clipped
(``clip_update``, run-config ``max-update-norm``). Each is timed ``--repeats`` times (median,
one thread); beside them, the median time of one local training step of that model on one
batch of 32 samples, the least work a client does per round.

    python benchmarks/reply_checks.py [--repeats 20]   # measures: runs.csv, measured.json, table.md
    python benchmarks/reply_checks.py --report-only    # table.md from runs.csv

Writes into ``benchmarks/results/reply_checks``: ``runs.csv`` (one row per model: its size, the
repeats and the three median times in seconds: the committed record), ``measured.json``
(``result_tables.record_provenance``) and ``table.md``, which ``report`` makes from ``runs.csv``
alone and ``docs/robustness.md`` includes (``tests/test_published_tables.py`` checks both).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from result_tables import provenance_line, read_runs, record_provenance, write_table

from flowerbed.core.clipping import clip_update
from flowerbed.core.results import write_csv
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
DATA = RESULTS / "runs.csv"
TABLE = RESULTS / "table.md"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "robustness.md"  # includes table.md
FIELDS = ("model", "mb", "repeats", "check", "clip", "step")


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
    return {
        "model": name,
        "mb": megabytes,
        "repeats": repeats,
        "check": check,
        "clip": clip,
        "step": train_step,
    }


def report(data: Path) -> str:
    """``table.md``, from ``runs.csv`` (and ``measured.json`` beside it) alone."""
    rows = read_runs(data, ("mb", "check", "clip", "step"), ("repeats",))
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
            f"| {r['model']} | {r['mb']:.2f} | {1e3 * r['check']:.2f} | {1e3 * r['clip']:.2f} |"
            f" {1e3 * r['step']:.2f} | {r['check'] / r['step']:.2f} |"
        )
    lines += ["", provenance_line(data.parent)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--report-only", action="store_true", help="table.md from runs.csv")
    args = parser.parse_args()
    if not args.report_only:
        torch.set_num_threads(1)
        args.out.mkdir(parents=True, exist_ok=True)
        write_csv(args.out / DATA.name, [measure(name, args.repeats) for name in MODELS], FIELDS)
        record_provenance(args.out, sys.argv)
    text = write_table(args.out / TABLE.name, lambda: report(args.out / DATA.name))
    print(text)
    print(f"written: {args.out / DATA.name}, {args.out / TABLE.name}")


if __name__ == "__main__":
    main()
