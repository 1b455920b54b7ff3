"""Variational quantum classifier (VQC) of the QFedFisher paper (Bhatia & Kais, 2025, Fig. 2).

Circuit, simulated by PennyLane behind ``qml.qnn.TorchLayer`` (so it is a ``torch.nn.Module``
whose weights Flower ships like any other state-dict entry)::

    |0..0>  --AmplitudeEmbedding(x, pad_with=0, normalize=True)-->  |psi(x)> = x / ||x||
            --L x [ RY(w[l, q, 0]) RX(w[l, q, 1]) on every qubit q; CNOT(0,1) CNOT(1,2) ...
                    CNOT(n-2, n-1) ]-->
            <Z_q> for every qubit q

A d-dimensional input is padded with zeros to 2^n amplitudes, n = ceil(log2 d) by default
(digits: 64 features -> 6 qubits; breast-cancer: 30 -> 32, 5 qubits; MNIST 784 -> 1024,
10 qubits). Inputs larger than the register need a reduction: ``reduction='linear'`` puts a
classical ``Linear(d, 2^n)`` pre-layer in front of the embedding (a hybrid model, trained and
aggregated with the circuit).

Model split (every flowerbed model is ``head(features(x))``):

* ``features`` = (optional classical pre-layer) + the quantum circuit; it outputs the n Pauli-Z
  expectation values, a flat vector of width n in [-1, 1];
* ``head`` = ``VQCReadout``, the readout that turns expectations into class logits:
  - ``per-class``: logit_c = s * <Z_c> for classes c < n (needs num_classes <= n; the paper's
    MNIST setting, 10 qubits for 10 classes);
  - ``last-qubit``: binary tasks, logits = s * (<Z_{n-1}>, -<Z_{n-1}>) (the paper's ADNI
    setting: "a final measurement is taken from the last qubit");
  - ``linear``: a classical ``Linear(n, num_classes)`` on all expectations (when there are more
    classes than qubits, e.g. digits with 6 qubits);
  - ``auto`` (default): ``last-qubit`` for 2 classes, ``per-class`` when classes <= n, else
    ``linear``.
  The scale s (expectations lie in [-1, 1], too flat for a softmax) is a trainable parameter
  initialised at ``vqc-scale`` unless ``vqc-scale-trainable=false``, where it stays fixed.

Simulation: with ``default.qubit`` and ``diff_method='backprop'`` a whole mini-batch is ONE
broadcast simulation (PennyLane parameter broadcasting; no loop over samples). ``lightning.qubit``
uses the adjoint method, which PennyLane runs per sample. ``benchmarks/vqc_speed.py`` measures
both; ``vqc-device`` picks one (default ``default.qubit``, the faster by far). With backprop the
circuit returns ``qml.probs`` and the n expectations are <Z_q> = sum_i p_i (1 - 2 bit_q(i)), one
matrix product (2-3x faster at 10 qubits than n separate ``qml.expval``); with the adjoint
method (expectation values only) it returns ``qml.expval(qml.PauliZ(q))``.

Initialisation (``vqc-init``) of the (L, n, 2) rotation angles: ``kaiming-uniform`` (default;
the paper's "Kaiming initialization" as torch's ``kaiming_uniform_`` reads it for this shape:
fan_in = 2n, angles ~ U(-sqrt(3/n), sqrt(3/n))), ``kaiming-normal`` (N(0, 1/n)), or
``uniform-2pi`` (U(0, 2 pi), PennyLane's ``TorchLayer`` default: angles anywhere on the circle,
the regime of barren plateaus in deep circuits).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..settings import ConfigError, Setting
from .classifier import Classifier

DEVICES = {"default.qubit": "backprop", "lightning.qubit": "adjoint"}
READOUTS = ("auto", "per-class", "last-qubit", "linear")
REDUCTIONS = ("none", "linear")
INITS = {
    "kaiming-uniform": nn.init.kaiming_uniform_,
    "kaiming-normal": nn.init.kaiming_normal_,
    "uniform-2pi": lambda weights: nn.init.uniform_(weights, 0.0, 2 * math.pi),
}

AMPLITUDE_BYTES = 16  # one complex128 amplitude of the simulated state vector
# Memory of one training step (forward + backward of one batch, default.qubit with backprop),
# measured as the growth of peak RSS (`resource.getrusage`) over a warmed-up process, PennyLane
# 0.45.1, torch CPU: it grows with the number of gates, G = layers x gates_per_layer(n), in two
# parts. (1) Per gate, whatever the batch: PennyLane's tape and torch's autograd graph, 15.5 KB
# (4 qubits, batch 1: 1.3 / 16.6 / 51.9 / 170.8 MB for 10 / 100 / 300 / 1,000 layers), 16.5 to
# 17 KB at 6 and 8 qubits; counted as GATE_BYTES (the most). (2) Per gate and sample, copies
# of the state vector (2^n amplitudes): torch saves 0.35 per gate for the backward pass
# (`saved_tensors_hooks`, 4 to 13 qubits), and the peak, with the backward's temporaries and
# the allocator's fragmentation, came to 0.33 to 1.16 per gate (50 layers, batch 32 / 128:
# 6 qubits 33.4 / 142.5 MB, 8 qubits 143.1 / 494.5 MB, 10 qubits 273 / 1,744.6 MB), and to
# 1.08 and 1.14 for the largest batches' states (20 layers: 10 qubits, batch 256: 2,619 MB;
# 12 qubits, batch 64: 3,340 MB); counted as STATES_PER_GATE. Evaluation (no gradients) keeps
# no states: 1.5 KB per gate (1,000 layers, 4 qubits, batch 512: 16.3 MB), under training's.
GATE_BYTES = 17_000
STATES_PER_GATE = 1.2


def memory_limit() -> int:
    """Bytes a simulation may take: half of this machine's physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


