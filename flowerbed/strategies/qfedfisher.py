"""QFedFisher (Bhatia & Kais, 2025, "Enhancing Quantum Federated Learning with Fisher
Information-Based Optimization"): Fisher-information-masked aggregation.

Client i, round r (paper Sec. II.A and Fig. 3):

1. client-side rule (Fig. 3, run-config ``qfedfisher-client-rule``, on by default): starting
   from the global model theta_g, the client keeps its own previous parameters where its
   previous normalised Fisher is significant and takes the global value elsewhere:
   theta_start[j] = theta_i^{r-1}[j] if F_i^{r-1}[j] >= delta else theta_g[j]
   (first participation: theta_start = theta_g). theta_i^{r-1} and F_i^{r-1} live in the
   node's ``context.state``.
2. local training (the run's optimizer; the paper uses Adam, lr 1e-3, E = 1, B = 32);
3. empirical diagonal Fisher, eq. (1): F_i[j] = mean over the local mini-batches b of
   (dL_b / d theta_j)^2 (``qfedfisher-fisher-pass='final'``: one extra pass over the local
   batches at the trained parameters; ``'training'``: the squared gradients of the local
   training steps themselves, no extra pass);
4. layer-wise min-max normalisation: F <- (F - min F) / (max F - min F) within each layer
   (``qfedfisher-normalization='layer'``: each circuit layer of a PennyLane ``TorchLayer``'s
   weights, i.e. each slice (RY, RX angles of every qubit) along the first axis, and each other
   parameter tensor as a whole; ``'tensor'``: every parameter tensor as a whole). A layer whose
   Fisher values are all equal carries no ranking and is set to 0 (so it falls back to FedAvg);
5. reply: the parameters (ArrayRecord ``arrays``) and the normalised Fisher as a second
   ArrayRecord ``fisher`` (its bytes are part of the reply, so the history counts them), with
   the metrics ``fisher-kept`` (entries the client rule kept) and ``fisher-kept-fraction``
   (their share of the trainable entries; the history's ``client_fisher_kept_fraction_mean``,
   ``_min``, ``_max``).

Server, eqs. (2)-(4), per parameter entry j:

    theta_avg = sum_i p_i theta_i,  p_i = n_i / sum_k n_k            (Flower's weighted mean)
    F_s = sum_i F_i,  G_s = sum_i F_i theta_i,  theta_s = G_s / F_s
    theta_s[j] = theta_avg[j]  wherever F_s[j] < delta  (delta = ``qfedfisher-delta``, 0.01)

State-dict entries without a Fisher value (buffers such as batch-norm statistics) get
theta_avg. The share of the Fisher-carrying entries that took theta_avg is the round's
``fisher-substituted-fraction`` (the history's ``server_fisher_substituted_fraction``). Nothing here is specific to the VQC: it works for every flowerbed model.

Quantile form (``qfedfisher-threshold='quantile'``, not in the paper): "significant" means,
in both rules, among the top q = ``qfedfisher-quantile`` share of its layer's values (the
groups of step 4) instead of >= delta, so that the kept and Fisher-averaged shares are chosen,
not a consequence of how the normalised values fall around delta. Ties at the cut are kept.

Flower's ``FedAvg.aggregate_train`` accepts exactly one ArrayRecord per reply, so
``QFedFisher.aggregate_train`` splits the Fisher record off, lets Flower validate and average
the rest, and applies eqs. (3)-(4).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from logging import INFO

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp.strategy import FedAvg
from flwr.serverapp.strategy.strategy_utils import (
    aggregate_arrayrecords,
    validate_message_reply_consistency,
)
from torch import Tensor, nn

from ..core.device import to_device_of
from ..core.seeding import seed_for
from ..data.site_reports import data_shape
from ..models import build_model
from ..settings import RunConfig, Setting
from ..training.local_client import LocalClient
from ..training.loops import cross_entropy, minibatches
from ..trust.reply_checks import Schema, schema_of
from .common import StrategySpec, trainable_keys

FISHER_KEY = "fisher"
STATE_PARAMS, STATE_FISHER = "qfedfisher-params", "qfedfisher-fisher"
NORMALIZATIONS = ("layer", "tensor")
FISHER_PASSES = ("final", "training")
THRESHOLDS = ("delta", "quantile")
SETTINGS = (
    Setting(
        "qfedfisher-delta",
        0.01,
        "QFedFisher: Fisher threshold delta (server: FedAvg value where sum_i F_i < delta;"
        " client rule: keep own value where F_i >= delta)",
        low=0,
        low_open=True,
    ),
    Setting(
        "qfedfisher-threshold",
        "delta",
        "QFedFisher: which Fisher entries are significant, in both rules: normalised Fisher >="
        " `qfedfisher-delta` (`delta`, the paper's), or the top `qfedfisher-quantile` share of"
        " each layer's values (`quantile`)",
        choices=THRESHOLDS,
    ),
    Setting(
        "qfedfisher-quantile",
        0.2,
        "QFedFisher, `qfedfisher-threshold='quantile'`: share q of each layer's entries that are"
        " significant (the client keeps its own, the server Fisher-averages them)",
        low=0,
        high=1,
        low_open=True,
    ),
    Setting(
        "qfedfisher-client-rule",
        True,
        "QFedFisher: the client rule of the paper's Fig. 3 (keep own significant parameters,"
        " take the global value for the rest)",
    ),
    Setting(
        "qfedfisher-normalization",
        "layer",
        "QFedFisher: min-max per circuit layer (VQC weights) and per parameter tensor otherwise"
        " (`layer`), or per parameter tensor (`tensor`)",
        choices=NORMALIZATIONS,
    ),
    Setting(
        "qfedfisher-fisher-pass",
        "final",
        "QFedFisher: Fisher from an extra pass over the local batches after training (`final`)"
        " or from the training steps' own gradients (`training`, no extra cost)",
        choices=FISHER_PASSES,
    ),
)


# --- client side ----------------------------------------------------------------------------


def empirical_fisher(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    batch_size: int,
    generator: torch.Generator | None = None,
) -> dict[str, Tensor]:
    """Eq. (1): mean over the local mini-batches of the squared gradient of the batch loss.

    Runs in eval mode, so batch-norm statistics are left as training made them.
    """
    was_training = model.training
    model.eval()
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    total = {name: torch.zeros_like(p) for name, p in params.items()}
    num_batches = 0
    for xb, yb in minibatches(x, y, batch_size, generator):
        xb, yb = to_device_of(model, xb, yb)
        grads = torch.autograd.grad(
            cross_entropy(model, xb, yb), list(params.values()), allow_unused=True
        )
        for name, grad in zip(params, grads):
            if grad is not None:
                total[name] += grad.detach() ** 2
        num_batches += 1
    model.train(was_training)
    return {name: t / max(num_batches, 1) for name, t in total.items()}


class SquaredGradients:
    """``after_backward`` hook that accumulates the squared gradients of the training steps
    (``qfedfisher-fisher-pass='training'``): the same estimator along the local trajectory."""

    def __init__(self) -> None:
        self.total: dict[str, Tensor] = {}
        self.steps = 0

    def __call__(self, model: nn.Module) -> None:
        for name, p in model.named_parameters():
            if p.requires_grad:
                g2 = p.grad.detach() ** 2 if p.grad is not None else torch.zeros_like(p)
                self.total[name] = self.total.get(name, 0) + g2
        self.steps += 1

    def mean(self, model: nn.Module) -> dict[str, Tensor]:
        """Every trainable parameter's mean squared gradient (zeros if there was no step)."""
        return {
            name: self.total.get(name, torch.zeros_like(p.detach())) / max(self.steps, 1)
            for name, p in model.named_parameters()
            if p.requires_grad
        }


