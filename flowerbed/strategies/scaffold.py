"""SCAFFOLD, option II (Karimireddy et al., ICML 2020, "SCAFFOLD: Stochastic Controlled
Averaging for Federated Learning"), Algorithm 1.

State: the server's control variate c; each client's c_i, kept in the client's
``context.state`` across rounds (zero before its first round). Both cover the trainable
parameters only.

Client i, sent (x, c): from y = x, K local steps

    y <- y - eta (g_i(y) + c - c_i)                 (the gradient is corrected after backward)
    c_i+ = c_i - c + (x - y) / (K eta)               (option II)

it stores c_i+ and replies Delta y_i = y - x and Delta c_i = c_i+ - c_i (packed in one
ArrayRecord: parameter names for Delta y, ``scaffold-dc/<name>`` for Delta c; buffers as
trained). Server, over the clients S that replied, N = number of connected clients:

    x <- x + eta_g * (1/|S|) sum_i Delta y_i
    c <- c + (|S|/N) * (1/|S|) sum_i Delta c_i      (correct under partial participation)

eta_g is run-config ``scaffold-server-learning-rate``; means are uniform as in the paper.
Buffers (batch-norm statistics) are not control-varied: they take the FedAvg value.

The paper's local steps are plain SGD; flowerbed's client runs the run's SGD with
``momentum`` rho on the corrected gradients. With rho > 0 the K of option II becomes the
effective step count a (``training.terms.effective_steps``, FedNova's a_i: x - y = eta a g for a constant
gradient g), so c_i+ still estimates the client's mean gradient; with rho = 0, a = K and the
rule is exactly the paper's.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from ..settings import RunConfig, Setting
from ..training.local_client import LocalClient
from ..training.terms import effective_steps, require_sgd
from ..trust.reply_checks import Schema, schema_of
from .common import ParameterRuleStrategy, StrategySpec, mean_of_replies, trainable_keys

C_KEY = "scaffold-c"  # the server's c, in training messages
CI_KEY = "scaffold-ci"  # the client's c_i, in context.state
DC_PREFIX = "scaffold-dc/"  # Delta c_i entries of a reply
SETTINGS = (
    Setting(
        "scaffold-server-learning-rate",
        1.0,
        "SCAFFOLD: server learning rate eta_g",
        low=0,
        low_open=True,
    ),
)


def train_scaffold(client: LocalClient, msg: Message) -> Message:
    """Corrected local SGD; update and store c_i; reply (Delta y, Delta c, buffers)."""
    model = client.model_from(msg)
    x = {k: p.detach().clone() for k, p in model.named_parameters()}
    c = client.tensors(msg.content[C_KEY])
    state = client.context.state
    if CI_KEY in state:
        c_i = client.tensors(state[CI_KEY])
    else:
        c_i = {k: torch.zeros_like(v) for k, v in x.items()}
    correction = {k: c[k] - c_i[k] for k in x}

    def correct(model: torch.nn.Module) -> None:
        for name, p in model.named_parameters():
            if p.grad is not None:
                p.grad.add_(correction[name])

    result = client.train(model, client.server_round(msg), after_backward=correct)
    steps = effective_steps(result.num_steps, client.config.momentum)  # K for plain SGD
    y = model.state_dict()
    c_plus = {k: c_i[k] - c[k] + (x[k] - y[k]) / (steps * client.config.learning_rate) for k in x}
    state[CI_KEY] = ArrayRecord(c_plus)
    update = {k: (y[k] - x[k] if k in x else y[k]) for k in y}
    update.update({DC_PREFIX + k: c_plus[k] - c_i[k] for k in x})
    reply = client.train_reply(msg, model, result)
    reply.content["arrays"] = ArrayRecord(update)
    return reply


class Scaffold(ParameterRuleStrategy):
    """Server half of SCAFFOLD (see the module docstring for the rule)."""

    def __init__(self, *, trainable: Iterable[str], server_learning_rate: float = 1.0, **kwargs):
        super().__init__(trainable=trainable, **kwargs)
        self.server_learning_rate = server_learning_rate
        self.c: dict[str, np.ndarray] | None = None

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        messages = list(super().configure_train(server_round, arrays, config, grid))
        if self.c is None:
            self.c = {k: np.zeros_like(v) for k, v in self.current.items() if k in self.trainable}
        c_record = ArrayRecord({k: Array(v) for k, v in self.c.items()})
        for message in messages:
            message.content[C_KEY] = c_record
        return messages

    def update_parameters(self, contents, params):
        mean = mean_of_replies(contents, params + [DC_PREFIX + k for k in params])
        share = len(contents) / max(self.num_clients, len(contents))  # |S| / N
        self.c = {k: (v + share * mean[DC_PREFIX + k]).astype(v.dtype) for k, v in self.c.items()}
        return {k: self.current[k] + self.server_learning_rate * mean[k] for k in params}


def scaffold_reply(config: RunConfig):
    """A SCAFFOLD reply holds the model's entries (updates, buffers) and one Delta c_i entry
    shaped like each entry of the c the server sent."""

    def schema(sent: RecordDict) -> Schema:
        arrays = schema_of(sent.array_records["arrays"])
        deltas = schema_of(sent.array_records[C_KEY])
        return {"arrays": {**arrays, **{DC_PREFIX + k: v for k, v in deltas.items()}}}

    return schema


def build_scaffold(config: RunConfig, **kwargs) -> Scaffold:
    require_sgd(config, "scaffold")
    return Scaffold(
        trainable=trainable_keys(config),
        server_learning_rate=config.scaffold_server_learning_rate,
        **kwargs,
    )


SPEC = StrategySpec(
    name="scaffold",
    summary="option II control variates: local steps corrected by (c − c_i), c_i kept in"
    " `context.state`, c_i⁺ = c_i − c + (x − y)/(K η); server x ← x + η_g mean Δy, c ← c +"
    " (|S|/N) mean Δc (trainable parameters; batch-norm statistics averaged). With momentum"
    " ρ the client's K is FedNova's effective step count (= K for ρ = 0) (key `scaffold-"
    "server-learning-rate`; needs `optimizer='sgd'`)",
    paper="Karimireddy et al., ICML 2020",
    build_server=build_scaffold,
    client_train=train_scaffold,
    settings=SETTINGS,
    replies_model=False,
    reply_arrays=scaffold_reply,
    exchanged="down: the global model and the server's control variate c; up: the update"
    " Δy_i and the control-variate delta Δc_i, every round (c_i stays on the client)",
)
