"""Differential privacy for FL rounds: Flower's wrappers and mods chosen by run-config keys, and
the privacy spent (epsilon) in every history row. docs/privacy.md states the guarantees.

Modes (run-config ``dp``), through Flower's own code (``flwr.serverapp.strategy``,
``flwr.clientapp.mod``) except adaptive clipping, whose Flower classes flowerbed subclasses and
corrects (``adaptive_clipping``):

* ``central-server-fixed`` / ``central-server-adaptive``: the server clips every client's
  update (reply minus the global model sent) to the norm C and adds Gaussian noise of standard
  deviation z C / n to the mean of the n sampled clients' clipped updates
  (``DifferentialPrivacyServerSideFixedClipping``, ``adaptive_clipping.AdaptiveClippingServerSide``);
* ``central-client-fixed`` / ``central-client-adaptive``: the same, with the clients clipping
  (``DifferentialPrivacyClientSideFixedClipping`` and ``adaptive_clipping.AdaptiveClippingClientSide``
  on the server; the client mods ``fixedclipping_mod`` / ``adaptive_clipping.adaptive_clipping_mod``,
  which read C from the training message);
* ``local``: every client clips its own update to C and adds noise of standard deviation z C
  to it before it leaves the node (``LocalDpMod``); the server sees only noisy updates.

Adaptive clipping (Andrew et al., "Differentially Private Learning with Adaptive Clipping",
NeurIPS 2021, Algorithm 1) starts from C = ``dp-clipping-norm``; after every round it sets
C <- C exp(-eta (b~ - gamma)) from b~, the noised fraction of the round's updates whose norm was
at most C (noise of standard deviation ``dp-clipped-count-stddev`` on the count, Flower's
default n/20 when 0; eta = 0.2, Flower's default), so that C moves toward the gamma-quantile of
the update norms, gamma = 1 - ``dp-clipped-quantile`` (the share of updates C aims to clip).
The round's noise is scaled by the C its updates were clipped with. Flower 1.42's adaptive
classes count the clipped updates instead (C moves away from the quantile) and scale the noise
by the updated C (below calibration when C shrinks): ``adaptive_clipping``'s docstring says
how, and which of their steps flowerbed replaces. The noise multiplier z the user asks for is
split between the update (z_update, with z^-2 = z_update^-2 + (2 sigma_count)^-2, Flower's
``compute_adaptive_noise_params``) and the count, so that the pair is as private as one
Gaussian release with multiplier z (the paper's Theorem 1): z is what is accounted.

Wiring. The server half is ``wrap``, called by FL rounds' ``check`` when the strategy is built:
``PrivateRounds(Flower's DP wrapper(EqualWeights(algorithm's strategy)))`` for central modes,
``PrivateRounds(algorithm's strategy)`` for local DP. ``EqualWeights`` sets every reply's
``num-examples`` to 1 before the mean, because the noise z C / n is calibrated to the
unweighted mean of n clipped updates: a sample-weighted mean moves by up to 2 C n_i / sum n_j
when client i changes, more than 2 C / n for a client with more data than the average.
``PrivateRounds`` does the accounting: it counts the releases (a round whose training messages
went out counts, even if a failed reply then makes Flower's wrapper skip the aggregate: an
upper bound), computes epsilon, stops the run before a round that would exceed
``dp-epsilon-budget``, aggregates only rounds in which every sampled client replied (the
noise is calibrated for n), and draws the server's noise, and with ``fraction-train`` < 1 the
client sample, from the operating system's entropy rather than from the run's seed, which
every client knows (a guarantee cannot rest on noise anyone can recompute). The client half is
the mod ``privacy_mod`` on the ClientApp's ``train`` handler: it runs Flower's mod of the run's
mode and passes every other run through.

Composition. Central DP needs a server rule that is the mean of the replied models, Flower's
``FedAvg.aggregate_train`` as is (the check Flower's own accountant makes): the noise is added
to the strategy's output, so a rule that transforms the mean (server optimisers, whose state
also keeps un-noised means), selects (Krum, Bulyan) or takes order statistics (median, trimmed
mean) would not be protected by noise calibrated to a mean. Local DP protects the reply
itself, so every strategy whose reply is exactly the model composes with it (the server rule
is post-processing). Neither composes with strategies whose reply is no model or carries more
records (FedNova, SCAFFOLD, QFedFisher), with protocols without FL rounds, or with a model
holding integer entries (batch norm's counter), which Flower's clipping cannot scale.

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
own class, and the adaptive wrappers and local DP have none.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp.mod import LocalDpMod, fixedclipping_mod
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
    Strategy,
)

from ..client_state import RECORD
from ..runtime.outcome import RunFailed
from ..runtime.reply_checks import model_like_sent
from ..settings import ConfigError, RunConfig, Setting
from .adaptive_clipping import (
    AdaptiveClippingClientSide,
    AdaptiveClippingServerSide,
    adaptive_clipping_mod,
)

NONE = "none"
SERVER_FIXED, SERVER_ADAPTIVE = "central-server-fixed", "central-server-adaptive"
CLIENT_FIXED, CLIENT_ADAPTIVE = "central-client-fixed", "central-client-adaptive"
LOCAL = "local"
MODES = (NONE, SERVER_FIXED, SERVER_ADAPTIVE, CLIENT_FIXED, CLIENT_ADAPTIVE, LOCAL)
CENTRAL = (SERVER_FIXED, SERVER_ADAPTIVE, CLIENT_FIXED, CLIENT_ADAPTIVE)
ADAPTIVE = (SERVER_ADAPTIVE, CLIENT_ADAPTIVE)
STATE_KEY = "flowerbed-dp"  # the checkpoint's entry for the accounting (never an attribute name)
EPSILON = "dp_epsilon"  # the history column
# adaptive clipping's history columns: the C the round's updates were clipped with (round 0: the
# initial C), and the noised fraction of them left unclipped (rows of rounds that released it)
CLIPPING_NORM, UNCLIPPED_FRACTION = "dp_clipping_norm", "dp_unclipped_fraction"


def _check_noise(value: float, config: RunConfig) -> str | None:
    if value == 0 and config.dp != NONE:
        return (
            f"dp-noise-multiplier=0.0 with dp={config.dp!r}: without noise there is no privacy"
            " (epsilon is infinite); set dp-noise-multiplier > 0, or dp='none'"
        )
    return None


SETTINGS = (
    Setting(
        "dp",
        NONE,
        "differential privacy of FL rounds' model updates (Flower's wrappers and mods;"
        " guarantees in docs/privacy.md): `none`, `central-server-fixed`,"
        " `central-server-adaptive`, `central-client-fixed`, `central-client-adaptive`,"
        " `local`; the history's `dp_epsilon` is the privacy spent",
        choices=MODES,
    ),
    Setting(
        "dp-noise-multiplier",
        1.0,
        "z of `dp`: Gaussian noise of standard deviation z C on the sum of the clipped updates"
        " (central) or on each client's update (local); for adaptive clipping the effective z"
        " of update and count together",
        low=0,
        check=_check_noise,
    ),
    Setting(
        "dp-clipping-norm",
        1.0,
        "C of `dp`: the L2 norm every client's update is clipped to (the initial norm with"
        " adaptive clipping)",
        low=0,
        low_open=True,
    ),
    Setting(
        "dp-clipped-quantile",
        0.5,
        "adaptive clipping: the share of updates the clipping norm aims to clip",
        low=0,
        high=1,
    ),
    Setting(
        "dp-clipped-count-stddev",
        0.0,
        "adaptive clipping: standard deviation of the noise on the count of clipped updates;"
        " 0 = Flower's default, n/20 for n sampled clients (Andrew et al.)",
        low=0,
    ),
    Setting(
        "dp-delta",
        1e-5,
        "delta at which `dp_epsilon` is reported; keep it well below 1/(number of clients)",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
    ),
    Setting(
        "dp-epsilon-budget",
        0.0,
        "stop the run cleanly before a round that would bring `dp_epsilon` above this; 0 = no"
        " budget",
        low=0,
    ),
)


# --- the run config ---------------------------------------------------------------------------


def check_run_config(config: RunConfig, strategies: Mapping[str, Any]) -> None:
    """What can be refused before any data is loaded: ``dp`` on a protocol without FL rounds
    or on a strategy whose training reply is not exactly the model (``strategies``: the FL
    strategies' specs by name)."""
    if config.dp == NONE:
        return
    spec = strategies.get(config.strategy)
    if spec is None:
        valid = ", ".join(strategies)
        raise ConfigError(
            f"dp={config.dp!r} privatises the model updates clients reply to FL rounds;"
            f" strategy={config.strategy!r} is not made of FL rounds (valid strategies: {valid})"
        )
    if not spec.replies_model or spec.reply_arrays(config) is not model_like_sent:
        raise ConfigError(
            f"dp={config.dp!r} clips and noises a reply that is exactly the client's model;"
            f" strategy={config.strategy!r} replies something else (FedNova a normalised"
            " direction, SCAFFOLD control-variate deltas too, QFedFisher Fisher values too),"
            " which Flower's DP wrappers and mods would leave un-noised or reject"
        )


# --- accounting -------------------------------------------------------------------------------


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


# --- the server half --------------------------------------------------------------------------


class BudgetSpent(Exception):
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


def avoid_zero_update(content: RecordDict, sent: ArrayRecord) -> bool:
    """Flower 1.41's clipping divides by the update's norm (``clip_inputs_inplace``:
    ``clipping_norm / input_norm``), so a reply equal to the model it was sent (a client whose
    training did not move it, e.g. saturated on one class) raises ZeroDivisionError. Such a
    reply gets one unit in the last place added to one element of its first floating-point
    entry: an update of norm about 1e-8 that no mean or noise can tell from zero, computed from
    the reply alone (so the clipping after it still bounds the sensitivity). Returns whether it
    changed ``content``."""
    names = list(content.array_records)
    if len(names) != 1:
        return False  # Flower's wrappers and mods refuse such replies themselves
    record = content[names[0]]
    values = {key: array.numpy() for key, array in record.items()}
    if set(values) != set(sent.keys()) or any(
        np.any(value != sent[key].numpy()) for key, value in values.items()
    ):
        return False
    for key, value in values.items():
        if np.issubdtype(value.dtype, np.floating) and value.size:
            nudged = value.copy()
            flat = nudged.reshape(-1)
            flat[0] = np.nextafter(flat[0], np.inf, dtype=value.dtype)
            values[key] = nudged
            content[names[0]] = ArrayRecord({k: Array(v) for k, v in values.items()})
            return True
    return False


@contextmanager
def fresh_entropy() -> Iterator[None]:
    """NumPy's global generator (Flower's wrappers and mods draw their noise from it) seeded
    from the operating system's entropy for the block, then put back as it was: the noise is
    no function of the run's seed, and nothing else the seed decides changes."""
    state = np.random.get_state()
    np.random.seed()
    try:
        yield
    finally:
        np.random.set_state(state)


class Delegating(Strategy):
    """A strategy that hands every step to ``strategy``; subclasses change the steps they
    must (Flower's ``Strategy`` has no such base)."""

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy

    def configure_train(self, server_round, arrays, config, grid):
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(self, server_round, arrays, config, grid):
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round, replies):
        return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        self.strategy.summary()


