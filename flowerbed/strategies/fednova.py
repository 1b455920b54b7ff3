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

(``training.terms.effective_steps`` runs the recursion that covers both together; it reduces to each closed
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

from ..settings import RunConfig, Setting
from ..training.local_client import LocalClient
from ..training.terms import effective_steps, proximal_term, require_sgd
from .common import (
    ParameterRuleStrategy,
    StrategySpec,
    mean_of_replies,
    sample_weights,
    trainable_keys,
)

A_KEY = "fednova-a"
SETTINGS = (
    Setting(
        "fednova-proximal-mu",
        0.0,
        "FedNova: proximal term (mu/2)‖w − w_global‖² in the client loss (FedNova on FedProx;"
        " a_i accounts for it)",
        low=0,
    ),
)


def train_fednova(client: LocalClient, msg: Message) -> Message:
    """Local SGD from x; reply d_i = (x - y_i) / a_i (trainable), buffers as trained, a_i."""
    model = client.model_from(msg)
    mu = client.config.fednova_proximal_mu
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
    require_sgd(config, "fednova")
    return FedNova(trainable=trainable_keys(config), **kwargs)


SPEC = StrategySpec(
    name="fednova",
    summary="normalised averaging: client i reports d_i = (x − y_i)/a_i and a_i for the SGD it ran"
    " (a_i = τ_i; with momentum ρ: [τ_i − ρ(1 − ρ^τ_i)/(1 − ρ)]/(1 − ρ); with a proximal"
    " term a ← a(1 − ημ) + 1 per step); server x ← x − τ_eff Σ p_i d_i, τ_eff = Σ p_i a_i,"
    " p_i ∝ n_i (keys `fednova-proximal-mu`; use with `local-epochs-max`; needs"
    " `optimizer='sgd'`)",
    paper="Wang et al., NeurIPS 2020",
    build_server=build_fednova,
    client_train=train_fednova,
    settings=SETTINGS,
    replies_model=False,
    exchanged="down: the global model; up: the normalised update (x - y_i)/a_i and a_i,"
    " every round",
)