def circuit_layer_parameters(model: nn.Module) -> set[str]:
    """Names of the weights of PennyLane ``TorchLayer``s, whose first axis is the circuit layer."""
    from pennylane.qnn import TorchLayer

    names = set()
    for module_name, module in model.named_modules():
        if isinstance(module, TorchLayer):
            prefix = f"{module_name}." if module_name else ""
            names.update(prefix + name for name, _ in module.named_parameters())
    return names


def minmax(t: Tensor, per_first_axis: bool = False) -> Tensor:
    """(t - min) / (max - min) over the whole tensor, or over each slice t[l] of the first
    axis; a group whose values are all equal becomes 0."""
    if per_first_axis and t.ndim >= 2:
        flat = t.reshape(t.shape[0], -1)
        lo, hi = flat.min(dim=1, keepdim=True).values, flat.max(dim=1, keepdim=True).values
    else:
        flat = t.reshape(1, -1)
        lo, hi = flat.min(), flat.max()
    span = hi - lo
    out = torch.where(span > 0, (flat - lo) / torch.where(span > 0, span, 1), 0.0)
    return out.reshape(t.shape)


def normalize_layerwise(
    fisher: dict[str, Tensor], circuit_layers: set[str] = frozenset(), mode: str = "layer"
) -> dict[str, Tensor]:
    """Min-max normalisation per layer (see the module docstring, step 4)."""
    return {
        name: minmax(f, per_first_axis=(mode == "layer" and name in circuit_layers))
        for name, f in fisher.items()
    }


