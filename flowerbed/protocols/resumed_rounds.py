"""The rounds after a checkpoint, run by Flower's own loop: a strategy with shifted round numbers.

Flower's public ``Strategy.start`` always counts rounds from 1. A run resumed after round r
of N calls ``start`` on ``ResumedStrategy(strategy, r)`` for N - r rounds: every method is
delegated to the real strategy with ``server_round + r``, so the messages (``server-round``,
hence the clients' seeds), the strategy's own round-dependent rules and the history carry
the true round numbers. Only Flower's own "[ROUND k/M]" log lines count from 1; flowerbed's
round line shows the true round.

``resumed_evaluate_fn`` does the same for the central evaluation, and skips Flower's call
before round 1: the checkpoint already holds the row of round r.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from logging import INFO

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]


class ResumedStrategy(Strategy):
    """``strategy`` from round ``done + 1`` on (see the module docstring)."""

    def __init__(self, strategy: Strategy, done: int) -> None:
        self.strategy = strategy
        self.done = done

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.strategy.configure_train(server_round + self.done, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        return self.strategy.aggregate_train(server_round + self.done, replies)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round + self.done, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]):
        return self.strategy.aggregate_evaluate(server_round + self.done, replies)

    def summary(self) -> None:
        log(
            INFO,
            "\t├──> %s resumed after round %d (Flower's round numbers below count from 1)",
            type(self.strategy).__name__,
            self.done,
        )
        self.strategy.summary()


def resumed_evaluate_fn(evaluate_fn: EvaluateFn, done: int) -> EvaluateFn:
    """``evaluate_fn`` with round k as ``k + done``; Flower's call before round 1 is skipped."""

    def shifted(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        return None if server_round == 0 else evaluate_fn(server_round + done, arrays)

    return shifted
