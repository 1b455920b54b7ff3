"""MOON (Li, He, Song, CVPR 2021, "Model-Contrastive Federated Learning").

The network (Sec. 3.2 of the paper) has three parts: a base encoder, a projection head (a
2-layer MLP, d -> d -> ``moon-projection-dim``, ReLU between) and an output layer on top of the
projection. R_w(x), the output of the projection head, is the representation compared across
models. Client i in round t receives the global model w^t and minimises, per mini-batch,

    l = CE(F_w(x), y) + mu * l_con,
    l_con = -log( exp(sim(z, z_glob)/T) / (exp(sim(z, z_glob)/T) + exp(sim(z, z_prev)/T)) ),

with z = R_w(x) (the model being trained, initialised to w^t), z_glob = R_{w^t}(x) (the global
model it received, frozen), z_prev = R_{w_i^{t-1}}(x) (the client's own model after its previous
local training, frozen, kept in ``context.state``) and sim the cosine similarity; l_con is
averaged over the batch. The server is FedAvg (Flower's ``FedAvg``).

Choices, each as in the authors' code (github.com/QinbinLi/MOON, ``train_net_fedcon``):

* The projection head and the output layer are part of the global model and averaged with the
  rest. flowerbed builds them here on top of the registry model's ``features`` (its own head is
  replaced by ``Linear(projection-dim, classes)``), so the model registry is untouched; the
  ``StrategySpec.model_builder`` hook makes the ServerApp build, evaluate and save this model.
  The model is still a ``Classifier``: ``features`` = encoder + projection head (R_w), ``head``
  = the output layer, so centralized and client evaluation are the usual ``head(features(x))``.
* Before the client's first local training there is no previous model: l_con then has only the
  positive pair, i.e. l_con = -log(1) = 0, and the step is FedAvg's (the reference keeps an empty
  model pool in the first round). Under partial participation z_prev comes from the client's most
  recent participation.
* The global and the previous model compute their representations in eval mode, without
  gradients.

Run-config keys: ``moon-mu`` (1.0; the paper uses 5 on CIFAR-10 and 1 on CIFAR-100 and
Tiny-ImageNet, the FL/KD point-cloud benchmark uses 1), ``moon-temperature`` (0.5),
``moon-projection-dim`` (256).
"""

from __future__ import annotations

import copy
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, Message
from torch import Tensor, nn

from ..core.device import device_of
from ..models import Classifier, build_model
from ..models.classifier import feature_width
from ..settings import RunConfig, Setting
from ..training.local_client import LocalClient
from .common import StrategySpec
from .fedavg import build_fedavg

STATE_KEY = "moon-previous-model"


SETTINGS = (
    Setting(
        "moon-mu",
        1.0,
        "MOON: weight mu of the model-contrastive loss (paper: 5 on CIFAR-10, 1 on CIFAR-100)",
        low=0,
    ),
    Setting(
        "moon-temperature",
        0.5,
        "MOON: temperature T of the contrastive loss",
        low=0,
        low_open=True,
    ),
    Setting(
        "moon-projection-dim",
        256,
        "MOON: output width of the projection head (the output layer sits on it)",
        low=1,
    ),
)


# --- the network -----------------------------------------------------------------------------
def with_projection_head(
    base: Classifier, input_shape: tuple[int, ...], num_classes: int, projection_dim: int
) -> Classifier:
    """encoder (``base.features``) -> projection MLP -> output layer, as a ``Classifier``."""
    width = feature_width(base, input_shape)
    projection = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, projection_dim))
    features = nn.Sequential(OrderedDict(encoder=base.features, projection=projection))
    return Classifier(features, nn.Linear(projection_dim, num_classes))


