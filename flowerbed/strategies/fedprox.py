"""FedProx (Li et al., 2020, "Federated Optimization in Heterogeneous Networks").

Client: minimise  F_i(w) + (mu / 2) * ||w - w^t||^2  from the global model w^t, with mu sent
by the server under ``proximal-mu`` (run-config key ``proximal-mu``).
Server: FedAvg's weighted average (Flower's ``FedProx``).
"""

from __future__ import annotations

import torch
from flwr.app import Message
from flwr.serverapp.strategy import FedProx

from ..client import LocalClient
from ..config import RunConfig
from .common import StrategySpec


def proximal_term(global_params: list[torch.Tensor], mu: float):
    """The loss term (mu / 2) * ||w - w^t||^2 over the trainable parameters."""

    def extra_loss(model: torch.nn.Module) -> torch.Tensor:
        squared = sum(
            (w - w0).pow(2).sum() for w, w0 in zip(model.parameters(), global_params)
        )
        return 0.5 * mu * squared

    return extra_loss


def train_fedprox(client: LocalClient, msg: Message) -> Message:
    model = client.model_from(msg)
    mu = float(msg.content.config_records["config"]["proximal-mu"])
    global_params = [p.detach().clone() for p in model.parameters()]
    hooks = {"extra_loss": proximal_term(global_params, mu)} if mu > 0 else {}
    result = client.train(model, client.server_round(msg), **hooks)
    return client.train_reply(msg, model, result)


def build_fedprox(config: RunConfig, **kwargs) -> FedProx:
    return FedProx(proximal_mu=config.get("proximal-mu", 0.01), **kwargs)


SPEC = StrategySpec(
    name="fedprox",
    summary="FedAvg with a proximal term (mu/2)||w - w_global||^2 in the client loss",
    paper="Li et al., MLSys 2020",
    build_server=build_fedprox,
    client_train=train_fedprox,
    config_keys=("proximal-mu",),
)
