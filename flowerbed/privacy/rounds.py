"""``PrivateRounds``: the accounting around Flower's DP wrapper (central modes) or around the
algorithm's strategy (local DP), the strategy FL rounds run with ``dp`` set.

It counts the releases (a round whose training messages went out counts, even if a failed
reply then makes Flower's wrapper skip the aggregate: an upper bound), computes epsilon
(``accounting``) for every history row (``dp_epsilon``; with adaptive clipping also the round's
C and noised unclipped fraction), stops the run before a round that would exceed
``dp-epsilon-budget`` (``accounting.BudgetSpent``), aggregates only rounds in which every
sampled client replied (the noise is calibrated for n), and draws the server's noise, and with
``fraction-train`` < 1 the client sample, from the operating system's entropy rather than from
the run's seed (``guards.fresh_entropy``). Its counts are what the checkpoint keeps under
``STATE_KEY`` and what ``privacy.json`` reports (``record``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from logging import INFO, WARNING
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from ..protocols.rounds_hook import Delegating
from ..runtime.outcome import RunFailed
from ..settings import ConfigError
from .accounting import BudgetSpent, Plan
from .guards import avoid_zero_update, fresh_entropy
from .modes import ADAPTIVE, LOCAL, SERVER_FIXED

STATE_KEY = "flowerbed-dp"  # the checkpoint's entry for the accounting (never an attribute name)
EPSILON = "dp_epsilon"  # the history column
# adaptive clipping's history columns: the C the round's updates were clipped with (round 0: the
# initial C), and the noised fraction of them left unclipped (rows of rounds that released it)
CLIPPING_NORM, UNCLIPPED_FRACTION = "dp_clipping_norm", "dp_unclipped_fraction"


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
