"""Shared loss terms and step arithmetic (``flowerbed.training.terms``) by hand."""

import pytest
import torch

from flowerbed.catalog import parse_run_config
from flowerbed.settings import ConfigError
from flowerbed.training.loops import train_local
from flowerbed.training.terms import effective_steps, proximal_term, require_sgd


def test_proximal_term_by_hand():
    layer = torch.nn.Linear(2, 1)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0]]))
        layer.bias.fill_(0.5)
    anchor = [torch.tensor([[0.0, 1.0]]), torch.tensor([1.5])]
    # (mu / 2) * (1^2 + 1^2 + (-1)^2) with mu = 0.4
    assert proximal_term(anchor, 0.4)(layer).item() == pytest.approx(0.2 * 3)
    assert proximal_term(anchor, 0.0)(layer).item() == 0.0


def test_require_sgd_names_the_strategy_and_the_choice():
    require_sgd(parse_run_config({"optimizer": "sgd"}), "fednova")
    with pytest.raises(
        ConfigError, match="strategy 'scaffold' .* needs optimizer='sgd', got 'adam'"
    ):
        require_sgd(parse_run_config({"optimizer": "adam"}), "scaffold")


def test_effective_steps_closed_forms_by_hand():
    assert effective_steps(5) == 5.0
    # momentum 0.5, 3 steps: [3 - 0.5 (1 - 0.125) / 0.5] / 0.5 = 4.25
    assert effective_steps(3, momentum=0.5) == pytest.approx(4.25)
    # proximal eta*mu = 0.1, 3 steps: 1 -> 1.9 -> 2.71 = [1 - 0.9^3] / 0.1
    assert effective_steps(3, lr_mu=0.1) == pytest.approx(2.71)
    rho, tau = 0.9, 17
    assert effective_steps(tau, momentum=rho) == pytest.approx(
        (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)
    )
    with pytest.raises(ValueError):
        effective_steps(0)


@pytest.mark.parametrize("momentum,mu", [(0.0, 0.0), (0.9, 0.0), (0.0, 0.5), (0.7, 0.3)])
def test_effective_steps_match_pytorch_sgd_on_a_constant_gradient(momentum, mu):
    """x - y = eta * a * g after tau real SGD steps whose loss gradient is the constant g."""
    lr, tau = 0.1, 7
    g = torch.tensor([1.0, -2.0, 0.5])
    layer = torch.nn.Linear(3, 1, bias=False)
    x = layer.weight.detach().clone()

    def linear_loss(model, xb, yb):
        return (model.weight * g).sum()

    def proximal(model):
        return 0.5 * mu * (model.weight - x).pow(2).sum()

    result = train_local(
        layer,
        torch.zeros(tau, 1),
        torch.zeros(tau, dtype=torch.long),
        epochs=1,
        batch_size=1,
        optimizer=torch.optim.SGD(layer.parameters(), lr=lr, momentum=momentum),
        generator=torch.Generator().manual_seed(0),
        loss_fn=linear_loss,
        extra_loss=proximal if mu else None,
    )
    assert result.num_steps == tau
    a = effective_steps(tau, momentum, lr * mu)
    torch.testing.assert_close(x - layer.weight.detach(), lr * a * g.unsqueeze(0))
