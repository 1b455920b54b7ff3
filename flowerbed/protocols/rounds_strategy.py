"""What Flower's own round loop runs: the algorithm's strategy, with seeded client sampling and,
after a checkpoint, the true round numbers.

Seeded sampling. Flower's strategies sample clients with Python's global ``random``
(``sample_nodes``: ``random.sample(grid.get_node_ids(), k)``), and other threads of Flower's
ServerApp process draw from the same generator (the heartbeat's jitter, every 20 s or so). One
seed at the start of the run therefore does not fix the clients of round 10: that depends on
how many heartbeats fell before it. So before every ``configure_train`` / ``configure_evaluate``
the wrapper asks the grid to reseed ``random`` with ``seed_for(run seed, round, kind)`` when it
next lists the nodes (``RecordingGrid.seed_sampling``), right before Flower's ``random.sample``:
the sample of round t is a function of the seed and t alone.

Resume. Flower's public ``Strategy.start`` always counts rounds from 1. A run resumed after
round r of N calls ``start`` for N - r rounds on ``RoundsStrategy(strategy, seed, done=r)``:
every method is delegated to the real strategy with ``server_round + r``, so the messages
(``server-round``, hence the clients' seeds), the strategy's own round-dependent rules, the
sampling seeds and the history carry the true round numbers. Only Flower's own "[ROUND k/M]"
log lines count from 1; flowerbed's round line shows the true round. ``resumed_evaluate_fn``
does the same for the central evaluation, and skips Flower's call before round 1: the
checkpoint already holds the row of round r.

Stage times (``core.stages``, written only when ``FLOWERBED_STAGE_TIMES`` is set): each
round, from its first training message to the end of its central evaluation (``ROUND``), and
the strategy's aggregations.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from logging import INFO

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from ..core.seeding import seed_for
from ..core.stages import AGGREGATE_EVALUATE, AGGREGATE_TRAIN, ROUND, record, stage
from ..runtime.recording_grid import RecordingGrid
from ..strategies.common import as_arrayrecord

EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]
_TRAIN_SAMPLE, _EVALUATE_SAMPLE = 11, 12  # purposes of seed_for


class RoundsStrategy(Strategy):
    """``strategy`` with seeded sampling, from round ``done + 1`` on (module docstring)."""

    def __init__(self, strategy: Strategy, seed: int, done: int = 0) -> None:
        self.strategy = strategy
        self.seed = seed
        self.done = done
        self.sent_layout: dict = {}  # key -> (shape, dtype) of the global model sent
        self.round_started: float | None = None  # perf_counter at the round's configure_train

    def start(self, *args, evaluate_fn: EvaluateFn | None = None, **kwargs):
        """Flower's own loop, each round timed up to the end of its central evaluation."""
        return super().start(*args, evaluate_fn=self._round_timed(evaluate_fn), **kwargs)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self.round_started = time.perf_counter()
        server_round += self.done
        self._seed_sampling(grid, server_round, _TRAIN_SAMPLE)
        self.sent_layout = {key: (tuple(a.shape), a.dtype) for key, a in arrays.items()}
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        with stage(AGGREGATE_TRAIN, server_round + self.done):
            arrays, metrics = self.strategy.aggregate_train(server_round + self.done, replies)
        return keep_layout(arrays, self.sent_layout), metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        server_round += self.done
        self._seed_sampling(grid, server_round, _EVALUATE_SAMPLE)
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]):
        with stage(AGGREGATE_EVALUATE, server_round + self.done):
            return self.strategy.aggregate_evaluate(server_round + self.done, replies)

    def summary(self) -> None:
        if self.done:
            log(
                INFO,
                "\t├──> %s resumed after round %d (Flower's round numbers below count from 1)",
                type(self.strategy).__name__,
                self.done,
            )
        self.strategy.summary()

    def _round_timed(self, evaluate_fn: EvaluateFn | None) -> EvaluateFn | None:
        """``evaluate_fn`` that then records the round's seconds (``ROUND``) since its
        ``configure_train``; the evaluation before round 1 is no round."""
        if evaluate_fn is None:
            return None

        def timed(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            result = evaluate_fn(server_round, arrays)
            if server_round > 0 and self.round_started is not None:
                seconds = time.perf_counter() - self.round_started
                record(ROUND, seconds, server_round + self.done)
            return result

        return timed

    def _seed_sampling(self, grid: Grid, server_round: int, purpose: int) -> None:
        if isinstance(grid, RecordingGrid):
            grid.seed_sampling(seed_for(self.seed, server_round, purpose))


def keep_layout(
    arrays: ArrayRecord | None, layout: dict[str, tuple[tuple[int, ...], str]]
) -> ArrayRecord | None:
    """The aggregate with the shapes and dtypes of the global model it replaces (integer
    entries rounded): Flower's Krum, MultiKrum, Bulyan and FedTrimmedAvg return every entry as
    float64 and a 0-d entry (batch norm's counter) as shape (1,), and the global model must not
    change type or shape."""
    if arrays is None or all(
        (tuple(arrays[k].shape), arrays[k].dtype) == layout.get(k) for k in arrays
    ):
        return arrays
    values = {}
    for key, array in arrays.items():
        value = array.numpy()
        shape = layout.get(key, (value.shape,))[0]
        values[key] = value.reshape(shape) if value.size == int(np.prod(shape)) else value
    like = {
        key: np.empty(0, dtype=layout.get(key, (None, v.dtype))[1]) for key, v in values.items()
    }
    return as_arrayrecord(values, like=like)


def resumed_evaluate_fn(evaluate_fn: EvaluateFn, done: int) -> EvaluateFn:
    """``evaluate_fn`` with round k as ``k + done``; Flower's call before round 1 is skipped."""

    def shifted(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        return None if server_round == 0 else evaluate_fn(server_round + done, arrays)

    return shifted
