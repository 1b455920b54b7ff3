"""FedProx (Li et al., 2020, "Federated Optimization in Heterogeneous Networks").

Client: minimise  F_i(w) + (mu / 2) * ||w - w^t||^2  from the global model w^t, with mu sent
by the server under ``proximal-mu`` (run-config key ``proximal-mu``; the term is
``training.terms.proximal_term``).
Server: FedAvg's weighted average (Flower's ``FedProx``).
"""

from __future__ import annotations

from flwr.app import Message
from flwr.serverapp.strategy import FedProx

from ..settings import RunConfig, Setting
from ..training.local_client import LocalClient
from ..training.terms import proximal_term
from .common import StrategySpec

SETTINGS = (Setting("proximal-mu", 0.01, "FedProx: weight of the proximal term", low=0),)


def train_fedprox(client: LocalClient, msg: Message) -> Message:
    model = client.model_from(msg)
    mu = float(msg.content.config_records["config"]["proximal-mu"])
    global_params = [p.detach().clone() for p in model.parameters()]
    hooks = {"extra_loss": proximal_term(global_params, mu)} if mu > 0 else {}
    result = client.train(model, client.server_round(msg), **hooks)
    return client.train_reply(msg, model, result)


def build_fedprox(config: RunConfig, **kwargs) -> FedProx:
    return FedProx(proximal_mu=config["proximal-mu"], **kwargs)


SPEC = StrategySpec(
    name="fedprox",
    summary="FedAvg with (mu/2)‖w − w_global‖² in the client loss (Flower's `FedProx`)",
    paper="Li et al., MLSys 2020",
    build_server=build_fedprox,
    client_train=train_fedprox,
    settings=SETTINGS,
)
