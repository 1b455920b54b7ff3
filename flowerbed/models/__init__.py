"""Model registry: run-config name -> builder(input_shape, num_classes) -> Classifier."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ..core.device import run_device
from ..settings import Setting
from .classifier import Classifier
from .cnn import build_cnn, build_cnn_bn, build_cnn_small
from .mlp import build_logistic_regression, build_mlp, build_mlp_small
from .pointnet import build_pointnet, build_pointnet2, build_pointnet2_small
from .resnet import build_resnet18
from .vqc import SETTINGS as VQC_SETTINGS
from .vqc import build_vqc

MODELS: dict[str, Callable[..., Classifier]] = {
    "mlp": build_mlp,
    "cnn": build_cnn,
    "mlp-small": build_mlp_small,  # distillation students, about a quarter of mlp / cnn
    "cnn-small": build_cnn_small,
    "cnn-bn": build_cnn_bn,  # cnn with batch norm (server-optimiser diagnostic)
    "resnet18": build_resnet18,
    "vqc": build_vqc,  # PennyLane variational quantum classifier
    "pointnet": build_pointnet,  # point clouds (N, 3)
    "pointnet2": build_pointnet2,  # PointNet++ SSG: the FL + KD benchmark's teacher
    "pointnet2-small": build_pointnet2_small,  # its compact student
    "logreg": build_logistic_regression,  # multinomial logistic regression (FedProx synthetic)
}

SETTINGS = (
    Setting(
        "model",
        "cnn",
        "`mlp` (tabular or flattened), `cnn` (8x8 to 32x32 images), `mlp-small`, `cnn-small`"
        " (about a quarter of `mlp` / `cnn`: distillation students), `cnn-bn` (`cnn` with batch"
        " norm: see `server-optimizer-buffers`), `resnet18` (torchvision,"
        " small-image stem), `vqc` (PennyLane variational quantum classifier, see"
        " [Quantum FL](docs/quantum-fl.md)), `pointnet`, `pointnet2` (PointNet++ SSG),"
        " `pointnet2-small` (its compact student; point clouds `(N, 3)`: `shapes`,"
        " `modelnet40`, `modelnet10`), `logreg` (multinomial logistic regression: the FedProx"
        " paper's model on `synthetic`)",
        choices=lambda: tuple(MODELS),  # read when checked: models registered later count
    ),
    *VQC_SETTINGS,
)


def build_model(
    name: str, input_shape: tuple[int, ...], num_classes: int, config=None
) -> Classifier:
    """``MODELS[name](input_shape, num_classes)``; builders that take a ``config`` argument
    (the VQC: qubits, layers, readout, simulator) also receive the run config, when given.

    With a run ``config`` the model is built on the CPU (the same initial weights on every
    machine) and moved to the run's ``device``; without one it stays on the CPU."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid choices: {', '.join(MODELS)}")
    builder = MODELS[name]
    if config is None:
        return builder(tuple(input_shape), num_classes)
    if "config" in inspect.signature(builder).parameters:
        model = builder(tuple(input_shape), num_classes, config=config)
    else:
        model = builder(tuple(input_shape), num_classes)
    return model.to(run_device(config))


def run_model(config, input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    """The run's ``model`` (run-config key) for the data: the default global model."""
    return build_model(config.model, input_shape, num_classes, config=config)


__all__ = ["MODELS", "SETTINGS", "Classifier", "build_model", "run_model"]
