"""FedAvg (McMahan et al., 2017, "Communication-Efficient Learning of Deep Networks from
Decentralized Data").

Server: x <- sum_i (n_i / n) y_i over the clients that replied (Flower's ``FedAvg``).
Client: E epochs of mini-batch SGD on the local data from x, returning y_i and n_i.

The client step here is plain local training; every strategy whose client does nothing more
(FedAvgM, FedAdam, FedYogi, FedAdagrad, FedMedian) reuses it.
"""

from __future__ import annotations

from flwr.app import Message
from flwr.serverapp.strategy import FedAvg

from ..settings import RunConfig
from ..training.local_client import LocalClient
from .common import StrategySpec


def train_plain(client: LocalClient, msg: Message) -> Message:
    """Train the received global model on local data; reply with the weights and n_i."""
    model = client.model_from(msg)
    result = client.train(model, client.server_round(msg))
    return client.train_reply(msg, model, result)


def build_fedavg(config: RunConfig, **kwargs) -> FedAvg:
    return FedAvg(**kwargs)


SPEC = StrategySpec(
    name="fedavg",
    summary="weighted average of the clients' locally trained models (Flower's `FedAvg`)",
    paper="McMahan et al., AISTATS 2017",
    build_server=build_fedavg,
    client_train=train_plain,
)