def top_share(values: Tensor, share: float, per_first_axis: bool = False) -> Tensor:
    """True for the ceil(share x size) largest values of each group (the whole tensor, or each
    slice along the first axis, as in ``minmax``); values tied with the last one kept are kept
    too."""
    groups = values.reshape(values.shape[0], -1) if per_first_axis and values.ndim >= 2 else None
    groups = values.reshape(1, -1) if groups is None else groups
    k = max(1, math.ceil(share * groups.shape[1]))
    cut = groups.topk(k, dim=1).values[:, -1:]
    return (groups >= cut).reshape(values.shape)


@dataclass(frozen=True)
class Significance:
    """Which Fisher entries are significant (both rules): those >= ``delta`` (the paper's), or,
    with ``quantile`` set, the top ``quantile`` share of each layer (``top_share``; a circuit
    layer per slice when ``name`` is in ``circuit_layers``, else the whole tensor)."""

    delta: float
    quantile: float | None = None
    circuit_layers: frozenset[str] = frozenset()

    def mask(self, name: str, values: Tensor) -> Tensor:
        if self.quantile is None:
            return values >= self.delta
        return top_share(values, self.quantile, name in self.circuit_layers)

    @classmethod
    def of(cls, config: RunConfig, circuit_layers: set[str]) -> Significance:
        """The run's rule; ``circuit_layers`` group the quantile only with
        ``qfedfisher-normalization='layer'``, as the normalisation does."""
        if config.qfedfisher_threshold == "delta":
            return cls(config.qfedfisher_delta)
        layers = circuit_layers if config.qfedfisher_normalization == "layer" else set()
        return cls(config.qfedfisher_delta, config.qfedfisher_quantile, frozenset(layers))


def keep_significant(
    model: nn.Module, state: RecordDict, significance: Significance | float
) -> int:
    """Fig. 3: keep the client's previous parameters where its previous Fisher is significant
    (>= delta, when ``significance`` is a number), take the global value (already loaded in
    ``model``) elsewhere. Returns how many entries kept."""
    if not isinstance(significance, Significance):
        significance = Significance(float(significance))
    if STATE_PARAMS not in state or STATE_FISHER not in state:
        return 0
    own = state[STATE_PARAMS].to_torch_state_dict()
    fisher = state[STATE_FISHER].to_torch_state_dict()
    kept = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in own and name in fisher:
                mask = significance.mask(name, fisher[name]).to(p.device)
                p.copy_(torch.where(mask, own[name].to(p), p))
                kept += int(mask.sum())
    return kept


def train_qfedfisher(client: LocalClient, msg: Message) -> Message:
    """Steps 1-5 of the client (module docstring)."""
    config = client.config
    server_round = client.server_round(msg)
    model = client.model_from(msg)
    kept = 0
    if config.qfedfisher_client_rule:
        significance = Significance.of(config, circuit_layer_parameters(model))
        kept = keep_significant(model, client.context.state, significance)
    entries = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if config.qfedfisher_fisher_pass == "training":
        hook = SquaredGradients()
        result = client.train(model, server_round, after_backward=hook)
        fisher = hook.mean(model)
    else:
        result = client.train(model, server_round)
        generator = torch.Generator().manual_seed(
            seed_for(client.config.seed, client.partition_id, server_round, 2)
        )
        fisher = empirical_fisher(
            model, client.x_train, client.y_train, client.config.batch_size, generator
        )
    fisher = normalize_layerwise(
        fisher, circuit_layer_parameters(model), config.qfedfisher_normalization
    )
    params = {name: p.detach() for name, p in model.named_parameters() if name in fisher}
    client.context.state[STATE_PARAMS] = ArrayRecord(params)
    client.context.state[STATE_FISHER] = ArrayRecord(fisher)
    metrics = {"fisher-kept": kept, "fisher-kept-fraction": kept / entries if entries else 0.0}
    reply = client.train_reply(msg, model, result, **metrics)
    reply.content[FISHER_KEY] = ArrayRecord(fisher)
    return reply


# --- server side ----------------------------------------------------------------------------


