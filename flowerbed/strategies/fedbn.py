"""FedBN (Li, Jiang, Zhang, Kamp, Dou, ICLR 2021, "FedBN: Federated Learning on Non-IID Features
via Local Batch Normalization").

Every batch-normalisation layer stays with its client: its affine parameters (weight, bias) and
its statistics (running mean, running variance, number of batches tracked). Everything else is
averaged as in FedAvg (Algorithm 1 of the paper):

    w^(l) <- sum_k (n_k / n) w_k^(l)       for every layer l that is not batch norm,
    BN_k  <- BN_k                           (never leaves client k's training).

How it is built here. The server is Flower's ``FedAvg`` unchanged; the locality is the client's
doing. A client keeps its batch-norm entries in ``context.state`` and, on receiving the global
model, puts them back in place of the received ones before it trains or evaluates. Whatever the
server holds in the batch-norm entries therefore never reaches a client that has trained once,
and the shared layers follow exactly FedBN's rule. (The paper weights clients uniformly because
its clients hold equally many samples; with sample-count weights FedBN on a model without batch
norm is FedAvg, which is tested.)

What the server's "global model" is. The paper has no single model: each client predicts with
the shared layers and its own batch norm. For the centralized evaluation on the held-out test
set flowerbed needs one, and takes the shared layers with the sample-weighted average of the
clients' batch-norm layers (what ``FedAvg`` computes for those entries, never sent back into
training). The client-side evaluation (``accuracy`` in the history's client columns) is the
paper's: shared layers + the client's own batch norm on its local test split. A client's first
round starts from the batch-norm entries it receives (the initial model's in round 1).

The clients send their full model (batch-norm entries included, a small share of the bytes) so
that the server can form that evaluation model.
"""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Message
from torch import nn

from ..training.local_client import LocalClient
from .common import StrategySpec
from .fedavg import build_fedavg

STATE_KEY = "fedbn-local-batchnorm"


def batchnorm_keys(model: nn.Module) -> list[str]:
    """State-dict keys of every batch-norm layer: weight, bias, running statistics, counter."""
    keys = []
    for prefix, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            keys += [f"{prefix}.{name}" if prefix else name for name in module.state_dict()]
    return keys


def with_local_entries(
    received: dict[str, torch.Tensor], local: dict[str, torch.Tensor] | None
) -> dict[str, torch.Tensor]:
    """The received state dict with the client's own entries put back where it has them."""
    if not local:
        return dict(received)
    missing = sorted(set(local) - set(received))
    if missing:
        raise ValueError(f"FedBN: local batch-norm entries {missing} are not in the received model")
    return {key: local.get(key, value) for key, value in received.items()}


def local_model(client: LocalClient, msg: Message) -> nn.Module:
    """The received global model with this client's batch-norm layers (if it has trained)."""
    model = client.model_from(msg)
    if STATE_KEY in client.context.state:
        received = model.state_dict()
        local = client.context.state[STATE_KEY].to_torch_state_dict()
        model.load_state_dict(with_local_entries(received, local))
    return model


def keep_batchnorm(client: LocalClient, model: nn.Module) -> None:
    """Store the model's batch-norm entries in the client's persistent state."""
    state = model.state_dict()
    keys = batchnorm_keys(model)
    if keys:
        client.context.state[STATE_KEY] = ArrayRecord({key: state[key] for key in keys})


def train_fedbn(client: LocalClient, msg: Message) -> Message:
    model = local_model(client, msg)
    result = client.train(model, client.server_round(msg))
    keep_batchnorm(client, model)
    return client.train_reply(msg, model, result)


def evaluate_fedbn(client: LocalClient, msg: Message) -> Message:
    """Shared layers from the server with the client's own batch norm, on its local test split."""
    return client.evaluate_reply(msg, local_model(client, msg))


SPEC = StrategySpec(
    name="fedbn",
    summary="FedAvg of every layer except batch norm: each client keeps its BN weights, biases and"
    " statistics in `context.state` and puts them back on receipt; the server's model"
    " (centralized evaluation) holds the sample-weighted mean of the clients' BN layers,"
    " client evaluation uses the client's own",
    paper="Li et al., ICLR 2021",
    build_server=build_fedavg,  # the server is FedAvg's
    client_train=train_fedbn,
    client_evaluate=evaluate_fedbn,
    exchanged="the model's weights, both ways, every round; a client's batch-norm layers go up"
    " (for the server's evaluation model) but it always trains and evaluates with its own",
)
