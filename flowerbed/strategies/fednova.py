"""FedNova (Wang et al., NeurIPS 2020, "Tackling the Objective Inconsistency Problem in
Heterogeneous Federated Optimization").

Clients that run different numbers of local steps pull FedAvg towards the objectives of the
clients that ran most. FedNova averages *normalised* updates instead and re-applies one
common effective step count.

Client i starts from the global model x, runs tau_i local SGD steps (learning rate eta,
momentum rho = run-config ``momentum``, optional proximal term (mu/2)||y - x||^2 with
mu = ``fednova-proximal-mu``) and ends at y_i. With g the gradient, every step moves the
model by eta times a weighted sum of the gradients seen; a_i = ||a_i||_1 is the total weight:

* plain SGD:                 a_i = tau_i
* SGD with momentum rho:     a_i = [tau_i - rho (1 - rho^tau_i) / (1 - rho)] / (1 - rho)
* proximal SGD (mu > 0):     a_i = [1 - (1 - eta mu)^tau_i] / (eta mu)   (a <- a (1 - eta mu) + 1
                             per step)

(``effective_steps`` runs the recursion that covers both together; it reduces to each closed
form.) The client reports its normalised update d_i = (x - y_i) / a_i and a_i
(metric ``fednova-a``); tau_i is the number of steps it actually ran (``TrainResult``).

Server, with p_i = n_i / sum_{j in S} n_j over the clients S that replied:

    tau_eff = sum_i p_i a_i                      (arithmetic; not the harmonic form of
                                                  Flower's old baseline)
    x <- x - tau_eff * sum_i p_i d_i

on trainable parameters; buffers (batch-norm statistics) take the FedAvg value. With equal
a_i this is exactly FedAvg. FedNova needs different local work to matter: see run-config
``local-epochs-max``.
"""

from __future__ import annotations

from flwr.app import ArrayRecord, Message

from ..client import LocalClient
from ..config import ConfigError, RunConfig
from .common import (
    ParameterRuleStrategy,
    StrategySpec,
    mean_of_replies,
    sample_weights,
    trainable_keys,
)
from .fedprox import proximal_term

A_KEY = "fednova-a"


def effective_steps(num_steps: int, momentum: float = 0.0, lr_mu: float = 0.0) -> float:
    """a_i for ``num_steps`` SGD steps with heavy-ball ``momentum`` and proximal eta*mu.

    Exact for a constant gradient g: x - y = eta * a * g. With m the momentum buffer and u the
    distance travelled (in units of eta*g), each step is m <- rho m + 1 - eta mu u;
    u <- u + m (PyTorch's SGD: the proximal gradient mu (y - x) enters the buffer).
    """
    if num_steps < 1:
        raise ValueError(f"FedNova needs at least one local step, got {num_steps}")
    m = u = 0.0
    for _ in range(num_steps):
        m = momentum * m + 1.0 - lr_mu * u
        u += m
    return u


def check_sgd(config: RunConfig, name: str) -> None:
    if config.optimizer != "sgd":
        raise ConfigError(
            f"strategy {name!r} normalises SGD steps and needs optimizer='sgd', got"
            f" {config.optimizer!r}; valid choices: sgd"
        )


def train_fednova(client: LocalClient, msg: Message) -> Message:
    """Local SGD from x; reply d_i = (x - y_i) / a_i (trainable), buffers as trained, a_i."""
    model = client.model_from(msg)
    mu = client.config.get("fednova-proximal-mu", 0.0)
    start = {k: p.detach().clone() for k, p in model.named_parameters()}
    hooks = {"extra_loss": proximal_term(list(start.values()), mu)} if mu > 0 else {}
    result = client.train(model, client.server_round(msg), **hooks)
    a = effective_steps(result.num_steps, client.config.momentum, client.config.learning_rate * mu)
    update = {k: (start[k] - v) / a if k in start else v for k, v in model.state_dict().items()}
    reply = client.train_reply(msg, model, result, **{A_KEY: a})
    reply.content["arrays"] = ArrayRecord(update)
    return reply


class FedNova(ParameterRuleStrategy):
    """FedAvg with normalised averaging (see the module docstring for the rule)."""

    def update_parameters(self, contents, params):
        p = sample_weights(contents, self.weighted_by_key)
        a = [float(c["metrics"][A_KEY]) for c in contents]
        tau_eff = float(sum(pi * ai for pi, ai in zip(p, a)))
        self.round_metrics = {"fednova-tau-eff": tau_eff}
        d = mean_of_replies(contents, params, weights=p)  # sum_i p_i d_i
        return {k: self.current[k] - tau_eff * d[k] for k in params}


def build_fednova(config: RunConfig, **kwargs) -> FedNova:
    check_sgd(config, "fednova")
    if config.get("fednova-proximal-mu", 0.0) < 0:
        raise ConfigError(
            f"fednova-proximal-mu must be >= 0, got {config.get('fednova-proximal-mu', 0.0)}"
        )
    return FedNova(trainable=trainable_keys(config), **kwargs)


SPEC = StrategySpec(
    name="fednova",
    summary="normalised averaging: clients send (x - y_i)/a_i, server steps tau_eff = sum p_i a_i",
    paper="Wang et al., NeurIPS 2020",
    build_server=build_fednova,
    client_train=train_fednova,
    config_keys=("fednova-proximal-mu", "local-epochs-max"),
)