def register_too_large(num_qubits: int, batch_size: int) -> str | None:
    """Why a register cannot be simulated here, or ``None``: one broadcast simulation holds a
    state vector of 2^n amplitudes per sample of the batch."""
    need = 2**num_qubits * AMPLITUDE_BYTES * batch_size
    if need <= memory_limit():
        return None
    most = max(n for n in range(1, 64) if 2**n * AMPLITUDE_BYTES * batch_size <= memory_limit())
    return (
        f"vqc-qubits={num_qubits} needs {need / 2**30:.3g} GiB for the state vectors of one"
        f" batch (2^{num_qubits} amplitudes x {AMPLITUDE_BYTES} B x batch-size {batch_size}),"
        f" more than the {memory_limit() / 2**30:.3g} GiB this machine can give; use at most"
        f" {most} qubits or a smaller batch-size"
    )


SETTINGS = (
    Setting(
        "vqc-qubits",
        0,
        "VQC: qubits n; `0` = from the data, ceil(log2(features)) (digits 6, breast-cancer 5,"
        " MNIST 10); refused when one batch's state vectors would not fit in half the memory",
        low=0,
        check=lambda n, config: register_too_large(n, config["batch-size"]) if n else None,
    ),
    Setting("vqc-layers", 4, "VQC: circuit layers L (RY, RX on every qubit + CNOT chain)", low=1),
    Setting(
        "vqc-readout",
        "auto",
        "VQC: `per-class` (s·<Z_c>, classes <= qubits), `last-qubit` (binary), `linear`"
        " (Linear(n, classes) on all <Z_q>), `auto` (binary -> last-qubit, classes <= n ->"
        " per-class, else linear)",
        choices=READOUTS,
    ),
    Setting(
        "vqc-device",
        "default.qubit",
        "VQC simulator: `default.qubit` (backprop, one broadcast simulation per batch) or"
        " `lightning.qubit` (adjoint)",
        choices=tuple(DEVICES),
    ),
    Setting(
        "vqc-scale", 5.0, "VQC: factor s from expectations to logits (initial value when trainable)"
    ),
    Setting("vqc-scale-trainable", True, "VQC: train s (else it stays fixed)"),
    Setting(
        "vqc-init",
        "kaiming-uniform",
        "VQC: initial rotation angles: `kaiming-uniform` (the paper's Kaiming initialisation,"
        " U(-sqrt(3/n), sqrt(3/n))), `kaiming-normal` (N(0, 1/n)), `uniform-2pi` (U(0, 2 pi))",
        choices=tuple(INITS),
    ),
    Setting(
        "vqc-reduction",
        "none",
        "VQC: `linear` puts a classical Linear(features, 2^n) pre-layer before the circuit"
        " (hybrid model, for inputs larger than the register)",
        choices=REDUCTIONS,
    ),
)
_SETTING = {setting.key: setting for setting in SETTINGS}
# run-config key -> builder argument
_ARGUMENTS = {
    "vqc-qubits": "qubits",
    "vqc-layers": "layers",
    "vqc-readout": "readout",
    "vqc-device": "device",
    "vqc-scale": "scale",
    "vqc-scale-trainable": "scale_trainable",
    "vqc-reduction": "reduction",
    "vqc-init": "init",
}


