"""What a run will need of this machine, estimated from its run config before anything is built:
the memory of one process and the disk of the data cache, part by part (``Need``), for the
pre-flight (``runtime.preflight``) to compare with what the machine has.

Two numbers are estimated:

* **memory of one process** (the ServerApp, and every ClientApp process or Ray actor, each of
  which loads the same data set; the parts of both counted together): Python with torch and
  Flower loaded, the data set held in the process, the partition, one client's local split,
  the model's state, and the larger of two transient peaks: loading or generating the data
  set, and the model's activations;
* **disk of the data cache** (``cache-dir``; only what is not built yet).

Every part but the model's activations is a simple formula, written next to it below, of
sizes the run config fixes (the data sets' sample counts, shapes and what each holds are
their declarations', ``data.spec.DatasetSpec.sizing``, ``data.sizing``: no file is read, no
data set loaded). The activations come from the model itself: one sample through it on
torch's meta device (``models.footprint.activations``), the values of every leaf module's
output (what training keeps for backward, times ``batch-size``) and the most bytes alive at
once without gradients (an evaluation batch: the widest layer, or PointNet++'s ball query),
so a new model needs no edit here. That pass costs about 3 s the first time a process makes one
(its meta kernels import ``torch._dynamo``), so its two numbers are kept in the user's cache
(``$XDG_CACHE_HOME/flowerbed/footprints/<digest>.json``, by default under ``~/.cache``; not
in ``cache-dir``, which the pre-flight leaves untouched when it refuses), the digest of the
model's name, input shape and classes, torch's version and the source of ``flowerbed.models``
(a changed model or torch makes a new file); a machine's later runs of the same model on the
same input read them. Not counted: memory-mapped rows (MedMNIST, CIFAR-10, MNIST
and the ``synthetic`` sets are files that the operating system pages in and out, shared by
every process; only their disk is checked), the GPU (activations are counted against the host
only when the run trains on the CPU), a site's own data (``partitioner='site'``: the nodes'
data, on their machines), extra models of some protocols (distillation students, teachers,
translators), and how many processes a simulation runs side by side (each must fit: the limit
is per process). The numbers are estimates, not guarantees: the peaks measured here (resident
memory of a training step, an evaluation batch, a ball query, a ``synthetic`` partition) came
within 10 % of them, except training, which took 1.07 to 1.53 times the saved activations
(counted as 1.5), and PointNet++'s, which took half of an estimate that also counted its first
ball query in training (its distances are freed before the outputs of that set abstraction are
made: they now count in evaluation only).

The VQC is sized from its plan (``models.vqc.plan_vqc``, what its builder builds): its
parameters (``vqc-layers`` x ``vqc-qubits`` x 2 angles, and the classical parts), and a
training step, which grows with its gates (``vqc-layers`` x (3 ``vqc-qubits`` - 1)): PennyLane's
tape and torch's autograd graph per gate, and state vectors per gate and sample
(``models.vqc.training_bytes``, measured); the pre-flight refuses a circuit that would not
fit with the most layers that would. ``vqc-qubits`` has its own check too, when the run config is read
(``models.vqc.register_too_large``: the state vectors of one batch against half the physical
memory).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .. import models
from ..core.results import atomic_write
from ..data.federation import SITE
from ..data.options import DataOptions
from ..data.registry import DATASETS
from ..data.sizing import FLOAT, INDEX
from ..data.spec import DataSize
from ..models import MODELS, footprint
from ..models.vqc import VQCPlan, gates_per_layer, plan_vqc, training_bytes
from ..settings import RunConfig

GIB = 2**30
RUNTIME_BYTES = GIB // 2  # a Python process with torch, numpy and Flower imported (~0.5 GB)
MODEL_COPIES = 6  # weights, gradients, two optimiser moments, the global model, an algorithm state
TRAINING_PEAK = 1.5  # training's peak over the saved activations (measured: 1.07 to 1.53)
EVALUATION_BATCH = 512  # ``training.loops.predict``'s batch size (evaluation, no gradients)
# the partition in every process: pool indices, the pool mask, its labels, every client's
# indices and those mapped back to the training pool (``federation._partition_cached``)
PARTITION_BYTES_PER_ROW = 3 * INDEX + 1 + 2 * INDEX
KMEANS_COPIES = 3  # kmeans-pca: the pool's float32 features, scaled, centred by the PCA
VQC_KEYS = ("vqc-layers", "vqc-qubits", "batch-size")  # what sizes a VQC's training step


@dataclass(frozen=True)
class Need:
    """One part of an estimate: what, how many bytes, and the keys that size it."""

    what: str
    bytes: int
    keys: tuple[str, ...]


@dataclass(frozen=True)
class Estimate:
    memory: tuple[Need, ...]  # one process
    disk: tuple[Need, ...]  # cache-dir
    cache_dir: Path

    @property
    def memory_bytes(self) -> int:
        return sum(need.bytes for need in self.memory)

    @property
    def disk_bytes(self) -> int:
        return sum(need.bytes for need in self.disk)


# --- the data -------------------------------------------------------------------------------
def data_size(config: RunConfig) -> DataSize | None:
    """The run's data set's size, as its declaration sizes it (``DatasetSpec.sizing``), or
    ``None`` when only the nodes know it (a site's own data)."""
    spec = DATASETS.get(config.dataset)
    if spec is None or spec.sizing is None:
        return None
    return spec.sizing(spec, DataOptions.from_config(config))


def input_of(config: RunConfig, size: DataSize | None) -> tuple[tuple[int, ...], int] | None:
    """The model's input shape and classes, when the run config fixes them."""
    if size is not None:
        return size.shape, size.num_classes
    if config.input_shape and config.num_classes:
        return tuple(int(n) for n in str(config.input_shape).split(",")), config.num_classes
    return None


# --- the model ------------------------------------------------------------------------------
def vqc_plan(shape: tuple[int, ...], num_classes: int, config: RunConfig | None) -> VQCPlan | None:
    """The VQC the run config asks for (``models.vqc.plan_vqc``, what its builder builds), or
    ``None`` when its settings do not fit the data (``start_run`` reports that when it builds
    it)."""
    try:
        return plan_vqc(shape, num_classes, config)
    except ValueError:
        return None


def meta_model(name: str, shape: tuple[int, ...], num_classes: int) -> nn.Module | None:
    """Model ``name`` for this input built on torch's meta device (shapes only, nothing
    allocated), or ``None``: the VQC (PennyLane allocates even on the meta device: its plan
    sizes it), a model not registered, or one whose builder refuses the input."""
    if name == "vqc" or name not in MODELS:
        return None
    try:
        with torch.device("meta"):
            return MODELS[name](shape, num_classes)
    except ValueError:
        return None


def parameter_count(
    name: str, shape: tuple[int, ...], num_classes: int, config: RunConfig | None = None
) -> int | None:
    """Parameters of model ``name`` for this input, built on torch's meta device; the VQC's
    from its plan for the run ``config`` (``VQCPlan.parameter_count``). ``None`` for a model
    that does not fit the data (``start_run`` reports that when it builds it)."""
    if name == "vqc":
        plan = vqc_plan(shape, num_classes, config)
        return plan.parameter_count() if plan else None
    model = meta_model(name, shape, num_classes)
    return footprint.parameter_count(model) if model is not None else None


@functools.lru_cache(maxsize=1)
def models_source_digest() -> str:
    """SHA-256 of the source of every module of ``flowerbed.models``: a model's footprint
    cached under another digest is not this model's."""
    digest = hashlib.sha256()
    for path in sorted(Path(models.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def footprints_dir() -> Path:
    """The folder of the kept footprints (module docstring)."""
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()
    return cache_home / "flowerbed" / "footprints"


def footprint_path(folder: Path, name: str, shape: tuple[int, ...], num_classes: int) -> Path:
    """Where the footprint of model ``name`` on this input is kept in ``folder``."""
    key = json.dumps([name, list(shape), num_classes, torch.__version__, models_source_digest()])
    return Path(folder) / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


@functools.lru_cache(maxsize=32)
def model_activations(
    name: str, shape: tuple[int, ...], num_classes: int, folder: Path | None = None
) -> footprint.Activations | None:
    """One sample's activations of model ``name`` (``models.footprint.activations``, a pass on
    the meta device: seconds, so kept for the next check of this process and, with ``folder``
    (``footprints_dir``), in ``footprint_path`` for the next process), or ``None`` where there is no
    such pass: the VQC (its plan sizes its training step), a model that does not fit the data,
    and one whose forward pass cannot run on the meta device (its activations are then not
    counted). A cache file that cannot be read is made again; one that cannot be written is
    not kept."""
    path = footprint_path(folder, name, shape, num_classes) if folder else None
    if path is not None:
        try:
            return footprint.Activations(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            pass  # not kept yet, or unreadable: made again below
    model = meta_model(name, shape, num_classes)
    if model is None:
        return None
    try:
        sample = footprint.activations(model, shape)
    except (RuntimeError, NotImplementedError):
        return None
    if path is not None:
        try:
            atomic_write(path, lambda f: json.dump(sample.__dict__, f))
        except OSError:
            pass  # a read-only cache: the next process makes the pass again
    return sample


def trains_on_cpu(config: RunConfig) -> bool:
    return config.device == "cpu" or (config.device == "auto" and not torch.cuda.is_available())


# --- the estimate ---------------------------------------------------------------------------
def estimate(config: RunConfig, num_clients: int | None = None) -> Estimate:
    """The run's memory per process and cache disk (module docstring); the parts that need the
    number of clients (a client's split, ``dirichlet-sized``'s partition) only when given."""
    table = data_size(config)
    size = table if config.partitioner != SITE else None  # site: the nodes' own data
    memory = [Need("Python, torch and Flower", RUNTIME_BYTES, ())]
    disk = []
    transient = []
    if size is not None:
        row_values = math.prod(size.shape)
        row_bytes = row_values * (1 if size.mapped else FLOAT)
        held = (size.train + size.test) * (
            (0 if size.mapped else row_values * FLOAT) + INDEX * (1 + size.nodes)
        )
        memory.append(Need(f"the data set ({config.dataset})", held, ("dataset", *size.keys)))
        if size.load_bytes:
            transient.append(
                Need(f"loading {config.dataset}", size.load_bytes, ("dataset", *size.keys))
            )
        if not size.cached and size.cache_bytes:
            disk.append(
                Need(
                    f"the data cache of {config.dataset}", size.cache_bytes, ("dataset", *size.keys)
                )
            )
        partition = size.train * PARTITION_BYTES_PER_ROW
        keys = ("dataset", *size.keys)
        if config.partitioner == "kmeans-pca":
            partition += KMEANS_COPIES * size.values * FLOAT
            keys += ("partitioner",)
        share = None
        if config.partitioner == "dirichlet-sized":
            keys += ("samples-per-client",)
            share = config.samples_per_client
            if num_clients is not None:
                partition += 2 * INDEX * num_clients * config.samples_per_client
        elif num_clients is not None:
            share = math.ceil(size.train / num_clients)
        memory.append(Need("the partition", partition, keys))
        if share is not None and not size.mapped:  # mapped rows: a view, no copy
            memory.append(
                Need(
                    f"a client's split ({share:,} samples)",
                    share * (row_bytes + INDEX),
                    ("samples-per-client",) if config.partitioner == "dirichlet-sized" else (),
                )
            )
    model_input = input_of(config, table)
    if model_input is not None:
        shape, classes = model_input
        sizing = table.keys if table is not None else ("input-shape",)
        plan = vqc_plan(shape, classes, config) if config.model == "vqc" else None
        parameters = parameter_count(config.model, shape, classes, config)
        if parameters:
            memory.append(
                Need(
                    f"the model's state ({config.model}, {parameters:,} parameters)",
                    parameters * FLOAT * MODEL_COPIES,
                    ("model", *(VQC_KEYS[:2] if plan else ())),
                )
            )
        if plan is not None:
            gates = plan.layers * gates_per_layer(plan.qubits)
            transient.append(
                Need(
                    f"a training step of the VQC ({plan.layers:,} layers, {gates:,} gates on"
                    f" {plan.qubits} qubits, batch-size {config.batch_size})",
                    training_bytes(
                        plan.qubits, plan.layers, config.batch_size, trains_on_cpu(config)
                    ),
                    VQC_KEYS,
                )
            )
        sample = model_activations(config.model, tuple(shape), classes, footprints_dir())
        if sample is not None and trains_on_cpu(config):
            transient.append(
                Need(
                    f"training activations ({config.model}, batch-size {config.batch_size})",
                    int(TRAINING_PEAK * sample.kept * config.batch_size * FLOAT),
                    ("model", "batch-size", *sizing),
                )
            )
            transient.append(
                Need(
                    f"evaluation batches of {EVALUATION_BATCH} ({config.model})",
                    sample.peak_bytes * EVALUATION_BATCH,
                    ("model", *sizing),
                )
            )
    if transient:
        memory.append(max(transient, key=lambda need: need.bytes))
    return Estimate(tuple(memory), tuple(disk), Path(DataOptions.from_config(config).cache_dir))
