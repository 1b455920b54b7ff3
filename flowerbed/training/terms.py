"""Loss terms and step arithmetic that several algorithms share.

* ``proximal_term``: (mu / 2) ||w - w_anchor||^2 over the trainable parameters (FedProx's client
  loss, Ditto's personal update, FedNova's optional proximal SGD);
* ``effective_steps``: a_i, the total weight of the gradients in the distance that SGD with
  momentum (and a proximal term) travels in K steps (FedNova's normaliser, SCAFFOLD's K);
* ``require_sgd``: the check of algorithms whose rule assumes SGD steps.
"""

from __future__ import annotations

import torch

from ..settings import ConfigError, RunConfig


def proximal_term(anchor: list[torch.Tensor], mu: float):
    """The loss term (mu / 2) * ||w - w_anchor||^2 over the trainable parameters."""

    def extra_loss(model: torch.nn.Module) -> torch.Tensor:
        squared = sum((w - w0).pow(2).sum() for w, w0 in zip(model.parameters(), anchor))
        return 0.5 * mu * squared

    return extra_loss


def effective_steps(num_steps: int, momentum: float = 0.0, lr_mu: float = 0.0) -> float:
    """a_i for ``num_steps`` SGD steps with heavy-ball ``momentum`` and proximal eta*mu.

    Exact for a constant gradient g: x - y = eta * a * g. With m the momentum buffer and u the
    distance travelled (in units of eta*g), each step is m <- rho m + 1 - eta mu u;
    u <- u + m (PyTorch's SGD: the proximal gradient mu (y - x) enters the buffer).
    Closed forms: a = K (plain SGD); a = [K - rho (1 - rho^K) / (1 - rho)] / (1 - rho)
    (momentum rho); a = [1 - (1 - eta mu)^K] / (eta mu) (proximal, no momentum).
    """
    if num_steps < 1:
        raise ValueError(f"FedNova needs at least one local step, got {num_steps}")
    m = u = 0.0
    for _ in range(num_steps):
        m = momentum * m + 1.0 - lr_mu * u
        u += m
    return u


def require_sgd(config: RunConfig, name: str) -> None:
    """``ConfigError`` unless the clients run SGD (rules that normalise SGD steps)."""
    if config.optimizer != "sgd":
        raise ConfigError(
            f"strategy {name!r} normalises SGD steps and needs optimizer='sgd', got"
            f" {config.optimizer!r}; valid choices: sgd"
        )