def fisher_average(
    thetas: list[dict[str, np.ndarray]],
    fishers: list[dict[str, np.ndarray]],
    theta_avg: dict[str, np.ndarray],
    significance: Significance | float,
) -> tuple[dict[str, np.ndarray], int, int]:
    """Eqs. (3)-(4): theta_s = sum_i F_i theta_i / sum_i F_i, theta_avg where sum_i F_i is not
    significant (< delta when ``significance`` is a number: the paper's rule).

    Entries without Fisher (buffers) take theta_avg. Returns (arrays, substituted, total)
    counted over the entries that carry Fisher.
    """
    if not isinstance(significance, Significance):
        significance = Significance(float(significance))
    keys = set(fishers[0])
    if any(set(f) != keys for f in fishers):
        raise ValueError(
            "QFedFisher: the clients' Fisher records hold different parameters;"
            f" expected {sorted(keys)}"
        )
    out, substituted, total = {}, 0, 0
    for key, avg in theta_avg.items():
        if key not in keys:
            out[key] = avg
            continue
        f = np.stack([fi[key].astype(np.float64) for fi in fishers])
        th = np.stack([ti[key].astype(np.float64) for ti in thetas])
        f_s, g_s = f.sum(axis=0), (f * th).sum(axis=0)
        low = ~significance.mask(key, torch.from_numpy(f_s)).numpy()
        theta_s = np.where(low, avg.astype(np.float64), g_s / np.where(low, 1.0, f_s))
        out[key] = theta_s.astype(avg.dtype)
        substituted += int(low.sum())
        total += low.size
    return out, substituted, total


class QFedFisher(FedAvg):
    """Flower ``FedAvg`` whose aggregation is the Fisher-weighted rule of eqs. (2)-(4)."""

    def __init__(
        self, significance: Significance | float = 0.01, fisher_key: str = FISHER_KEY, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(significance, Significance):
            significance = Significance(float(significance))
        self.significance, self.fisher_key = significance, fisher_key
        self.round_metrics: dict[str, float] = {}  # the last aggregation's own metrics

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        valid = [msg for msg in replies if not msg.has_error()]
        if not valid:
            return None, None
        contents = [msg.content for msg in valid]
        missing = [i for i, c in enumerate(contents) if self.fisher_key not in c.array_records]
        if missing:
            raise ValueError(
                f"QFedFisher: {len(missing)} replies carry no '{self.fisher_key}'"
                " ArrayRecord: are the clients running strategy 'qfedfisher'?"
            )
        models = [
            RecordDict({k: v for k, v in c.items() if k != self.fisher_key}) for c in contents
        ]
        validate_message_reply_consistency(models, self.weighted_by_key, check_arrayrecord=True)
        theta_avg = aggregate_arrayrecords(models, self.weighted_by_key)  # eq. (2), Flower's
        key = self.arrayrecord_key
        arrays, substituted, total = fisher_average(
            [_numpy(c[key]) for c in contents],
            [_numpy(c[self.fisher_key]) for c in contents],
            _numpy(theta_avg),
            self.significance,
        )
        metrics = self.train_metrics_aggr_fn(models, self.weighted_by_key)
        self.round_metrics = {"fisher-substituted-fraction": substituted / total if total else 0.0}
        metrics.update(self.round_metrics)
        log(
            INFO,
            "QFedFisher round %d: %d of %d entries not significant took theta_avg",
            server_round,
            substituted,
            total,
        )
        record = ArrayRecord({k: Array(np.array(arrays[k], order="C")) for k in theta_avg})
        return record, metrics


def _numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


def build_qfedfisher(config: RunConfig, **kwargs) -> QFedFisher:
    circuit_layers = set()
    if config.qfedfisher_threshold == "quantile":  # the server groups as the clients do
        model = build_model(config.model, *data_shape(config), config=config)
        circuit_layers = circuit_layer_parameters(model)
    return QFedFisher(Significance.of(config, circuit_layers), **kwargs)


def fisher_reply(config: RunConfig):
    """A QFedFisher reply holds the model the server sent and a Fisher value for each of its
    trainable parameters."""
    trainable = trainable_keys(config)

    def schema(sent: RecordDict) -> Schema:
        arrays = schema_of(sent.array_records["arrays"])
        fisher = {key: value for key, value in arrays.items() if key in trainable}
        return {"arrays": arrays, FISHER_KEY: fisher}

    return schema


SPEC = StrategySpec(
    name="qfedfisher",
    summary="clients send their parameters and a layer-wise min-max normalised empirical diagonal"
    " Fisher (its own ArrayRecord); server: sum_i F_i θ_i / sum_i F_i, the FedAvg value"
    " where sum_i F_i < delta; clients keep their own parameters where their Fisher >="
    " delta (Fig. 3). Any model (keys `qfedfisher-*`)",
    paper="Bhatia & Kais, 2025 (QFedFisher)",
    build_server=build_qfedfisher,
    client_train=train_qfedfisher,
    settings=SETTINGS,
    reply_arrays=fisher_reply,
    kind="multi-round FL (quantum; any model)",
    exchanged="down: the global model; up: the trained parameters and their layer-wise"
    " normalised diagonal Fisher information, every round",
    reproduction="qfedfisher",
)
