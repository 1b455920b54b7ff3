"""What FL rounds (``fl_rounds.FLRounds``) let a concern add around its strategy: a hook.

A ``RoundsHook`` wraps the algorithm's Flower strategy when FL rounds build it (``wrap``, in
``FLRounds.check``, so that what cannot compose stops the run before any training), adds its
columns to every round's history row (``columns``), keeps its state in the server's checkpoint
under its own key (``STATE_KEY``, ``state``) and gets it back on resume, where it may refuse to
go on (``restore``), and writes what it has to say when the rounds end (``finish``). A hook
ends the rounds cleanly by raising ``StopRounds`` from its strategy before a round: the run
then completes with the rounds it allowed, its status ended early with the exception's
message. ``Delegating`` is the base of a hook's strategy: it hands every step to the strategy
it wraps.

FL rounds know hooks only through this module; ``flowerbed.privacy.server.PrivacyHook``
(run-config ``dp``) is one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.serverapp.strategy import Strategy

from ..runtime.context import RunContext


class StopRounds(Exception):
    """Raised by a hook's strategy before a round: FL rounds end cleanly after the rounds
    already done (the run completes, ended early with this message)."""


class RoundsHook:
    """One concern around FL rounds' strategy; every part does nothing unless overridden."""

    STATE_KEY = ""  # the checkpoint's entry for ``state`` (never a strategy attribute name)

    def wrap(self, strategy: Strategy, run: RunContext) -> Strategy:
        """What Flower's loop runs instead of ``strategy`` (``strategy`` itself when the hook
        has nothing to add to this run); ``ConfigError`` for what cannot compose."""
        return strategy

    def columns(self) -> dict[str, float]:
        """The hook's columns of the history row of the round just evaluated."""
        return {}

    def state(self) -> dict[str, Any] | None:
        """What the checkpoint keeps under ``STATE_KEY`` (plain data), or None for nothing."""
        return None

    def restore(self, state: Mapping[str, Any] | None, where: str) -> None:
        """Take back ``state()`` from a checkpoint (None: it holds none), or refuse to resume
        (``ConfigError`` naming ``where``)."""

    def finish(self, run_dir: Path, stopped: str) -> None:
        """The rounds are over (``stopped``: the ``StopRounds`` message that ended them, or
        empty): write what the hook has to say into ``run_dir``."""


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
