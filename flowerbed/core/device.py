"""Where models and batches live: the ``device`` run-config key.

``device='auto'`` (the default) picks CUDA when torch sees a GPU and the CPU otherwise, in
every process by itself: the ServerApp and each ClientApp (a Ray actor in simulation, a
SuperNode's ``flwr-clientapp`` in deployment). ``cpu``, ``cuda`` and ``cuda:<index>`` ask for
one explicitly; a CUDA device that this machine does not have is refused when the run config
is checked, before any training.

What runs there: every model built for the run (``models.build_model`` with the run config
moves it), so local training, local and central evaluation, distillation, and the VQC
(PennyLane's ``default.qubit`` follows its torch inputs onto the GPU). Data stays where it was
loaded (host memory, possibly memory-mapped) and each mini-batch is moved on use
(``to_device_of``); results that leave a step (arrays for Flower's records, predictions kept
as data) come back to the host. Flower's records are numpy: ``ArrayRecord(state_dict)``
copies GPU tensors to the host itself.

Runs on a GPU repeat: when a process first picks CUDA, cuDNN is set to its deterministic
algorithms (no autotuning) and cuBLAS to a fixed workspace, so that the same run config and
seed give the same numbers on the same GPU and software (``deterministic_cuda``). A GPU run
and a CPU run of the same job agree to float tolerance, not bit for bit.

In a simulation on one GPU, several Ray actors share it when ``client-resources-num-gpus`` is
a fraction (0.25: four clients at a time); see docs/gpus.md.
"""

from __future__ import annotations

import functools
import os

import torch
from torch import Tensor, nn

from ..settings import ConfigError, RunConfig, Setting

AUTO = "auto"


def _device_problem(value: str, config: RunConfig | None = None) -> str | None:
    """Why ``value`` is not a usable device on this machine, or None."""
    if value in (AUTO, "cpu"):
        return None
    if value != "cuda" and not (value.startswith("cuda:") and value[5:].isdigit()):
        return f"device={value!r} is not a device; valid choices: auto, cpu, cuda, cuda:<index>"
    if not torch.cuda.is_available():
        return (
            f"device={value!r} asks for a GPU but torch sees none on this machine"
            f" (torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'});"
            " use device='auto' (GPU when there is one) or device='cpu'"
        )
    count = torch.cuda.device_count()
    index = int(value[5:]) if value.startswith("cuda:") else 0
    if index >= count:
        return (
            f"device={value!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
        )
    return None


SETTINGS = (
    Setting(
        "device",
        AUTO,
        "where models train and evaluate: `auto` (CUDA when torch sees a GPU, else CPU, decided"
        " in every process), `cpu`, `cuda`, `cuda:<index>`; see [GPUs](docs/gpus.md)",
        check=_device_problem,
    ),
)


def check_client_gpus(num_gpus: float) -> None:
    """``ConfigError`` unless this machine has the GPUs that one client asks Ray for
    (``client-resources-num-gpus``; a fraction shares one). With more than there are, Ray
    could place no client and Flower stops with "ActorPool is empty"."""
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if num_gpus < 0 or num_gpus > available:
        raise ConfigError(
            f"client-resources-num-gpus={num_gpus}: this machine has {available} GPU(s); use a"
            f" value from 0 to {available} (a fraction such as 0.25 lets clients share a GPU)"
        )


def resolve_device(value: str = AUTO) -> torch.device:
    """The torch device for a ``device`` value (``auto`` decided on this machine)."""
    problem = _device_problem(value)
    if problem is not None:
        raise ValueError(problem)
    device = torch.device(
        value if value != AUTO else "cuda" if torch.cuda.is_available() else "cpu"
    )
    if device.type == "cuda":
        deterministic_cuda()
    return device


@functools.cache
def deterministic_cuda() -> None:
    """Repeatable GPU arithmetic for this process (once, before its first CUDA work):
    cuDNN's deterministic algorithms without autotuning, cuBLAS's fixed workspace
    (``CUBLAS_WORKSPACE_CONFIG``, read when its first handle is made) and torch's
    deterministic implementations where it has them (a warning where it has none)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)


def run_device(config: RunConfig) -> torch.device:
    """The device of this process for the run ``config``."""
    return resolve_device(config.device)


def device_of(module: nn.Module) -> torch.device:
    """The device a module's parameters (or buffers) live on; the CPU for an empty module."""
    for tensor in module.parameters():
        return tensor.device
    for tensor in module.buffers():
        return tensor.device
    return torch.device("cpu")


def to_device_of(module: nn.Module, *tensors: Tensor | None):
    """``tensors`` moved to ``module``'s device (no copy when already there); None stays None.
    One tensor in, one out; several in, a tuple out."""
    device = device_of(module)
    moved = tuple(None if t is None else t.to(device) for t in tensors)
    return moved[0] if len(moved) == 1 else moved
