"""FedDyn (Acar et al., ICLR 2021, "Federated Learning Based on Dynamic Regularization"),
Algorithm 1.

State: the server's h (zero at the start) and, on each client k, the gradient state
grad_k = grad L_k(theta_k) (zero before its first round), kept in the client's
``context.state``. Both cover the trainable parameters; alpha is run-config ``feddyn-alpha``.

Client k in round t, sent theta^{t-1}:

    theta_k^t = argmin_theta  L_k(theta) - <grad_k, theta> + (alpha/2) ||theta - theta^{t-1}||^2
                (approximately: the run's local epochs of SGD on this loss)
    grad_k   <- grad_k - alpha (theta_k^t - theta^{t-1})

and replies theta_k^t. Server, over the clients P_t that replied, m = number of connected
clients:

    h^t     = h^{t-1} - (alpha/m) sum_{k in P_t} (theta_k^t - theta^{t-1})
    theta^t = (1/|P_t|) sum_{k in P_t} theta_k^t - h^t / alpha

Means are uniform, as in the paper. Buffers (batch-norm statistics) take the FedAvg value.
theta^t is both broadcast and evaluated (Algorithm 1); the authors' code reports the accuracy
of the plain average of the active clients' models instead.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from flwr.app import ArrayRecord, Message

from ..settings import RunConfig, Setting
from ..training.local_client import LocalClient
from .common import ParameterRuleStrategy, StrategySpec, mean_of_replies, trainable_keys

GRAD_KEY = "feddyn-grad"  # the client's grad L_k(theta_k), in context.state
SETTINGS = (
    Setting(
        "feddyn-alpha",
        0.01,
        "FedDyn: alpha of the dynamic regulariser and of the server state h",
        low=0,
        low_open=True,
    ),
)


def dynamic_regulariser(grad: dict, start: dict, alpha: float):
    """The loss term -<grad_k, theta> + (alpha/2) ||theta - theta^{t-1}||^2."""

    def extra_loss(model: torch.nn.Module) -> torch.Tensor:
        return sum(
            -(grad[k] * p).sum() + 0.5 * alpha * (p - start[k]).pow(2).sum()
            for k, p in model.named_parameters()
        )

    return extra_loss


def train_feddyn(client: LocalClient, msg: Message) -> Message:
    model = client.model_from(msg)
    alpha = client.config.feddyn_alpha
    start = {k: p.detach().clone() for k, p in model.named_parameters()}
    state = client.context.state
    if GRAD_KEY in state:
        grad = client.tensors(state[GRAD_KEY])
    else:
        grad = {k: torch.zeros_like(v) for k, v in start.items()}
    result = client.train(
        model, client.server_round(msg), extra_loss=dynamic_regulariser(grad, start, alpha)
    )
    theta = {k: p.detach() for k, p in model.named_parameters()}
    state[GRAD_KEY] = ArrayRecord({k: grad[k] - alpha * (theta[k] - start[k]) for k in start})
    return client.train_reply(msg, model, result)


class FedDyn(ParameterRuleStrategy):
    """Server half of FedDyn (see the module docstring for the rule)."""

    def __init__(self, *, trainable: Iterable[str], alpha: float, **kwargs) -> None:
        super().__init__(trainable=trainable, **kwargs)
        self.alpha = alpha
        self.h: dict[str, np.ndarray] | None = None

    def update_parameters(self, contents, params):
        if self.h is None:
            self.h = {k: np.zeros(self.current[k].shape) for k in params}
        mean = mean_of_replies(contents, params)  # (1/|P|) sum theta_k
        m = max(self.num_clients, len(contents))  # m in h's update
        for k in params:  # sum_k (theta_k - theta) = |P| (mean - theta)
            self.h[k] = self.h[k] - self.alpha / m * len(contents) * (mean[k] - self.current[k])
        return {k: mean[k] - self.h[k] / self.alpha for k in params}


def build_feddyn(config: RunConfig, **kwargs) -> FedDyn:
    return FedDyn(trainable=trainable_keys(config), alpha=config.feddyn_alpha, **kwargs)


SPEC = StrategySpec(
    name="feddyn",
    summary="dynamic regularisation: client loss L_k(w) − ⟨∇L_k, w⟩ + (α/2)‖w − w_global‖², ∇L_k ←"
    " ∇L_k − α(w_k − w_global) kept in `context.state`; server h ← h − (α/m) Σ (w_k −"
    " w_global), w ← mean w_k − h/α (key `feddyn-alpha`)",
    paper="Acar et al., ICLR 2021",
    build_server=build_feddyn,
    client_train=train_feddyn,
    settings=SETTINGS,
    exchanged="the model's weights, both ways, every round (each client's gradient state"
    " stays on the client)",
)