def moon_model(config: RunConfig, input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    """The registry model ``config.model`` with MOON's projection head and output layer."""
    base = build_model(config.model, input_shape, num_classes, config=config)
    model = with_projection_head(base, input_shape, num_classes, config.moon_projection_dim)
    return model.to(device_of(base))  # the new head is built on the CPU


# --- the client step -------------------------------------------------------------------------
def model_contrastive_loss(
    z: Tensor, z_glob: Tensor, z_prev: Tensor | None, temperature: float
) -> Tensor:
    """l_con of the paper (Eq. 3), averaged over the batch.

    Written as a cross-entropy whose correct class is the positive pair: logits
    [sim(z, z_glob), sim(z, z_prev)] / T, target 0. Without ``z_prev`` only the positive
    logit remains and l_con = 0. (No library ships this loss.)
    """
    similarities = [F.cosine_similarity(z, z_glob, dim=-1)]
    if z_prev is not None:
        similarities.append(F.cosine_similarity(z, z_prev, dim=-1))
    logits = torch.stack(similarities, dim=1) / temperature
    target = torch.zeros(len(z), dtype=torch.long, device=z.device)
    return F.cross_entropy(logits, target)


def frozen(model: nn.Module) -> nn.Module:
    """An eval-mode copy without gradients (the global or previous model)."""
    model = copy.deepcopy(model).eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model


def moon_loss(
    global_model: nn.Module,
    previous: nn.Module | None,
    mu: float,
    temperature: float,
    contrastive: list[float],
):
    """``loss_fn`` for ``train_local``: CE + mu * l_con; records each batch's l_con."""

    def loss_fn(model: Classifier, x: Tensor, y: Tensor) -> Tensor:
        z = model.features(x)
        ce = F.cross_entropy(model.head(z), y)
        with torch.no_grad():
            z_glob = global_model.features(x)
            z_prev = previous.features(x) if previous is not None else None
        l_con = model_contrastive_loss(z, z_glob, z_prev, temperature)
        contrastive.append(l_con.item())
        return ce + mu * l_con

    return loss_fn


def received_model(client: LocalClient, arrays: ArrayRecord) -> Classifier:
    model = moon_model(client.config, client.data.input_shape, client.data.num_classes)
    model.load_state_dict(arrays.to_torch_state_dict())
    return model


def train_moon(client: LocalClient, msg: Message) -> Message:
    mu, temperature = client.config.moon_mu, client.config.moon_temperature
    model = received_model(client, msg.content.array_records["arrays"])
    global_model = frozen(model)
    state = client.context.state
    previous = frozen(received_model(client, state[STATE_KEY])) if STATE_KEY in state else None
    contrastive: list[float] = []
    result = client.train(
        model,
        client.server_round(msg),
        loss_fn=moon_loss(global_model, previous, mu, temperature, contrastive),
    )
    state[STATE_KEY] = ArrayRecord(model.state_dict())
    mean_contrastive = float(np.mean(contrastive)) if contrastive else float("nan")
    return client.train_reply(msg, model, result, **{"contrastive-loss": mean_contrastive})


def evaluate_moon(client: LocalClient, msg: Message) -> Message:
    """The global model (encoder + projection + output layer) on the local test split."""
    return client.evaluate_reply(msg, received_model(client, msg.content.array_records["arrays"]))


SPEC = StrategySpec(
    name="moon",
    summary="FedAvg; clients add mu·l_con, a contrastive loss (cosine similarity, temperature T)"
    " pulling the projected representation toward the global model's and away from their"
    " previous local model's (kept in `context.state`); the model gets a 2-layer projection"
    " head with the output layer on top (keys `moon-mu`, `moon-temperature`, `moon-"
    "projection-dim`)",
    paper="Li, He, Song, CVPR 2021",
    build_server=build_fedavg,  # the server is FedAvg's
    client_train=train_moon,
    client_evaluate=evaluate_moon,
    settings=SETTINGS,
    model_builder=moon_model,
    exchanged="the model's weights (projection head included), both ways, every round; each"
    " client's previous model stays on the client",
)
