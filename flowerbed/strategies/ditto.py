"""Ditto (Li, Hu, Beirami, Smith, ICML 2021, "Ditto: Fair and Robust Federated Learning Through
Personalization").

Two models per client (Algorithm 1 of the paper). In round t client k receives w^t and

1. global update, exactly FedAvg's client step: E epochs of local training of w from w^t on
   F_k; the result w_k^t is sent back and the server averages it as FedAvg does
   (w^{t+1} = sum_k (n_k / n) w_k^t, Flower's ``FedAvg``);
2. personal update: its own model v_k, kept in ``context.state`` between rounds, is trained
   for the same number of epochs on

        F_k(v) + (lambda / 2) * ||v - w^t||^2

   (the regulariser pulls toward the global model *received* this round, w^t, not toward the
   freshly trained w_k^t). v_k never leaves the client.

v_k starts as the first global model the client receives (the reference code starts every v_k
from the initial global model; the two agree under full participation). The regulariser covers
the trainable parameters (as FedProx's; ``training.terms.proximal_term``); batch-norm
statistics of v_k follow v_k's own training. Both updates see the same mini-batch order (the
reference code uses the same batch for both), each with a fresh optimizer of the run's kind;
the code runs the personal update first, which changes nothing, since each local training
is seeded by (seed, partition, round) alone.

Evaluation on the client's local test split reports both models: ``accuracy`` / ``loss`` of the
global model w^t (so the history's client columns are comparable with every other strategy)
and ``personal-accuracy`` / ``personal-loss`` of v_k (a client that has not trained yet reports
the model its v_k would start from, w^t). Run-config key: ``ditto-lambda`` (0.1, as in the FL/KD
point-cloud benchmark).
"""

from __future__ import annotations

from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from torch import nn

from ..settings import Setting
from ..training.local_client import LocalClient
from ..training.loops import evaluate
from ..training.terms import proximal_term
from .common import StrategySpec
from .fedavg import build_fedavg

STATE_KEY = "ditto-personal-model"
SETTINGS = (
    Setting(
        "ditto-lambda",
        0.1,
        "Ditto: weight lambda of (lambda/2)‖v − w_global‖² in the personal model's loss",
        low=0,
    ),
)


def personal_model(client: LocalClient, msg: Message) -> nn.Module:
    """v_k from the client's state, or the received global model if it has none yet."""
    if STATE_KEY not in client.context.state:
        return client.model_from(msg)
    model = client.new_model()
    model.load_state_dict(client.context.state[STATE_KEY].to_torch_state_dict())
    return model


def train_personal(
    client: LocalClient, personal: nn.Module, global_model: nn.Module, server_round: int, lam: float
):
    """E epochs on F_k(v) + (lambda/2)||v - w^t||^2 from v_k; returns the ``TrainResult``."""
    anchor = [p.detach().clone() for p in global_model.parameters()]
    hooks = {"extra_loss": proximal_term(anchor, lam)} if lam > 0 else {}
    return client.train(personal, server_round, **hooks)


def train_ditto(client: LocalClient, msg: Message) -> Message:
    lam = client.config.ditto_lambda
    server_round = client.server_round(msg)
    received = client.model_from(msg)  # w^t, the anchor of the personal update
    personal = personal_model(client, msg)
    personal_result = train_personal(client, personal, received, server_round, lam)
    client.context.state[STATE_KEY] = ArrayRecord(personal.state_dict())

    model = client.model_from(msg)  # the global update: FedAvg's client step
    result = client.train(model, server_round)
    return client.train_reply(
        msg, model, result, **{"personal-train-loss": personal_result.mean_loss}
    )


def evaluate_ditto(client: LocalClient, msg: Message) -> Message:
    """Global model w^t (with the clinical metrics) and personal model v_k on the client's
    local test split."""
    global_metrics = client.evaluation_metrics(client.model_from(msg))
    p_loss, p_accuracy = evaluate(personal_model(client, msg), client.x_test, client.y_test)
    metrics: MetricRecord = client.metrics(
        len(client.y_test),
        **global_metrics,
        **{"personal-loss": p_loss, "personal-accuracy": p_accuracy},
    )
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)


SPEC = StrategySpec(
    name="ditto",
    summary="FedAvg global model plus a personal model per client (in `context.state`), trained on"
    " F_k(v) + (lambda/2)‖v − w_global‖²; evaluation reports `accuracy` (global) and"
    " `personal-accuracy` (key `ditto-lambda`)",
    paper="Li et al., ICML 2021",
    build_server=build_fedavg,  # the server is FedAvg's
    client_train=train_ditto,
    client_evaluate=evaluate_ditto,
    settings=SETTINGS,
    exchanged="the global model's weights, both ways, every round; each client's personal"
    " model stays on the client",
)
