"""What a point-cloud run costs on this machine: seconds per training batch (forward, backward,
Adam step) and per evaluation batch of the paper's models, and what that makes a FedAvg round
and a distillation epoch on ModelNet40 (9,843 training shapes, 1,024 points, batch 24; 5 clients
and 5 local epochs as the FL + KD benchmark: a round trains every shape 5 times).

Measured side by side in one process (one torch thread, random clouds of the paper's size):
the median of ``--repeats`` timed batches after one warm-up. A distillation epoch = one training
batch of the student + one evaluation batch of the teacher per batch (the teacher's outputs are
computed once per run in flowerbed, so this is an upper bound for the first epoch only).

Usage::

    python benchmarks/pointcloud_cost.py             # 1,024 points, 3 repeats
    python benchmarks/pointcloud_cost.py --quick     # 256 points, 2 repeats
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from flowerbed.core.results import atomic_write
from flowerbed.models import build_model

MODELS = ("pointnet", "pointnet2-small", "pointnet2")
TRAIN_SHAPES, BATCH, CLASSES, LOCAL_EPOCHS = 9843, 24, 40, 5


def seconds(step, repeats: int) -> float:
    step()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/pointcloud_cost"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    points, repeats = (256, 2) if args.quick else (1024, args.repeats)
    x = torch.rand(BATCH, points, 3) * 2 - 1
    y = torch.randint(0, CLASSES, (BATCH,))
    train, evaluate = {}, {}
    for name in MODELS:
        torch.manual_seed(0)
        model = build_model(name, (points, 3), CLASSES)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

        def train_step(model=model, optimizer=optimizer):
            model.train()
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()

        def eval_step(model=model):
            model.eval()
            with torch.no_grad():
                model(x)

        train[name], evaluate[name] = seconds(train_step, repeats), seconds(eval_step, repeats)
    batches = -(-TRAIN_SHAPES // BATCH)
    lines = [
        f"{points} points, batch {BATCH}, {CLASSES} classes, one CPU thread; median of {repeats}.",
        "",
        "| model | s / train batch | s / eval batch | FedAvg round on ModelNet40 (h) |",
        "|---|---|---|---|",
    ]
    for name in MODELS:
        round_hours = train[name] * batches * LOCAL_EPOCHS / 3600
        lines.append(f"| `{name}` | {train[name]:.2f} | {evaluate[name]:.2f} | {round_hours:.1f} |")
    kd = (train["pointnet2-small"] + evaluate["pointnet2"]) * batches / 3600
    lines += [
        "",
        (
            f"Distillation epoch on ModelNet40, `pointnet2` teacher into `pointnet2-small`: {kd:.1f} h"
            " (student training + teacher inference per batch)."
        ),
    ]
    text = "\n".join(lines) + "\n"
    out = args.out / "quick" if args.quick else args.out
    atomic_write(out / "pointcloud_cost.md", lambda f: f.write(text))
    print(text)


if __name__ == "__main__":
    main()
