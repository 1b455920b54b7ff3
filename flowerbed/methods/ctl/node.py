"""CTL's client half: a node's logistic model, its step of each phase, its evaluation.

Node k keeps f_k(x) = sigmoid(w . (x - m_k) / s_k + b) (its own standardisation m_k, s_k of
its training features, as the authors' code) in ``context.state``; the gradient step on (C1)
is taken by autograd on the objective itself (the reference simulator writes the gradient in
closed form: two independent derivations that the tests compare). See ``protocol`` for the
equations and the phases.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from flwr.app import Array, ArrayRecord, Message, RecordDict

from ...data.federation import node_split
from ...data.mapped_images import MappedImages, materialise
from ...training.local_client import LocalClient
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

MODEL_KEY = "ctl-model"


def as_matrix(x: torch.Tensor | MappedImages) -> np.ndarray:
    return materialise(x).reshape(len(x), -1).numpy().astype(np.float64)


class Node:
    """Node k's data in the form CTL uses it, and its logistic model (in ``context.state``)."""

    def __init__(self, client: LocalClient) -> None:
        self.client = client
        self.x = as_matrix(client.x_train)
        self.y = client.y_train.numpy().astype(np.float64)
        self.mean, self.std = node_scaler(self.x)
        state = client.context.state.get(MODEL_KEY)
        if state is None:  # zero initialisation (authors' code)
            self.weight, self.bias = np.zeros(self.x.shape[1]), 0.0
        else:
            self.weight = state["weight"].numpy().copy()
            self.bias = float(state["bias"].numpy()[0])

    def save(self) -> None:
        self.client.context.state[MODEL_KEY] = ArrayRecord(
            {"weight": Array(self.weight), "bias": Array(np.array([self.bias]))}
        )

    def scores(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.std) @ self.weight + self.bias

    def task_accuracies(self, tasks: np.ndarray) -> list[float]:
        """Accuracy on the test data of each task node (own test split first)."""
        config, num_nodes = self.client.config, self.client.num_partitions
        accuracies = []
        for task in tasks:
            _, _, x_test, y_test = node_split(config, num_nodes, int(task))
            predicted = self.scores(as_matrix(x_test)) > 0
            accuracies.append(float(np.mean(predicted == y_test.numpy().astype(bool))))
        return accuracies

    def descend(
        self,
        representatives: np.ndarray,
        rep_share: np.ndarray,
        guest_predictions: np.ndarray,
        lambdas: np.ndarray,
        alpha: float,
        ce_weight: float,
    ) -> float:
        """``ctl-steps`` gradient steps on (C1) by autograd; returns the objective before them.

        ``rep_share`` = n_h / n; ``guest_predictions`` (K, 2K): p_j(t-1); ``lambdas`` (K,).
        """
        config = self.client.config
        x = torch.from_numpy((self.x - self.mean) / self.std)
        y = torch.from_numpy(self.y)
        reps = torch.from_numpy((representatives - self.mean) / self.std)
        share = torch.from_numpy(rep_share)
        teachers = torch.from_numpy(guest_predictions)
        lam = torch.from_numpy(lambdas)
        weight = torch.tensor(self.weight, requires_grad=True)
        bias = torch.tensor(self.bias, dtype=torch.float64, requires_grad=True)
        first_loss = math.nan
        for step in range(config.ctl_steps):
            cross_entropy = F.binary_cross_entropy_with_logits(x @ weight + bias, y)
            rep_scores = reps @ weight + bias
            # KL(Bernoulli(p_j) || Bernoulli(p_k)) from log-sigmoids, for every guest j, rep h
            kl = (
                torch.xlogy(teachers, teachers)
                + torch.xlogy(1 - teachers, 1 - teachers)
                - teachers * F.logsigmoid(rep_scores)
                - (1 - teachers) * F.logsigmoid(-rep_scores)
            )
            distillation = torch.sum(lam[:, None] * share[None, :] * kl)
            loss = ce_weight * cross_entropy + alpha * distillation
            weight.grad = bias.grad = None
            loss.backward()
            with torch.no_grad():
                weight -= config.ctl_learning_rate * weight.grad
                bias -= config.ctl_learning_rate * bias.grad
            if step == 0:
                first_loss = float(loss.detach())
        self.weight, self.bias = weight.detach().numpy().copy(), float(bias.detach())
        return first_loss


def _board(msg: Message) -> dict[str, np.ndarray]:
    return {key: array.numpy() for key, array in msg.content.array_records["board"].items()}


def share_step(client: LocalClient, msg: Message) -> Message:
    centroids, counts, moments = node_share(as_matrix(client.x_train), client.y_train.numpy())
    arrays = ArrayRecord(
        {"centroids": Array(centroids), "counts": Array(counts), "moments": Array(moments)}
    )
    return Message(content=RecordDict({"share": arrays}), reply_to=msg)


def round_step(client: LocalClient, msg: Message) -> Message:
    """Node k's round (module docstring, phase 2)."""
    config, k = client.config, client.partition_id
    server_round = client.server_round(msg)
    board = _board(msg)
    tasks = task_assignment(client.num_partitions, config.ctl_tasks, config.seed)[k]
    if server_round == 0:
        client.context.state.pop(MODEL_KEY, None)  # a new run starts from zero
    node = Node(client)
    guests: list[int] = []
    lambdas = np.zeros(client.num_partitions)
    loss = math.nan
    if server_round >= 1:
        coefficients = board["coefficients"]
        guests = select_guests(
            config.ctl_guests,
            k,
            coefficients,
            tasks,
            config.ctl_num_guests,
            config.seed,
            server_round,
        )
        scale = 1.0
        if config.ctl_guests == "all" and config.ctl_all_scale:
            scale = config.ctl_num_guests / (client.num_partitions - 1)
        lambdas = guest_weights(k, guests, coefficients, tasks, scale)
        local_full = config.ctl_guests == "local" and config.ctl_local_ce == "full"
        loss = node.descend(
            board["representatives"],
            board["counts"] / board["counts"].sum(),
            board["predictions"],
            lambdas,
            config.ctl_alpha,
            ce_weight=1.0 if local_full else 1.0 - config.ctl_alpha,
        )
        node.save()
    accuracies = node.task_accuracies(tasks)
    predictions = 1.0 / (1.0 + np.exp(-node.scores(board["representatives"])))
    importance = logistic_importance(node.weight, node.bias, node.mean, node.std)
    rows, clipped = coefficient_rows(
        moment_coefficients(board["moments"][k : k + 1], board["moments"]),
        board["counts"].reshape(-1, NUM_CLASSES)[k : k + 1],
        board["counts"].reshape(-1, NUM_CLASSES),
        importance[None, :],
        config.ctl_clip_h,
    )
    others = accuracies[1:]
    metrics = client.metrics(
        len(node.y),
        **{
            "train-loss": loss,
            "accuracy": accuracies[0],
            "nonlocal-accuracy": float(np.mean(others)) if others else math.nan,
            "task-accuracies": accuracies,
            "guests": [int(g) for g in guests],
            "lambdas": [float(lambdas[g]) for g in guests],
            "clipped": clipped,
        },
    )
    arrays = ArrayRecord({"predictions": Array(predictions), "coefficients": Array(rows[0])})
    return Message(content=RecordDict({"shared": arrays, "metrics": metrics}), reply_to=msg)
