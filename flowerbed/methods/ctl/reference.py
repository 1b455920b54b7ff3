"""A NumPy reference simulator of CTL, for sweeps of many simulations.

The same algorithm as the Flower protocol (``methods.ctl.protocol``: phases, messages, a node per
process), written for speed in one process: no messages, every node updated in a loop over
arrays, and the gradient of (C1) in closed form instead of by autograd. For node k with
standardised inputs x~ = (x - m_k) / s_k, p = sigmoid(w . x~ + b):

    d/dw (1/n_k) sum_i CE = (1/n_k) sum_i (p_i - y_i) x~_i,
    d/dw sum_j lambda_j (1/n) sum_h n_h KL(p_j(h) || p_k(h))
        = sum_h (n_h / n) (Lambda p_k(h) - sum_j lambda_j p_j(h)) x~_h,   Lambda = sum_j lambda_j

(the Bernoulli KL's derivative in the logit is p_k - p_j). Rules shared with the protocol
(tasks, guests, lambda, coefficient rows) come from ``rules``. ``tests/test_ctl.py``
checks that both give the same accuracy curves for one seed; ``benchmarks/ctl.py`` runs the
sweeps with this simulator.

``energy='exact'`` replaces the moment approximation by exact per-feature coefficients from
samples (pairwise on a subsample): a measurement of what the approximation changes, not
something a node could compute without other nodes' data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...data.datasets import load_dataset
from ...data.federation import node_split
from ...data.partition import members
from ...data.simulations import SimulationOptions
from ...kd.energy import exact_feature_coefficients
from ...settings import RunConfig
from .node import as_matrix
from .rules import (
    NUM_CLASSES,
    coefficient_rows,
    guest_weights,
    logistic_importance,
    moment_coefficients,
    node_scaler,
    node_share,
    select_guests,
    task_assignment,
)


@dataclass(frozen=True)
class NodeData:
    x_train: np.ndarray  # (n_k, d) float64
    y_train: np.ndarray  # (n_k,) 0/1
    x_test: np.ndarray
    y_test: np.ndarray


@dataclass(frozen=True)
class CTLParams:
    """The run-config keys of ``methods.ctl`` (same names, same defaults)."""

    rounds: int = 100
    alpha: float = 0.85
    guests: str = "best"
    num_guests: int = 2
    tasks: int = 2
    steps: int = 2
    learning_rate: float = 0.5
    local_ce: str = "full"
    all_scale: bool = True
    clip_h: bool = False
    seed: int = 42
    energy: str = "moments"  # or "exact" (module docstring)
    exact_samples: int = 300
    # A diagnostic of sensitivity, not a CTL setting: every round's H is multiplied by
    # (1 + this); 2**-52 moves each nonzero entry by one or two units in the last place.
    coefficient_perturbation: float = 0.0


def params_for(config: RunConfig) -> CTLParams:
    """The simulator's parameters for a flowerbed run config (``strategy='ctl'``)."""
    return CTLParams(
        rounds=config.num_server_rounds,
        alpha=config.ctl_alpha,
        guests=config.ctl_guests,
        num_guests=config.ctl_num_guests,
        tasks=config.ctl_tasks,
        steps=config.ctl_steps,
        learning_rate=config.ctl_learning_rate,
        local_ce=config.ctl_local_ce,
        all_scale=config.ctl_all_scale,
        clip_h=config.ctl_clip_h,
        seed=config.seed,
    )


def nodes_for(config: RunConfig, num_nodes: int) -> list[NodeData]:
    """Every node's data exactly as the protocol's clients see them (``node_split``)."""

    nodes = []
    for k in range(num_nodes):
        x_train, y_train, x_test, y_test = node_split(config, num_nodes, k)
        nodes.append(
            NodeData(as_matrix(x_train), y_train.numpy(), as_matrix(x_test), y_test.numpy())
        )
    return nodes


def generated_nodes(
    config: RunConfig, num_nodes: int, options: SimulationOptions
) -> list[NodeData]:
    """The nodes of a generated data set with its own nodes (``ctl-gaussian``) drawn with
    ``options`` instead of the config's ``sim-*`` keys, split as ``partitioner='dataset-nodes'``
    splits them: for options that have no run-config key (``label_intercept``). With the
    config's own options it gives what ``nodes_for`` gives (a test checks it)."""
    if config.partitioner != "dataset-nodes":
        raise ValueError(
            f"generated_nodes needs partitioner='dataset-nodes', not {config.partitioner!r}"
        )
    data = load_dataset(config.dataset, seed=config.seed, simulation=options)
    train = [torch.from_numpy(rows) for rows in members(data.train_nodes.numpy(), num_nodes)]
    test = [torch.from_numpy(rows) for rows in members(data.test_nodes.numpy(), num_nodes)]
    return [
        NodeData(
            as_matrix(data.x_train[train[k]]),
            data.y_train[train[k]].numpy(),
            as_matrix(data.x_test[test[k]]),
            data.y_test[test[k]].numpy(),
        )
        for k in range(num_nodes)
    ]