def circuit(inputs: Tensor, weights: Tensor, num_qubits: int, measure: str = "expval"):
    """Amplitude encoding, L x (RY, RX on every qubit + CNOT chain), then the measurement:
    ``expval``: [<Z_q> for every qubit q]; ``probs``: the 2^n basis-state probabilities.

    ``inputs`` may be a batch (B, 2^n or fewer): PennyLane broadcasts the whole batch.
    """
    import pennylane as qml

    wires = range(num_qubits)
    qml.AmplitudeEmbedding(inputs, wires=wires, pad_with=0.0, normalize=True)
    for layer in range(weights.shape[0]):
        for q in wires:
            qml.RY(weights[layer, q, 0], wires=q)
            qml.RX(weights[layer, q, 1], wires=q)
        for q in range(num_qubits - 1):
            qml.CNOT(wires=[q, q + 1])
    if measure == "probs":
        return qml.probs(wires=wires)
    return [qml.expval(qml.PauliZ(q)) for q in wires]


def gates_per_layer(num_qubits: int) -> int:
    """Gates of one layer of ``circuit``: RY and RX on every qubit, then the CNOT chain."""
    return 2 * num_qubits + num_qubits - 1


def circuit_weight_shapes(num_qubits: int, num_layers: int) -> dict[str, tuple[int, ...]]:
    """The circuit's trainable tensors (``TorchLayer``'s ``weight_shapes``): one RY and one RX
    angle per qubit and layer."""
    return {"weights": (num_layers, num_qubits, 2)}


def training_bytes(num_qubits: int, num_layers: int, batch_size: int, states: bool = True) -> int:
    """Memory of one training step of the circuit (measured: see ``GATE_BYTES``): the tape and
    autograd graph of every gate, and, with ``states`` (the simulation runs on the host),
    ``STATES_PER_GATE`` state vectors per gate and sample."""
    gates = num_layers * gates_per_layer(num_qubits)
    per_gate = GATE_BYTES
    if states:
        per_gate += STATES_PER_GATE * batch_size * 2**num_qubits * AMPLITUDE_BYTES
    return int(gates * per_gate)


def pauli_z_signs(num_qubits: int) -> Tensor:
    """(2^n, n) matrix S with S[i, q] = +1 if bit q of basis state i is 0 else -1 (wire 0 is
    the most significant bit, PennyLane's order): <Z_q> = sum_i p_i S[i, q]."""
    index = torch.arange(2**num_qubits).unsqueeze(1)
    shifts = torch.arange(num_qubits - 1, -1, -1).unsqueeze(0)
    return 1.0 - 2.0 * ((index >> shifts) & 1).to(torch.get_default_dtype())


