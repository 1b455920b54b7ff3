"""The distillation phase: the federated model, as a fixed teacher, distilled into a compact
student on the server (Stage 2 of "Benchmarking Federated Learning & Knowledge Distillation
for Point Cloud Classification", Algorithm A3).

Appended to any multi-round strategy with ``distill-objective`` set (FedAvg, SCAFFOLD, ...,
after its FL rounds): server only, no message is sent. The teacher is the final global model
(``distill-teacher='final'``) or the best round's (``'best'``: ``model_best.pt``, selected on
the test set, as the paper does); the student is ``distill-student`` (default: the run's model's
``-small`` variant, about a quarter of its size); the proxy is the whole training split
(``distill-proxy='train'``, the paper's choice, which reuses the very labels the federation
protects) or the server's own split (``'server'``: ``server-fraction`` of the training pool,
removed from the clients' pool before partitioning). ``kd.student.distill_student`` trains it
with the objective in ``distill-mode`` (``labeled``, ``no-ce``, ``unlabeled``: the paper's
two label-free controls).

Writes ``student.pt`` (the final student), ``distill_history.json``/``.csv`` (per epoch: the
student's test accuracy and every weighted loss term; rewritten after every epoch, so that an
interrupted distillation leaves the epochs it finished) and ``distill.json`` (objective, mode,
whether it is label-free, CE weight, teacher and student accuracy, size and CPU latency). Every
epoch is logged (``kd.student.epoch_line``) and sent to the run's trackers as ``distill_<name>``
at step (generation - 1) x epochs + epoch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from logging import INFO
from typing import Any

import torch
from flwr.common.logger import log

from ..core.results import save_model, write_csv, write_json
from ..data.federation import server_split
from ..kd.classic_objectives import NAMES as OBJECTIVE_NAMES
from ..kd.objectives import MODES, KDParams, get_objective
from ..kd.student import StudentTraining, cpu_latency_ms, distill_student
from ..models import MODELS, Classifier, build_model
from ..models.classifier import parameter_count, size_bytes
from ..runtime.context import ModelBuilder, RunContext
from ..settings import ConfigError, RunConfig, Setting
from ..training.loops import evaluate
from .phase import Handoff, Phase

OFF = "none"


def _weights_check(value: float, config: RunConfig) -> str | None:
    objective = config["distill-objective"]
    if objective != OFF and get_objective(objective).ce_weight(distill_params(config)) < 0:
        return (
            f"distill-alpha + distill-beta must be at most 1 for distill-objective={objective!r}"
            f" (the cross-entropy weight is 1 - alpha - beta), got"
            f" {config['distill-alpha']} + {value}"
        )
    return None


SETTINGS = (
    Setting(
        "distill-objective",
        OFF,
        "multi-round strategies: after the rounds, distil the global model into a compact"
        " student with this objective, see [Federated then distilled](docs/distillation.md);"
        " `none` = off",
        choices=(OFF, *OBJECTIVE_NAMES),
    ),
    Setting(
        "distill-mode",
        "labeled",
        "`labeled` (the objective as published), `no-ce` (its hard-label term removed) or"
        " `unlabeled` (the proxy's labels withheld)",
        choices=MODES,
    ),
    Setting(
        "distill-teacher",
        "final",
        "`final` global model or the `best` round's (selected on the test set)",
        choices=("final", "best"),
    ),
    Setting(
        "distill-proxy",
        "train",
        "the student's training data: the whole `train` split (the paper's) or the `server`'s"
        " split (`server-fraction`)",
        choices=("train", "server"),
    ),
    Setting(
        "distill-student",
        "",
        "the student's model (default: the run's `model` with `-small`)",
        choices=lambda: ("", *MODELS),
    ),
    Setting("distill-epochs", 40, "student training epochs", low=1),
    Setting("distill-batch-size", 24, "student mini-batch size", low=1),
    Setting("distill-learning-rate", 1e-3, "student Adam learning rate", low=0, low_open=True),
    Setting("distill-weight-decay", 1e-4, "student Adam weight decay", low=0),
    Setting("distill-alpha", 0.5, "soft-target weight a", low=0, high=1),
    Setting("distill-beta", 0.5, "representation weight b", low=0, high=1, check=_weights_check),
    Setting("distill-temperature", 2.0, "softmax temperature T", low=0, low_open=True),
    Setting("distill-dkd-alpha", 1.0, "DKD: target-class weight", low=0),
    Setting("distill-dkd-beta", 8.0, "DKD: non-target-class weight", low=0),
    Setting("distill-crd-temperature", 0.07, "CRD: temperature", low=0, low_open=True),
    Setting("distill-crd-dim", 128, "CRD: head width", low=1),
)


def check_distilled_strategy(config: RunConfig, strategies: Mapping[str, Any]) -> None:
    """``distill-objective`` distils the global model of FL rounds: refuse a protocol that
    has none (``strategies``: the FL strategies' specs by name)."""
    if config.distill_objective != OFF and config.strategy not in strategies:
        raise ConfigError(
            f"distill-objective={config.distill_objective!r} distils the global model of a"
            f" multi-round strategy; strategy={config.strategy!r} is not one (valid choices:"
            f" {', '.join(strategies)})"
        )


def tracked(values: dict) -> dict:
    """An epoch's values under the trackers' names: ``distill_test_accuracy``, ..."""
    return {f"distill_{key}": value for key, value in values.items()}


def distill_params(config: RunConfig) -> KDParams:
    return KDParams(
        alpha=config["distill-alpha"],
        temperature=config["distill-temperature"],
        beta=config["distill-beta"],
        dkd_alpha=config["distill-dkd-alpha"],
        dkd_beta=config["distill-dkd-beta"],
        crd_temperature=config["distill-crd-temperature"],
        crd_dim=config["distill-crd-dim"],
        mode=config["distill-mode"],
    )


def student_training(config: RunConfig) -> StudentTraining:
    return StudentTraining(
        config.distill_epochs,
        config.distill_batch_size,
        config.distill_learning_rate,
        config.distill_weight_decay,
    )


def student_model_name(config: RunConfig) -> str:
    """``distill-student``, or the run's model's ``-small`` variant."""
    if config.distill_student:
        return config.distill_student
    small = f"{config.model}-small"
    if small not in MODELS:
        raise ConfigError(
            f"model={config.model!r} has no smaller variant; set distill-student (valid"
            f" choices: {', '.join(MODELS)})"
        )
    return small


class Distill(Phase):
    """Server only: the handoff's global model distilled into a student (module docstring).

    ``build_model`` makes the protocol's global model (the teacher's architecture).
    """

    SERVER_DATA = "its distillation proxy (distill-proxy, server-fraction) and test set"

    def __init__(self, build_model: ModelBuilder) -> None:
        self.build_model = build_model

    def check(self, run: RunContext) -> None:
        config, data = run.config, run.data
        student = self.student(config, data.input_shape, data.num_classes)
        teacher_size, student_size = parameter_count(run.model), parameter_count(student)
        if student_size > teacher_size:
            raise ConfigError(
                f"distill-student={student_model_name(config)!r} has {student_size} parameters,"
                f" more than the teacher (model={config.model!r}, {teacher_size}); choose a"
                " smaller student"
            )
        if config.distill_proxy == "server" and config.server_fraction == 0:
            raise ConfigError(
                "distill-proxy='server' needs the server's split: set server-fraction (the share"
                " of the training pool the server holds, e.g. 0.2); it is 0"
            )

    def student(self, config: RunConfig, input_shape, num_classes: int) -> Classifier:
        name = student_model_name(config)
        try:
            return build_model(name, input_shape, num_classes, config)
        except ValueError as error:  # a student that does not fit the data
            raise ConfigError(f"distill-student={name!r}: {error}") from error

    def run(self, run: RunContext, handoff: Handoff) -> None:
        config, data = run.config, run.data
        teacher = self.build_model(config, data.input_shape, data.num_classes)
        teacher_round = config.num_server_rounds
        if config.distill_teacher == "best":
            teacher.load_state_dict(torch.load(run.run_dir / "model_best.pt", weights_only=True))
            teacher_round = json.loads((run.run_dir / "model_best.json").read_text())["round"]
        else:
            teacher.load_state_dict(handoff.arrays.to_torch_state_dict())
        if config.distill_proxy == "server":
            proxy = server_split(config)
        else:
            proxy = (data.x_train, data.y_train)
        test = (data.x_test, data.y_test)
        objective, params = get_objective(config.distill_objective), distill_params(config)
        log(
            INFO,
            "flowerbed: distilling the %s global model (round %d) into %s with %s (%s) on %d"
            " proxy samples",
            config.distill_teacher,
            teacher_round,
            student_model_name(config),
            objective.name,
            params.mode,
            len(proxy[0]),
        )
        epochs = config.distill_epochs

        def on_epoch(row: dict, rows: list[dict]) -> None:
            # the epochs so far on disk (an interrupted distillation leaves them) and live
            write_json(run.run_dir / "distill_history.json", rows)
            write_csv(run.run_dir / "distill_history.csv", rows, list(row))
            step = (row["generation"] - 1) * epochs + row["epoch"]
            values = {k: v for k, v in row.items() if k not in ("generation", "epoch")}
            run.history.trackers.log({"round": step, **tracked(values)})

        result = distill_student(
            teacher,
            lambda: self.student(config, data.input_shape, data.num_classes),
            proxy,
            test,
            objective,
            params,
            student_training(config),
            config.seed,
            on_epoch,
        )
        save_model(run.run_dir / "student.pt", result.student.state_dict())
        batch = data.x_test[: config.distill_batch_size]
        summary = {
            "objective": objective.name,
            "mode": params.mode,
            "label_free": objective.label_free(params),
            "ce_weight": objective.ce_weight(params),
            "generations": objective.generations,
            "proxy": {"split": config.distill_proxy, "samples": len(proxy[0])},
            "teacher": {
                "model": config.model,
                "source": config.distill_teacher,
                "round": teacher_round,
                **self.footprint(teacher, test, batch),
            },
            "student": {
                "model": student_model_name(config),
                "final_test_accuracy": result.final_accuracy,
                "best_test_accuracy": result.best["test_accuracy"],
                "best_epoch": result.best["epoch"],
                **self.footprint(result.student, test, batch),
            },
        }
        write_json(run.run_dir / "distill.json", summary)
        log(
            INFO,
            "flowerbed: student %s: test accuracy %.4f (best %.4f at epoch %d); teacher %.4f;"
            " %.1f %% of the teacher's size; label-free: %s",
            summary["student"]["model"],
            result.final_accuracy,
            result.best["test_accuracy"],
            result.best["epoch"],
            summary["teacher"]["test_accuracy"],
            100 * summary["student"]["size_bytes"] / summary["teacher"]["size_bytes"],
            summary["label_free"],
        )

    @staticmethod
    def footprint(model: Classifier, test, batch: torch.Tensor) -> dict:
        return {
            "test_accuracy": evaluate(model, *test)[1],
            "parameters": parameter_count(model),
            "size_bytes": size_bytes(model),
            "cpu_latency_ms": cpu_latency_ms(model, batch),
        }