class EqualWeights(Delegating):
    """``strategy`` with every training reply's weight (``num-examples``) set to 1 before it
    aggregates: the unweighted mean the central noise is calibrated for (module docstring).
    The history keeps the replies' true numbers (the grid recorded them first)."""

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        replies = list(replies)
        key = self.strategy.weighted_by_key
        for reply in replies:
            if not reply.has_error():
                for record in reply.content.metric_records.values():
                    if key in record:
                        record[key] = 1
        return self.strategy.aggregate_train(server_round, replies)

    def summary(self) -> None:
        log(INFO, "\t├──> every client weighs 1 in the mean (central differential privacy)")
        self.strategy.summary()


class PrivateRounds(Delegating):
    """The accounting around Flower's DP wrapper (central) or the algorithm's strategy
    (local): releases counted, epsilon, the budget, complete rounds only, fresh entropy."""

    def __init__(self, strategy: Strategy, plan: Plan) -> None:
        super().__init__(strategy)
        self.plan = plan
        self.releases = 0  # central: rounds whose training messages went out
        self.client_releases: dict[int, int] = {}  # local: partition id -> rounds sampled in
        self.unattributed = 0  # local: rounds with a sampled node of unknown partition
        self.sent = 0  # training messages of the round in progress
        self.sent_arrays = ArrayRecord()  # the global model they carried
        # adaptive clipping, one entry per round whose training messages went out: its number,
        # the C its updates were clipped with, the noised unclipped fraction (None: the round
        # aggregated nothing and released no count)
        self.clipping_rounds: list[int] = []
        self.clipping_norms: list[float] = []
        self.unclipped_fractions: list[float | None] = []

    # accounting
    def epsilon(self) -> float:
        """The privacy spent so far (local: the worst client's)."""
        return self.plan.epsilon(self.worst_releases())

    def worst_releases(self) -> int:
        if self.plan.mode != LOCAL:
            return self.releases
        return max(self.client_releases.values(), default=0) + self.unattributed

    def columns(self) -> dict[str, float]:
        """The history row's privacy columns."""
        row = {EPSILON: self.epsilon()}
        if self.plan.mode in ADAPTIVE:  # read after the round: its C is no longer the next one
            row[CLIPPING_NORM] = float(self.strategy.round_clipping_norm)
            if self.strategy.unclipped_fraction is not None:
                row[UNCLIPPED_FRACTION] = float(self.strategy.unclipped_fraction)
        return row

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (plain data): the counts, the adaptive clipping norm of the
        next round and the rounds' norms and fractions so far."""
        return {
            "releases": self.releases,
            "client_releases": dict(self.client_releases),
            "unattributed": self.unattributed,
            "clipping_norm": float(getattr(self.strategy, "clipping_norm", math.nan)),
            "clipping_rounds": list(self.clipping_rounds),
            "clipping_norms": list(self.clipping_norms),
            "unclipped_fractions": list(self.unclipped_fractions),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        self.releases = int(state["releases"])
        self.client_releases = {int(k): int(v) for k, v in state["client_releases"].items()}
        self.unattributed = int(state["unattributed"])
        if self.plan.mode in ADAPTIVE:
            self.strategy.clipping_norm = float(state["clipping_norm"])
            self.strategy.round_clipping_norm = self.strategy.clipping_norm
            self.strategy.unclipped_fraction = None
            self.clipping_rounds = [int(r) for r in state.get("clipping_rounds", [])]
            self.clipping_norms = [float(c) for c in state.get("clipping_norms", [])]
            self.unclipped_fractions = [
                None if b is None else float(b) for b in state.get("unclipped_fractions", [])
            ]

    def check_resumable(self, where: str) -> None:
        """Refuse a resume whose next round must exceed the budget (one line)."""
        plan = self.plan
        if plan.budget <= 0 or (plan.mode == LOCAL and plan.sampled < plan.population):
            return  # with local DP and sampling the next round may spare the worst client
        spent, after = self.epsilon(), self.plan.epsilon(self.worst_releases() + 1)
        if after > self.plan.budget:
            raise ConfigError(
                f"{where}: the privacy budget is spent: epsilon is {spent:.4g} and the next"
                f" round would bring it to {after:.4g} > dp-epsilon-budget={self.plan.budget:g};"
                " the run cannot go on"
            )

    def record(self, stopped: str = "") -> dict[str, Any]:
        """``privacy.json`` of the run folder: the mechanism, what it was accounted as, the
        privacy spent and, if the budget stopped the run, why."""
        plan = self.plan
        event = (
            "Gaussian(z/2)"
            if plan.sampled == plan.population or plan.mode == LOCAL
            else (f"SampledWithoutReplacement({plan.population}, {plan.sampled}, Gaussian(z/2))")
        )
        record = {
            "dp": plan.mode,
            "noise_multiplier": plan.noise_multiplier,
            "delta": plan.delta,
            "epsilon": self.epsilon(),
            "releases": self.worst_releases(),
            "sampled_per_round": plan.sampled,
            "clients": plan.population,
            "accounting": f"RDP (dp-accounting), client-level replace-one, per round {event}"
            + (", the worst client" if plan.mode == LOCAL else "")
            + (
                " (the update's noise z_update and the count's sigma_count together, Andrew et"
                " al.'s Theorem 1)"
                if plan.mode in ADAPTIVE
                else ""
            ),
            "epsilon_budget": plan.budget,
            "stopped": stopped,
        }
        if plan.mode in ADAPTIVE:
            strategy = self.strategy
            record |= {
                "update_noise_multiplier": float(strategy.noise_multiplier),
                "clipped_count_stddev": float(strategy.clipped_count_stddev),
                "target_unclipped_quantile": float(strategy.target_quantile),
                "clip_norm_lr": float(strategy.clip_norm_lr),
                "rounds": list(self.clipping_rounds),
                "clipping_norm_per_round": list(self.clipping_norms),
                "unclipped_fraction_per_round": list(self.unclipped_fractions),
                "next_clipping_norm": float(strategy.clipping_norm),
            }
        return record

    # the rounds
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        secret_sample = self.plan.mode != LOCAL and self.plan.sampled < self.plan.population
        if secret_sample and hasattr(grid, "seed_sampling"):
            grid.seed_sampling(int.from_bytes(os.urandom(8), "little"))
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self.sent, self.sent_arrays = len(messages), arrays
        if not messages:
            return messages
        if self.plan.mode != LOCAL and len(messages) != self.plan.sampled:
            raise RunFailed(
                f"round {server_round}: {len(messages)} clients were sampled, but the"
                f" differentially private noise is calibrated for {self.plan.sampled} (did nodes"
                " leave the federation?)"
            )
        releases, client_releases, unattributed = self._counted(messages, grid)
        if self.plan.budget > 0:
            worst = releases
            if self.plan.mode == LOCAL:
                worst = max(client_releases.values(), default=0) + unattributed
            after = self.plan.epsilon(worst)
            if after > self.plan.budget:
                raise BudgetSpent(
                    f"privacy budget: stopped before round {server_round}: it would bring"
                    f" dp_epsilon from {self.epsilon():.4g} to {after:.4g} >"
                    f" dp-epsilon-budget={self.plan.budget:g} (delta={self.plan.delta:g})"
                )
        self.releases, self.client_releases, self.unattributed = (
            releases,
            client_releases,
            unattributed,
        )
        return messages

    def _counted(self, messages: list[Message], grid: Grid):
        """The counts once these messages' updates are released."""
        client_releases = dict(self.client_releases)
        unattributed = self.unattributed
        partition_of = getattr(grid, "partition_of", {})
        if self.plan.mode == LOCAL:
            unknown = False
            for message in messages:
                partition = partition_of.get(message.metadata.dst_node_id)
                if partition is None:  # handshake='lazy' before the node's first reply
                    unknown = True
                else:
                    client_releases[partition] = client_releases.get(partition, 0) + 1
            unattributed += int(unknown)
        return self.releases + 1, client_releases, unattributed

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        if self.plan.mode == LOCAL:  # the clients noised their updates: nothing to do here
            return self.strategy.aggregate_train(server_round, replies)
        try:
            return self._aggregate_central(server_round, replies)
        finally:
            self._log_clipping(server_round)

    def _aggregate_central(
        self, server_round: int, replies: list[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        complete = sum(1 for reply in replies if not reply.has_error())
        if complete != self.sent:
            log(
                WARNING,
                "flowerbed: round %d aggregates nothing: %d of %d sampled clients replied,"
                " and the differentially private noise is calibrated for all of them",
                server_round,
                complete,
                self.sent,
            )
            return None, None
        if self.plan.mode == SERVER_FIXED:  # Flower's clipping divides by the norm
            for reply in replies:
                if not reply.has_error() and avoid_zero_update(reply.content, self.sent_arrays):
                    log(
                        WARNING,
                        "flowerbed: node %d's update is exactly zero: one ulp added, as Flower's"
                        " clipping divides by its norm (avoid_zero_update)",
                        reply.metadata.src_node_id,
                    )
        with fresh_entropy():
            return self.strategy.aggregate_train(server_round, replies)

    def _log_clipping(self, server_round: int) -> None:
        """Adaptive clipping: the round's C and noised unclipped fraction, for privacy.json."""
        if self.plan.mode in ADAPTIVE and self.sent:
            self.clipping_rounds.append(server_round)
            self.clipping_norms.append(float(self.strategy.round_clipping_norm))
            fraction = self.strategy.unclipped_fraction
            self.unclipped_fractions.append(None if fraction is None else float(fraction))

    def summary(self) -> None:
        plan = self.plan
        log(
            INFO,
            "\t├──> dp=%r: noise multiplier %g, %d of %d clients a round, delta %g, budget %s",
            plan.mode,
            plan.noise_multiplier,
            plan.sampled,
            plan.population,
            plan.delta,
            f"{plan.budget:g}" if plan.budget > 0 else "none",
        )
        self.strategy.summary()


def averages_models(strategy: Strategy) -> bool:
    """Whether the server rule is Flower's ``FedAvg.aggregate_train`` as is (the mean of the
    replied models): what central DP's noise is calibrated for."""
    return isinstance(strategy, FedAvg) and type(strategy).aggregate_train is FedAvg.aggregate_train


def wrap(strategy: Strategy, config: RunConfig, model_state: Mapping, num_nodes: int):
    """``strategy`` with the run's differential privacy (module docstring), or None for
    ``dp='none'``; ``ConfigError`` (one line) for what cannot compose, before any training.
    ``model_state``: the global model's state dict; ``num_nodes``: the N clients sampled from."""
    if config.dp == NONE:
        return None
    mode, z = config.dp, config.dp_noise_multiplier
    try:
        import dp_accounting  # noqa: F401  (optional: a run with dp set needs it)
    except ImportError:
        raise ConfigError(
            f"dp={mode!r} reports the privacy spent with Google's dp-accounting, which is not"
            " installed: pip install 'flowerbed[privacy]'"
        ) from None
    integer = [key for key, value in model_state.items() if not value.is_floating_point()]
    if integer:
        raise ConfigError(
            f"dp={mode!r}: Flower's DP wrappers and mods scale every entry of the model, and"
            f" model={config.model!r} has integer entries ({', '.join(integer[:2])}: batch"
            " norm's counter); use a model without batch norm (mlp, cnn, logreg)"
        )
    sampled = max(int(num_nodes * config.fraction_train), 1)
    plan = Plan(mode, z, config.dp_delta, config.dp_epsilon_budget, sampled, num_nodes)
    if mode == LOCAL:
        private = PrivateRounds(strategy, plan)
    else:
        if not averages_models(strategy):
            raise ConfigError(
                f"dp={mode!r} adds noise calibrated to the mean of the clipped updates;"
                f" strategy={config.strategy!r} aggregates with"
                f" {type(strategy).__name__}.aggregate_train, not FedAvg's mean, so the noise"
                " would not bound what it releases (docs/privacy.md lists the strategies that"
                " compose; dp='local' composes with any strategy whose reply is the model)"
            )
        private = PrivateRounds(_flower_wrapper(strategy, config, sampled), plan)
    if plan.budget > 0 and (first := plan.epsilon(1)) > plan.budget:
        raise ConfigError(
            f"dp-epsilon-budget={plan.budget:g} is spent by the first round already (epsilon"
            f" {first:.4g} at dp-delta={plan.delta:g} with dp-noise-multiplier={z:g}); raise"
            " the budget or the noise multiplier"
        )
    return private


def _flower_wrapper(strategy: FedAvg, config: RunConfig, sampled: int) -> Strategy:
    mode, z, clip = config.dp, config.dp_noise_multiplier, config.dp_clipping_norm
    inner = EqualWeights(strategy)
    if mode == SERVER_FIXED:
        return DifferentialPrivacyServerSideFixedClipping(inner, z, clip, sampled)
    if mode == CLIENT_FIXED:
        return DifferentialPrivacyClientSideFixedClipping(inner, z, clip, sampled)
    count_stddev = config.dp_clipped_count_stddev or sampled / 20
    if z >= 2 * count_stddev:
        raise ConfigError(
            f"dp-noise-multiplier={z:g} with dp={mode!r}: the noise on the clipped count"
            f" (dp-clipped-count-stddev, here {count_stddev:g}"
            f"{' = n/20 for n = ' + str(sampled) if not config.dp_clipped_count_stddev else ''})"
            " must exceed z/2 for adaptive clipping's split of the noise (Andrew et al.); raise"
            " dp-clipped-count-stddev or lower dp-noise-multiplier"
        )
    # flowerbed's subclasses of Flower's adaptive wrappers: Flower 1.42's count the clipped
    # updates where Andrew et al. count the unclipped ones, and scale the noise by the C updated
    # in the round instead of the C the updates were clipped with (adaptive_clipping)
    wrapper = AdaptiveClippingServerSide if mode == SERVER_ADAPTIVE else AdaptiveClippingClientSide
    return wrapper(
        inner,
        z,
        sampled,
        initial_clipping_norm=clip,
        target_clipped_quantile=config.dp_clipped_quantile,
        clipped_count_stddev=count_stddev,
    )


# --- the client half --------------------------------------------------------------------------


def local_dp_mod(run_config: Mapping[str, Any]) -> LocalDpMod:
    """Flower's ``LocalDpMod`` adding noise of standard deviation z C: it computes its standard
    deviation as sensitivity x sqrt(2 ln(1.25/delta)) / epsilon (the classic calibration), so
    sensitivity C and epsilon sqrt(2 ln(1.25/delta)) / z give exactly z C; the accounting is
    ``local_epsilon``'s, not that calibration's."""
    z = float(run_config["dp-noise-multiplier"])
    clip = float(run_config["dp-clipping-norm"])
    delta = float(run_config["dp-delta"])
    return LocalDpMod(clip, clip, math.sqrt(2 * math.log(1.25 / delta)) / z, delta)


def privacy_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """The client half of the run's ``dp`` (module docstring); other runs pass through."""
    mode = context.run_config.get("dp", NONE)
    if mode not in (CLIENT_FIXED, CLIENT_ADAPTIVE, LOCAL):
        return call_next(msg, context)
    if RECORD in msg.content:  # flowerbed's bookkeeping record (client_state, already read):
        del msg.content[RECORD]  # Flower's clipping mods expect the training config alone
    sent = msg.content.array_records.get("arrays", ArrayRecord())

    def train(message: Message, ctxt: Context) -> Message:
        reply = call_next(message, ctxt)
        if not reply.has_error():
            avoid_zero_update(reply.content, sent)
        return reply

    if mode == CLIENT_FIXED:
        return fixedclipping_mod(msg, context, train)
    if mode == CLIENT_ADAPTIVE:  # not Flower's adaptiveclipping_mod, whose bit says "clipped"
        return adaptive_clipping_mod(msg, context, train)

    def train_then_fresh_entropy(message: Message, ctxt: Context) -> Message:
        reply = train(message, ctxt)
        np.random.seed()  # the noise LocalDpMod draws next comes from the OS's entropy
        return reply

    state = np.random.get_state()
    try:
        return local_dp_mod(context.run_config)(msg, context, train_then_fresh_entropy)
    finally:
        np.random.set_state(state)