class QuantumCircuit(nn.Module):
    """The VQC as a torch module: ``(B, d) -> (B, n)`` Pauli-Z expectations.

    A thin wrapper around ``qml.qnn.TorchLayer`` (which holds the trainable ``weights`` of shape
    (layers, qubits, 2)); it flattens the input, casts the simulator's output to the input's
    dtype and, with backprop, turns the probabilities into the n expectations.
    """

    def __init__(
        self,
        num_qubits: int,
        num_layers: int,
        device: str = "default.qubit",
        init: str = "kaiming-uniform",
    ) -> None:
        super().__init__()
        import pennylane as qml

        _SETTING["vqc-device"].validate(device)
        _SETTING["vqc-init"].validate(init)
        self.num_qubits, self.num_layers, self.device_name = num_qubits, num_layers, device
        dev = qml.device(device, wires=num_qubits)
        # With backprop, the n <Z_q> are read from ONE probability vector (a fixed linear map,
        # `pauli_z_signs`): 2-3x faster than n separate expectation values at 10 qubits (see
        # benchmarks/vqc_speed.py). The adjoint method differentiates expectation values only.
        self.measure = "probs" if DEVICES[device] == "backprop" else "expval"
        if self.measure == "probs":
            self.register_buffer("z_signs", pauli_z_signs(num_qubits), persistent=False)
        measure = self.measure

        def qnode_fn(inputs, weights):  # TorchLayer wants exactly (inputs, <weights...>)
            return circuit(inputs, weights, num_qubits, measure)

        qnode = qml.QNode(qnode_fn, dev, interface="torch", diff_method=DEVICES[device])
        self.qlayer = qml.qnn.TorchLayer(
            qnode, circuit_weight_shapes(num_qubits, num_layers), init_method=INITS[init]
        )

    def forward(self, x: Tensor) -> Tensor:
        out = self.qlayer(x.flatten(1))
        dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        if self.measure == "probs":
            return out.to(dtype) @ self.z_signs.to(dtype)
        return out.to(dtype)


class VQCReadout(nn.Module):
    """Expectations ``(B, n)`` -> class logits ``(B, classes)``; see the module docstring."""

    def __init__(
        self, mode: str, num_qubits: int, num_classes: int, scale: float, scale_trainable: bool
    ) -> None:
        super().__init__()
        self.mode, self.num_qubits, self.num_classes = mode, num_qubits, num_classes
        if mode == "linear":
            self.linear = nn.Linear(num_qubits, num_classes)
            self.in_features = num_qubits
            return
        self.in_features = num_qubits
        value = torch.tensor([float(scale)])  # shape (1,): 0-d arrays trip Flower's FedOpt
        if scale_trainable:
            self.scale = nn.Parameter(value)
        else:
            self.register_buffer("scale", value)

    def forward(self, z: Tensor) -> Tensor:
        if self.mode == "linear":
            return self.linear(z)
        if self.mode == "last-qubit":
            last = z[:, -1:]
            return self.scale * torch.cat([last, -last], dim=1)
        return self.scale * z[:, : self.num_classes]


def default_qubits(input_shape: tuple[int, ...]) -> int:
    """Smallest register whose 2^n amplitudes hold the flattened input."""
    return max(1, math.ceil(math.log2(math.prod(input_shape))))


def resolve_readout(readout: str, num_qubits: int, num_classes: int) -> str:
    _SETTING["vqc-readout"].validate(readout)
    if readout == "auto":
        if num_classes == 2:
            return "last-qubit"
        return "per-class" if num_classes <= num_qubits else "linear"
    if readout == "last-qubit" and num_classes != 2:
        raise ConfigError(
            f"vqc-readout 'last-qubit' is for binary tasks, the data has {num_classes} classes;"
            " use 'per-class' (classes <= qubits), 'linear' or 'auto'"
        )
    if readout == "per-class" and num_classes > num_qubits:
        raise ConfigError(
            f"vqc-readout 'per-class' needs at least one qubit per class: {num_classes} classes,"
            f" {num_qubits} qubits; raise vqc-qubits or use vqc-readout 'linear' or 'auto'"
        )
    return readout


