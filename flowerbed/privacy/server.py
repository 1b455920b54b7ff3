"""The server half of differential privacy: the strategy FL rounds run with ``dp`` set
(``wrap``) and the hook through which they run it (``PrivacyHook``).

``wrap`` is called by FL rounds' ``check`` when the strategy is built (through
``PrivacyHook.wrap``): ``PrivateRounds(Flower's DP wrapper(EqualWeights(algorithm's
strategy)))`` for central modes, ``PrivateRounds(algorithm's strategy)`` for local DP.
``EqualWeights`` sets every reply's ``num-examples`` to 1 before the mean, because the noise
z C / n is calibrated to the unweighted mean of n clipped updates: a sample-weighted mean moves
by up to 2 C n_i / sum n_j when client i changes, more than 2 C / n for a client with more data
than the average. Flower's wrappers: ``DifferentialPrivacyServerSideFixedClipping``,
``DifferentialPrivacyClientSideFixedClipping``, and for adaptive clipping flowerbed's subclasses
of Flower's (``adaptive_clipping``), with the noise multiplier z split between the update
(z_update, with z^-2 = z_update^-2 + (2 sigma_count)^-2, Flower's
``compute_adaptive_noise_params``) and the count. ``PrivacyHook`` gives FL rounds
``PrivateRounds``' history columns, checkpoint state (``rounds.STATE_KEY``), resume check and
``privacy.json``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from logging import INFO
from pathlib import Path
from typing import Any

from flwr.app import Message
from flwr.common.logger import log
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
    Strategy,
)

from ..core.results import write_json
from ..protocols.rounds_hook import Delegating, RoundsHook
from ..runtime.context import RunContext
from ..settings import ConfigError, RunConfig
from .accounting import Plan
from .adaptive_clipping import AdaptiveClippingClientSide, AdaptiveClippingServerSide
from .modes import CLIENT_FIXED, LOCAL, NONE, SERVER_ADAPTIVE, SERVER_FIXED
from .rounds import STATE_KEY, PrivateRounds


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


class PrivacyHook(RoundsHook):
    """Differential privacy (run-config ``dp``) as one of FL rounds' hooks: the strategy
    wrapped in ``PrivateRounds`` (``wrap``), ``dp_epsilon`` in every row, the accounting in the
    checkpoint, ``privacy.json`` at the end; nothing with ``dp='none'``."""

    STATE_KEY = STATE_KEY

    def __init__(self) -> None:
        self.private: PrivateRounds | None = None  # the strategy with `dp`, once wrapped

    def wrap(self, strategy: Strategy, run: RunContext) -> Strategy:
        nodes = len(run.grid.get_node_ids())
        self.private = wrap(strategy, run.config, run.model.state_dict(), nodes)
        return strategy if self.private is None else self.private

    def columns(self) -> dict[str, float]:
        return {} if self.private is None else self.private.columns()

    def state(self) -> dict[str, Any] | None:
        return None if self.private is None else self.private.state()

    def restore(self, state: Mapping[str, Any] | None, where: str) -> None:
        if self.private is not None:
            self.private.restore(state)
            self.private.check_resumable(where)

    def finish(self, run_dir: Path, stopped: str) -> None:
        if self.private is not None:
            write_json(run_dir / "privacy.json", self.private.record(stopped))
