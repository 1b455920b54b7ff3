"""A compact student distilled from a fixed teacher: Stage 2 of the federated-then-distill
pipeline ("Benchmarking Federated Learning & Knowledge Distillation for Point Cloud
Classification", Algorithm A3).

``distill_student`` trains a freshly built student on a proxy set with one registered
objective (``kd.objectives``, ``kd.classic_objectives``) in one mode, with the benchmark's
optimiser: Adam (lr 1e-3, weight decay 1e-4 by default) over the student and the objective's
adapters, batch 24, StepLR with gamma 0.7 every E/10 epochs (the paper's "x0.7 every 20 of 200
epochs", scaled to E as its authors' notes recommend). The teacher's logits and features on the
proxy are computed once, in eval mode. After every epoch the student is evaluated on the test
set: one row per epoch with every weighted loss term's mean. Self-distillation (``self``) runs
two generations: the first learns from the teacher, the second, freshly initialised, from the
first; the second is the result. "Best" is the epoch with the highest test accuracy (selected
on the test set, as the paper does); "final" is the last epoch's.

Progress: every epoch is logged as one line (loss terms, test accuracy, seconds per epoch and
the time the remaining epochs would take at that pace), and ``on_epoch(row, rows)`` lets the
caller keep the rows so far (``protocols.distill`` rewrites ``distill_history.json`` and feeds
the trackers, so an interrupted distillation leaves its epochs behind).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from logging import INFO

import torch
from flwr.common.logger import log
from torch import Tensor, nn

from ..core.device import device_of, to_device_of
from ..core.progress import pace
from ..core.seeding import seed_for
from ..models import Classifier
from ..models.classifier import feature_width
from ..training.loops import evaluate
from .loop import WithAdapters, distill
from .objectives import KDParams, Objective

_STUDENT_TAG = 0x5714


@dataclass(frozen=True)
class StudentTraining:
    """How a student is trained: epochs, batch, Adam's learning rate and weight decay (the
    run-config ``distill-*`` keys, ``protocols.distill.student_training``)."""

    epochs: int
    batch_size: int
    learning_rate: float
    weight_decay: float


@dataclass
class StudentResult:
    student: Classifier  # the final generation at its last epoch
    rows: list[dict] = field(default_factory=list)  # generation, epoch, test accuracy, terms

    @property
    def reported(self) -> list[dict]:
        """The rows of the reported (last) generation."""
        last = self.rows[-1]["generation"]
        return [row for row in self.rows if row["generation"] == last]

    @property
    def final_accuracy(self) -> float:
        return self.reported[-1]["test_accuracy"]

    @property
    def best(self) -> dict:
        """The reported generation's best epoch (the earliest on a tie)."""
        return max(self.reported, key=lambda row: (row["test_accuracy"], -row["epoch"]))


@torch.no_grad()
def outputs_of(model: nn.Module, x: Tensor, batch_size: int = 512) -> dict[str, Tensor]:
    """``model.taps(x)`` (logits and features) in eval mode, in chunks, on the host."""
    model.eval()
    chunks = [
        {
            name: value.cpu()
            for name, value in model.taps(to_device_of(model, x[i : i + batch_size])).items()
        }
        for i in range(0, len(x), batch_size)
    ]
    return {name: torch.cat([chunk[name] for chunk in chunks]) for name in ("logits", "features")}


def distill_student(
    teacher: Classifier,
    build_student: Callable[[], Classifier],
    proxy: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor],
    objective: Objective,
    params: KDParams,
    training: StudentTraining,
    seed: int,
    on_epoch: Callable[[dict, list[dict]], None] | None = None,
) -> StudentResult:
    """Train ``objective.generations`` students in turn (module docstring); ``on_epoch(row,
    rows)`` runs after every epoch's row is added."""
    x, y = proxy
    result = StudentResult(student=teacher)
    total = objective.generations * training.epochs
    started = time.perf_counter()
    for generation in range(1, objective.generations + 1):
        source = result.student  # the teacher, then the previous generation
        source_outputs = outputs_of(source, x)
        torch.manual_seed(seed_for(seed, generation, _STUDENT_TAG))
        student = build_student()
        shape = tuple(x.shape[1:])
        widths = feature_width(student, shape), feature_width(source, shape)
        adapters = objective.adapters(*widths, params) if objective.adapters else {}
        module = WithAdapters(student, adapters).to(device_of(student)) if adapters else student
        optimizer = torch.optim.Adam(
            module.parameters(), lr=training.learning_rate, weight_decay=training.weight_decay
        )
        scheduler = torch.optim.lr_scheduler.StepLR(
            optimizer, step_size=max(1, training.epochs // 10), gamma=0.7
        )
        generator = torch.Generator().manual_seed(seed_for(seed, generation, _STUDENT_TAG, 1))
        for epoch in range(1, training.epochs + 1):
            step = distill(
                module,
                x,
                y,
                None,
                objective,
                params,
                epochs=1,
                batch_size=training.batch_size,
                optimizer=optimizer,
                generator=generator,
                teacher_taps=source_outputs,
            )
            scheduler.step()
            loss, accuracy = evaluate(student, *test)
            row = {
                "generation": generation,
                "epoch": epoch,
                "test_accuracy": accuracy,
                "test_loss": loss,
                "train_loss": step.mean_loss,
                **{f"term_{name}": value for name, value in step.terms.items()},
            }
            result.rows.append(row)
            done = len(result.rows)
            per_epoch = (time.perf_counter() - started) / done
            log(
                INFO,
                "%s",
                epoch_line(row, objective.generations, training.epochs, per_epoch, total - done),
            )
            if on_epoch is not None:
                on_epoch(row, result.rows)
        result.student = student
    return result


def epoch_line(row: dict, generations: int, epochs: int, per_epoch: float, left: int) -> str:
    """One epoch's progress line: loss terms, test accuracy and loss, pace and time left."""
    where = f"generation {row['generation']}/{generations}, " if generations > 1 else ""
    terms = ", ".join(f"{key[5:]} {value:.4f}" for key, value in row.items() if key[:5] == "term_")
    return (
        f"flowerbed distill {where}epoch {row['epoch']}/{epochs}: train loss"
        f" {row['train_loss']:.4f} ({terms}) | test acc {row['test_accuracy']:.4f}"
        f" loss {row['test_loss']:.4f} | {pace(per_epoch, left, 'epoch')}"
    )


@torch.no_grad()
def cpu_latency_ms(model: nn.Module, batch: Tensor, warmup: int = 10, runs: int = 100) -> float:
    """Mean milliseconds of one forward pass of ``batch`` in eval mode, after ``warmup``
    passes (the benchmark's latency, on this machine's CPU, whatever the run's device)."""
    model.eval()
    if device_of(model).type != "cpu":
        model = copy.deepcopy(model).cpu()
    batch = batch.cpu()
    for _ in range(warmup):
        model(batch)
    start = time.perf_counter()
    for _ in range(runs):
        model(batch)
    return (time.perf_counter() - start) / runs * 1000