@dataclass(frozen=True)
class VQCPlan:
    """The VQC a run config asks for, resolved and checked before anything is built: what
    ``build_vqc`` builds, and what the pre-flight's estimate (``runtime.needs``) sizes."""

    input_shape: tuple[int, ...]
    num_classes: int
    qubits: int  # resolved: from the data when vqc-qubits is 0
    layers: int
    readout: str  # resolved: never 'auto'
    device: str
    scale: float
    scale_trainable: bool
    reduction: str
    init: str

    def classical_parts(self) -> tuple[list[nn.Module], VQCReadout]:
        """The torch modules around the circuit: the stages before it (flatten, the optional
        pre-layer) and the readout head."""
        stages: list[nn.Module] = [nn.Flatten()]
        if self.reduction == "linear":  # classical pre-layer: a hybrid model
            stages.append(nn.Linear(math.prod(self.input_shape), 2**self.qubits))
        head = VQCReadout(
            self.readout, self.qubits, self.num_classes, self.scale, self.scale_trainable
        )
        return stages, head

    def parameter_count(self) -> int:
        """The model's parameters without building the circuit (PennyLane's ``TorchLayer``
        allocates its weights even on torch's meta device): the classical parts built on the
        meta device, and the circuit's ``circuit_weight_shapes``."""
        with torch.device("meta"):
            stages, head = self.classical_parts()
        classical = sum(p.numel() for m in (*stages, head) for p in m.parameters())
        shapes = circuit_weight_shapes(self.qubits, self.layers).values()
        return classical + sum(math.prod(shape) for shape in shapes)


def plan_vqc(
    input_shape: tuple[int, ...], num_classes: int, config: Any = None, **given: Any
) -> VQCPlan:
    """The VQC for ``input_shape``: settings from keyword arguments (builder argument names,
    ``None`` = not given), else the run config's ``vqc-*`` keys, else their declared defaults
    (``SETTINGS``), each checked as declared; ``ConfigError`` for a register too large for one
    batch, an input larger than the register, or a readout the task cannot take."""
    settings = {}
    for key, name in _ARGUMENTS.items():
        if given.get(name) is not None:
            _SETTING[key].validate(given[name])
            settings[name] = given[name]
        else:
            settings[name] = config[key] if config is not None else _SETTING[key].default
    dim = math.prod(input_shape)
    n = settings["qubits"] or default_qubits(input_shape)
    too_large = register_too_large(n, config["batch-size"] if config is not None else 1)
    if too_large:
        raise ConfigError(too_large)
    if settings["reduction"] != "linear" and dim > 2**n:
        raise ConfigError(
            f"the input has {dim} features but {n} qubits hold only {2**n} amplitudes; raise"
            f" vqc-qubits to {default_qubits(input_shape)} or set vqc-reduction='linear'"
        )
    settings["readout"] = resolve_readout(settings["readout"], n, num_classes)
    return VQCPlan(tuple(input_shape), num_classes, **{**settings, "qubits": n})


def build_vqc(
    input_shape: tuple[int, ...],
    num_classes: int,
    config: Any = None,
    *,
    qubits: int | None = None,
    layers: int | None = None,
    readout: str | None = None,
    device: str | None = None,
    scale: float | None = None,
    scale_trainable: bool | None = None,
    reduction: str | None = None,
    init: str | None = None,
) -> Classifier:
    """The VQC of ``plan_vqc`` (same arguments): its classical parts around the circuit.

    ``qubits=0`` means "from the data": ceil(log2(prod(input_shape))).
    """
    plan = plan_vqc(
        input_shape,
        num_classes,
        config,
        qubits=qubits,
        layers=layers,
        readout=readout,
        device=device,
        scale=scale,
        scale_trainable=scale_trainable,
        reduction=reduction,
        init=init,
    )
    stages, head = plan.classical_parts()
    stages.append(QuantumCircuit(plan.qubits, plan.layers, plan.device, plan.init))
    return Classifier(nn.Sequential(*stages), head)