def _sigmoid(s: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-s))


def _exact_coefficients(nodes: list[NodeData], samples: int, seed: int) -> np.ndarray:
    """(K, K, 2, d) exact per-feature coefficients between every pair of nodes' class data."""
    parts = [[n.x_train[n.y_train == c] for c in range(NUM_CLASSES)] for n in nodes]
    d = nodes[0].x_train.shape[1]

    def exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # a missing class: never used
        return exact_feature_coefficients(a, b, samples, seed) if len(a) and len(b) else np.zeros(d)

    return np.array(
        [[[exact(a[c], b[c]) for c in range(NUM_CLASSES)] for b in parts] for a in parts]
    )


def simulate(nodes: list[NodeData], params: CTLParams) -> dict[str, np.ndarray]:
    """Rounds 0..T of CTL on ``nodes``. Returns ``accuracy`` (T + 1, K, 1 + tasks): each
    node's accuracy on each of its tasks after each round (own task first), ``tasks``,
    ``coefficients`` (T + 1, K, K), ``lambdas`` (T + 1, K, K) with lambda[t, k, j] = node k's
    weight of guest j, ``clipped`` (how many coefficients were clipped), and the final models
    (``weights`` (K, d), ``biases`` (K,), on each node's standardised inputs)."""
    p = params
    num_nodes = len(nodes)
    tasks = task_assignment(num_nodes, p.tasks, p.seed)
    shares = [node_share(n.x_train, n.y_train) for n in nodes]
    representatives = np.concatenate([s[0] for s in shares])
    counts = np.stack([s[1] for s in shares])
    moments = np.stack([s[2] for s in shares])
    rep_share = counts.reshape(-1) / counts.sum()
    if p.energy == "exact":
        per_feature = _exact_coefficients(nodes, p.exact_samples, p.seed)
    else:
        per_feature = moment_coefficients(moments, moments)
    scalers = [node_scaler(n.x_train) for n in nodes]
    standardised = [(n.x_train - m) / s for n, (m, s) in zip(nodes, scalers)]
    reps = [(representatives - m) / s for m, s in scalers]
    weights = np.zeros((num_nodes, representatives.shape[1]))
    biases = np.zeros(num_nodes)
    scale = 1.0
    if p.guests == "all" and p.all_scale:
        scale = p.num_guests / (num_nodes - 1)
    ce_weight = 1.0 if (p.guests == "local" and p.local_ce == "full") else 1.0 - p.alpha

    accuracy = np.zeros((p.rounds + 1, num_nodes, 1 + p.tasks))
    all_coefficients = np.zeros((p.rounds + 1, num_nodes, num_nodes))
    all_lambdas = np.zeros((p.rounds + 1, num_nodes, num_nodes))
    predictions = coefficients = None
    clipped = 0
    for t in range(p.rounds + 1):
        if t >= 1:
            for k in range(num_nodes):
                guests = select_guests(p.guests, k, coefficients, tasks[k], p.num_guests, p.seed, t)
                lam = guest_weights(k, guests, coefficients, tasks[k], scale)
                all_lambdas[t, k] = lam
                x, y, r = standardised[k], nodes[k].y_train, reps[k]
                target = lam @ predictions  # sum_j lambda_j p_j(h), (2K,)
                for _ in range(p.steps):
                    residual = _sigmoid(x @ weights[k] + biases[k]) - y
                    rep_coef = rep_share * (
                        lam.sum() * _sigmoid(r @ weights[k] + biases[k]) - target
                    )
                    weights[k] -= p.learning_rate * (
                        ce_weight * residual @ x / len(y) + p.alpha * rep_coef @ r
                    )
                    biases[k] -= p.learning_rate * (
                        ce_weight * residual.mean() + p.alpha * rep_coef.sum()
                    )
        for k in range(num_nodes):
            mean, std = scalers[k]
            for i, task in enumerate(tasks[k]):
                centred, labels = nodes[task].x_test - mean, nodes[task].y_test.astype(bool)
                scores = (centred / std) @ weights[k] + biases[k]
                accuracy[t, k, i] = np.mean((scores > 0) == labels)
        predictions = np.stack(
            [_sigmoid(reps[k] @ weights[k] + biases[k]) for k in range(num_nodes)]
        )
        importance = np.stack(
            [logistic_importance(weights[k], biases[k], *scalers[k]) for k in range(num_nodes)]
        )
        coefficients, clips = coefficient_rows(per_feature, counts, counts, importance, p.clip_h)
        if p.coefficient_perturbation:
            coefficients = coefficients * (1.0 + p.coefficient_perturbation)
        clipped += clips
        all_coefficients[t] = coefficients
    return {
        "accuracy": accuracy,
        "tasks": tasks,
        "coefficients": all_coefficients,
        "lambdas": all_lambdas,
        "clipped": np.array(clipped),
        "weights": weights,
        "biases": biases,
    }
