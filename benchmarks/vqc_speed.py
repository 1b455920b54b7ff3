"""Training throughput of the VQC (samples per second): one broadcast simulation per mini-batch
vs a loop over samples vs lightning.qubit with the adjoint method.

Each run is full training steps (forward, cross-entropy, backward, Adam step) of one variant on
random inputs of 2^n features, after one warm-up step, repeated until the budget's seconds:

* ``batched``: ``default.qubit`` + backprop, the whole (B, 2^n) batch in one call (PennyLane
  parameter broadcasting) - what flowerbed trains with;
* ``per-sample``: the same device and method, one circuit call per sample, outputs stacked,
  one backward;
* ``lightning``: ``lightning.qubit`` + adjoint, the whole batch in one call (PennyLane expands
  it into one tape per sample).

A study of the study driver (``flowerbed.experiments.study_cli``): the points are (qubits,
variant), the seeds are repeats, and the variants alternate within each repeat (``alternate``:
batched, per-sample, lightning, then the next repeat), one at a time, so that load from other
work falls on all of them alike. The table gives each variant's median samples per second over
the repeats, and batched's ratio to each other variant paired by repeat: the median and its
spread (``stats.paired_ratio``). Budgets: ``full`` (the default: 6 and 10 qubits, 4 layers,
batch 32, 5 s a run, 5 repeats: about 4 minutes) and ``quick`` (4 qubits, 2 layers, batch 8,
0.2 s a run, 2 repeats: seconds, a check that the measuring path works, not a measurement).

    python benchmarks/vqc_speed.py                 # rows.jsonl and table.md in results/vqc_speed
    python benchmarks/vqc_speed.py --quick         # into results/vqc_speed/quick
    python benchmarks/vqc_speed.py --report-only   # table.md from rows.jsonl

Writes ``rows.jsonl`` (one row per run), ``measured.jsonl`` (one line per invocation that
measured, said under the table) and ``table.md``. Nothing is committed yet: the table has not
been measured with the driver on a quiet machine.
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from pathlib import Path

import torch
from result_tables import joined, ratio_cell, unrecorded_provenance_line, write_table

from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import Point, Value, budget_of
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.experiments.stats import paired_ratio
from flowerbed.models.vqc import build_vqc

RESULTS = Path(__file__).parent / "results" / "vqc_speed"
VARIANTS = {  # name: (device, whether each sample is its own circuit call)
    "batched": ("default.qubit", False),
    "per-sample": ("default.qubit", True),
    "lightning": ("lightning.qubit", False),
}
BUDGETS = {
    "full": {"qubits": (6, 10), "layers": 4, "batch": 32, "min_seconds": 5.0, "repeats": 5},
    "quick": {"qubits": (4,), "layers": 2, "batch": 8, "min_seconds": 0.2, "repeats": 2},
}
CLASSES = 10


class VqcSpeed:
    """The study (module docstring): one run per (qubits, variant, repeat)."""

    name = "vqc_speed"
    budgets = BUDGETS
    default_budget = "full"
    alternate = True

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        fixed = {key: chosen[key] for key in ("layers", "batch", "min_seconds")}
        points = [
            Point(f"{n}-{variant}", {"qubits": n, "variant": variant, **fixed})
            for n in chosen["qubits"]
            for variant in VARIANTS
        ]
        return points, list(range(chosen["repeats"]))

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        settings = point.settings
        device, per_sample = VARIANTS[settings["variant"]]
        n, batch = settings["qubits"], settings["batch"]
        torch.manual_seed(seed)
        model = build_vqc((2**n,), CLASSES, qubits=n, layers=settings["layers"], device=device)
        x, y = torch.randn(batch, 2**n), torch.randint(0, CLASSES, (batch,))
        forward = per_sample_forward if per_sample else (lambda m, inputs: m(inputs))
        steps, seconds = timed_steps(model, forward, x, y, settings["min_seconds"])
        return {
            "qubits": n,
            "variant": settings["variant"],
            "layers": settings["layers"],
            "batch": batch,
            "threads": torch.get_num_threads(),
            "steps": steps,
            "samples_per_second": steps * batch / seconds,
        }

    def report(self, rows: list[dict[str, Value]]) -> dict:
        return {"table.md": partial(table, rows)}


def per_sample_forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.cat([model(x[i : i + 1]) for i in range(len(x))])


def timed_steps(model, forward, x, y, min_seconds: float) -> tuple[int, float]:
    """Training steps after one warm-up, until ``min_seconds``: how many, in how many seconds."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(forward(model, x), y).backward()
        optimizer.step()

    step()  # warm-up
    steps, start = 0, time.perf_counter()
    while True:
        step()
        steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return steps, elapsed


def caption(rows: list[dict[str, Value]], repeats: str) -> str:
    return (
        f"VQC training throughput, {joined(rows, 'layers')} layers, batch"
        f" {joined(rows, 'batch')}, {joined(rows, 'threads')} torch threads (samples/s; higher is"
        f" better): the median of {repeats} repeats, the variants in turn within each repeat;"
        " batched's ratio to each other variant paired by repeat: median (lowest – highest)."
    )


def table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``table.md`` from the rows: per qubit count, each variant's median samples per second
    and batched's paired ratios to the others; then where the rows were measured."""
    speed: dict[tuple[int, str], dict[int, float]] = {}
    for r in rows:
        speed.setdefault((r["qubits"], r["variant"]), {})[r["seed"]] = r["samples_per_second"]
    repeats = "/".join(map(str, dict.fromkeys(len(by_seed) for by_seed in speed.values())))
    lines = [
        caption(rows, repeats),
        "",
        (
            "| qubits | batched (default.qubit, backprop) | per-sample loop | lightning.qubit"
            " adjoint | batched / per-sample | batched / lightning |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for n in sorted({qubits for qubits, _ in speed}):
        by = {variant: speed.get((n, variant), {}) for variant in VARIANTS}
        cells = [f"{statistics.median(s.values()):.1f}" if s else "–" for s in by.values()]
        cells += [
            ratio_cell(paired_ratio(by["batched"], by[v]), 1) for v in VARIANTS if v != "batched"
        ]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    provenance = " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder)
    return "\n".join(lines + ["", provenance]) + "\n"


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(VqcSpeed(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
