"""Stage 2 of "Benchmarking Federated Learning & Knowledge Distillation for Point Cloud
Classification" (its Algorithm A3): a federated teacher distilled into a compact student, shared
by ``benchmarks/flkd.py`` (the offline grid, with the label-free controls) and the
reproduction of its Table 4 (``experiments.flkd_table4``).

* ``fl_teacher(overrides, clients)``: an FL run in this process (``overrides`` name its
  ``output-dir``) and the teacher it leaves: the best round's global model (``model_best.pt``,
  the highest central test accuracy, the earliest on a tie, selected on the test set as the
  paper keeps its teachers), or with ``final`` the last round's (``model.pt``: the offline
  benchmark's teacher-quality sweep);
* ``teacher_model(config, data, state)``: that teacher as its protocol builds its global model
  (MOON's with its projection head);
* ``student_config(mode, epochs)``, ``params_for(mode)``: the run config of the ``distill-*``
  keys and the objectives' parameters; their defaults are the paper's (alpha 0.5, beta 0.5,
  T 2, DKD 1 / 8, CRD 0.07 / 128; Adam 1e-3, weight decay 1e-4, batch 24);
* ``distill``: one student (the model ``student``, freshly built) distilled from the teacher on
  the whole training split (the paper's proxy, with its labels) with one objective in one mode
  (``kd.student.distill_student``: StepLR x0.7 every E/10 epochs), its best test epoch's
  accuracy as the paper reports it, and its final epoch's;
* ``students_of``: every (objective, mode) of a list, a mode that is the same computation as
  another run once (``computed_mode``).
"""

from __future__ import annotations

import json
import time
from functools import cache

import torch

from ..catalog import get_protocol, parse_run_config
from ..inprocess import resolve_run_config, run_in_process
from ..kd.objectives import KDParams, Objective, get_objective
from ..kd.student import distill_student
from ..models import build_model
from ..protocols.distill import distill_params, student_training
from ..settings import RunConfig
from .driver import Value


def fl_teacher(overrides: dict, clients: int, final: bool = False) -> tuple[dict, dict]:
    """The FL run of ``overrides`` on ``clients`` clients (in its ``output-dir``): (the teacher's
    state dict, its record), the record's accuracies as fractions: ``test_accuracy`` (the
    teacher's: its round's central test accuracy), ``final_accuracy`` (the last round's) and
    ``round`` (the teacher's). The teacher is the best round's global model, round 0 (the
    initial model) a candidate as ``model_best.pt`` selects it; with ``final`` the last
    round's."""
    run_dir = run_in_process(overrides, clients)
    history = json.loads((run_dir / "history.json").read_text())
    last = history[-1]["central_accuracy"]
    if final:
        state = torch.load(run_dir / "model.pt", weights_only=True)
        return state, {"test_accuracy": last, "final_accuracy": last, "round": history[-1]["round"]}
    state = torch.load(run_dir / "model_best.pt", weights_only=True)
    best = json.loads((run_dir / "model_best.json").read_text())
    record = {"test_accuracy": best["central_accuracy"], "final_accuracy": last}
    return state, record | {"round": best["round"]}


def teacher_model(config: RunConfig, data, state: dict) -> torch.nn.Module:
    """The global model of ``config``'s protocol for ``data`` (MOON's has a projection head),
    holding ``state``."""
    protocol = get_protocol(config.strategy)
    model = protocol.build_model(config, data.input_shape, data.num_classes)
    model.load_state_dict(state)
    return model


@cache
def student_config(mode: str, epochs: int) -> RunConfig:
    """The run config of the ``distill-*`` keys at their defaults (the paper's, module
    docstring), in ``mode`` for ``epochs`` epochs."""
    return parse_run_config(resolve_run_config({"distill-mode": mode, "distill-epochs": epochs}))


def params_for(mode: str) -> KDParams:
    """The objectives' parameters in ``mode`` (the paper's alpha, beta, T, DKD's and CRD's)."""
    return distill_params(student_config(mode, 1))


def computed_mode(objective: Objective, mode: str) -> str:
    """The mode whose run is the same computation as ``mode``'s: every mode of an objective
    with CE weight 0 and label-free terms is ``labeled``'s; ``unlabeled`` of an objective
    whose terms do not read the labels is ``no-ce``'s."""
    if objective.label_free(params_for("labeled")):
        return "labeled"
    if mode == "unlabeled" and not objective.terms_read_labels:
        return "no-ce"
    return mode


def distill(
    teacher, data, objective: Objective, mode: str, epochs: int, seed: int, student: str
) -> dict:
    """One student, the model ``student``, distilled from ``teacher`` on ``data``'s training
    split with ``objective`` in ``mode`` for ``epochs`` epochs: its CE weight, whether it is
    label-free, its best epoch's and final test accuracy (fractions), the best epoch and its
    seconds."""
    params = params_for(mode)
    started = time.perf_counter()
    result = distill_student(
        teacher,
        lambda: build_model(student, data.input_shape, data.num_classes),
        (data.x_train, data.y_train),
        (data.x_test, data.y_test),
        objective,
        params,
        student_training(student_config(mode, epochs)),
        seed,
    )
    return {
        "ce_weight": objective.ce_weight(params),
        "label_free": objective.label_free(params),
        "best": result.best["test_accuracy"],
        "best_epoch": result.best["epoch"],
        "final": result.final_accuracy,
        "seconds": time.perf_counter() - started,
    }


def students_of(teacher, data, seed: int, runs, epochs: int, student: str) -> dict[str, Value]:
    """Every (objective, mode) of ``runs`` distilled from ``teacher`` into ``student``, as
    ``<value>/<objective>/<mode>``; a mode that is the same computation as another
    (``computed_mode``) is that run's values, its own label-freedom and ``same_as`` the mode
    it repeats."""
    computed: dict[tuple[str, str], dict] = {}
    values: dict[str, Value] = {}
    for objective, mode in runs:
        spec = get_objective(objective)
        source = computed_mode(spec, mode)
        if (objective, source) not in computed:
            computed[objective, source] = distill(
                teacher, data, spec, source, epochs, seed, student
            )
        result = computed[objective, source] | {
            "label_free": spec.label_free(params_for(mode)),
            "same_as": source if source != mode else "",
        }
        values |= {f"{key}/{objective}/{mode}": value for key, value in result.items()}
    return values
