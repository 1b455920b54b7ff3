"""The privacy a run spends, in epsilon at delta, and the run's budget (``Plan``,
``BudgetSpent``).

Accounting (``central_epsilon``, ``local_epsilon``): Google's ``dp-accounting`` (imported only
when a run uses DP), Renyi DP, its default orders and its conversion to (epsilon, delta)
(``compute_epsilon``: Proposition 12 of Canonne, Kamath and Steinke, "The Discrete Gaussian
for Differential Privacy", slightly tighter than the classic eps = RDP(a) + log(1/delta)/(a-1)).
Client-level adjacency, replace-one (one client's data replaced; the number of clients is
public), so the sum of clipped updates has L2 sensitivity 2 C and noise z C is a Gaussian
mechanism with multiplier z/2. Central: per round ``SampledWithoutReplacementDpEvent(N, n,
GaussianDpEvent(z/2))`` (Flower's ``sample_nodes`` draws n of the N connected nodes without
replacement), or ``GaussianDpEvent(z/2)`` when n = N, composed over the rounds. Local: each
client's update is its own release, ``GaussianDpEvent(z/2)`` composed over the rounds the client
was sampled in (no amplification: the server knows whom it sampled); the row reports the worst
client. Flower's ``RdpAccountant`` (``accountant=`` of the fixed-clipping wrappers) is not used:
those wrappers accept it only without sampling, under add-or-remove adjacency and for FedAvg's
own class, and the adaptive wrappers and local DP have none. With adaptive clipping the z
accounted is the one the user asked for, which covers the update's noise and the count's
together (``adaptive_clipping``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..protocols.rounds_hook import StopRounds
from .modes import LOCAL


@functools.lru_cache(maxsize=512)
def central_epsilon(
    noise_multiplier: float, rounds: int, sampled: int, population: int, delta: float
) -> float:
    """Epsilon at ``delta`` after ``rounds`` releases of a sum of clipped updates with noise
    ``noise_multiplier`` x C, ``sampled`` of ``population`` clients drawn without replacement
    each round; replace-one client adjacency (sensitivity 2 C, module docstring)."""
    if rounds == 0:
        return 0.0
    import dp_accounting  # optional: only a run with dp set gets here
    from dp_accounting.rdp import RdpAccountant

    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier / 2)
    event = (
        gaussian
        if sampled == population
        else dp_accounting.SampledWithoutReplacementDpEvent(population, sampled, gaussian)
    )
    accountant = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(event, rounds)
    return float(accountant.get_epsilon(delta))


def local_epsilon(noise_multiplier: float, releases: int, delta: float) -> float:
    """Epsilon at ``delta`` of one client that released ``releases`` updates with local DP:
    each is a Gaussian release of an update clipped to C with noise ``noise_multiplier`` x C,
    sensitivity 2 C (any two data sets of the client), no amplification."""
    return central_epsilon(noise_multiplier, releases, 1, 1, delta)


class BudgetSpent(StopRounds):
    """The next round would exceed ``dp-epsilon-budget``: FL rounds stop cleanly before it."""


@dataclass(frozen=True)
class Plan:
    """What the accounting needs (fixed for the run): mode, z, delta, budget, and the n of N
    clients sampled per round."""

    mode: str
    noise_multiplier: float
    delta: float
    budget: float
    sampled: int
    population: int

    def epsilon(self, releases: int) -> float:
        if self.mode == LOCAL:
            return local_epsilon(self.noise_multiplier, releases, self.delta)
        return central_epsilon(
            self.noise_multiplier, releases, self.sampled, self.population, self.delta
        )
