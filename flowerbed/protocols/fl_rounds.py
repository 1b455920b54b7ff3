"""The FL-rounds phase: N rounds of a Flower strategy, wrapped, not rewritten.

Server half: the algorithm's Flower ``Strategy`` (``StrategySpec.build_server``, built in
``check`` so that its requirements stop the run before any training) runs
``strategy.start`` on the run's recording grid for ``num-server-rounds`` rounds, starting
from the handoff's global arrays (or the run's freshly built global model). After every
round the global model is evaluated on the held-out test set (``central_accuracy``; on a
seeded sample of ``central-test-samples`` of it when it is larger,
``data.splits.sampled_test_split``) and the history row is logged and written, with the
strategy's own metrics of the round (``round_metrics``, e.g. QFedFisher's substituted
fraction) as ``server_<name>``. The final arrays go to ``model.pt`` and to the handoff; the
best round's (highest ``central_accuracy``, the earliest on a tie, round 0 included) go to
``model_best.pt``, with that round and accuracy in ``model_best.json``. "Best" is selected on
the test set, as the point-cloud FL + KD benchmark does for its teachers: an optimistic choice,
never a held-out one. ``best-model-metric`` selects on a clinical metric instead
(``central_auroc``, ...; the one evaluation pass computes them all, ``evaluate_clinical``).

A server without data (``server-data``) evaluates nothing itself: the row's accuracy is the
round's federated evaluation (``federated_accuracy``, the clients' local test splits,
sample-weighted; NaN in round 0), which also selects ``model_best.pt``.

Client half: Flower's default ``train`` and ``evaluate`` messages go to the algorithm's
client step and evaluation (``StrategySpec.client_train`` / ``client_evaluate``).

Checkpoints and resume (run-config ``checkpoint``, ``resume``): after the history row of every
round (round 0 included) the server's state is written (``runtime.checkpoint``), and the
messages carry the run folder so that the clients' mod ``runtime.client_state.keep_client_state``
saves their ``context.state`` (with ``virtual-clients`` too: the only place a virtual client's
state lives between its messages, ``runtime.virtual_clients``). A resumed run (``run.checkpoint``) restores the strategy's
state, the history, the best-round bookkeeping and the random states, and runs the remaining
rounds through Flower's own loop with true round numbers (``rounds_strategy``, which also
seeds every round's client sampling).

Hooks (``rounds_hook.RoundsHook``, given by the catalog, e.g. differential privacy's): ``check``
lets each wrap the strategy, in order, each around what the one before returned; every row
gets each hook's columns, the checkpoint each hook's state under its own key (restored, and
the resume refused if a hook says so, before the rounds go on), and each hook writes what it
has to say when the rounds end. A hook's ``StopRounds`` before a round (differential privacy's
``dp-epsilon-budget``) ends the run cleanly after the rounds it allowed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from logging import INFO, WARNING
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
from flwr.common.logger import log
from flwr.serverapp.strategy import Strategy

from ..core.results import atomic_write, save_model, write_json
from ..core.stages import BEST_MODEL, CENTRAL_EVALUATION, CHECKPOINT, stage
from ..data.splits import sampled_test_split
from ..evaluation.clinical import CLASS_COUNT_METRICS, clinical_summary
from ..evaluation.metrics import BINARY, CLINICAL
from ..runtime.checkpoint import (
    ServerCheckpoint,
    restore_rng_states,
    restore_strategy_state,
    rng_states,
    strategy_state,
    write_checkpoint,
)
from ..runtime.client_state import RECORD, RUN_DIR_KEY
from ..runtime.context import RunContext
from ..runtime.history import round_row
from ..runtime.resume import checkpoint_stamp
from ..settings import ConfigError, RunConfig, Setting
from ..strategies.common import StrategySpec, flower_kwargs
from ..training.local_client import LocalClient
from ..training.loops import evaluate_clinical
from ..trust.reply_checks import TEST, TRAIN, ReplyRules, no_arrays, refuse_without_model_reply
from .phase import Handoff, Phase
from .rounds_hook import RoundsHook, StopRounds
from .rounds_strategy import RoundsStrategy, resumed_evaluate_fn

# what can pick model_best.pt: accuracy and the clinical metrics
# (evaluation.metrics.clinical_metrics)
BEST_MODEL_METRICS = ("accuracy", *(name.replace("_", "-") for name in CLINICAL + BINARY))
BINARY_ONLY = tuple(name.replace("_", "-") for name in BINARY)

SETTINGS = (
    Setting(
        "checkpoint",
        True,
        "FL-rounds protocols: checkpoint the server's and the clients' state at the end of every"
        " round, so that `resume` can finish an interrupted run. See [Resume](docs/resume.md)",
    ),
    Setting(
        "max-update-norm",
        0.0,
        "FL rounds: clip each client's model update (its reply minus the global model, every"
        " floating-point entry) to this L2 norm on the server before the strategy aggregates"
        " it; composes with any strategy whose clients reply a model (not FedNova, SCAFFOLD);"
        " 0 = off",
        low=0,
    ),
    Setting(
        "best-model-metric",
        "accuracy",
        "FL rounds: the metric of the global model that picks `model_best.pt` (highest, on the"
        " server's test set, or the clients' local test splits with `server-data`):"
        " `accuracy`, the clinical metrics `balanced-accuracy`, `auroc`, or for two classes"
        " `sensitivity`, `specificity`, `auroc-positive`",
        choices=BEST_MODEL_METRICS,
    ),
    Setting(
        "central-test-samples",
        100_000,
        "FL rounds: the most samples of the server's test set the global model is evaluated on"
        " after each round. A larger test set (a simulated federation of many clients) is"
        " evaluated on a uniform sample of this many, the same sample in every run of the data"
        " set, so that a round's cost does not grow with the federation; its n is in"
        " `clinical.json`. 0 = the whole test set",
        low=0,
    ),
)


def check_max_update_norm(config: RunConfig, strategies: Mapping[str, StrategySpec]) -> None:
    """``max-update-norm`` clips the update a client replies to FL rounds' ``train`` messages
    (its trained model minus the global model): refuse protocols that send none and
    strategies whose reply is no model (``strategies``: the FL strategies' specs by name)."""
    if config.max_update_norm > 0:
        what = f"max-update-norm={config.max_update_norm}"
        refuse_without_model_reply(what, config.strategy, strategies)


BEST_PREDICTIONS = "predictions_best.npz"  # the best round's predictions on the test set
CLINICAL_FILE = "clinical.json"  # the global model's clinical reading (clinical_summary)


@dataclass(frozen=True)
class Predictions:
    """The global model's class probabilities on the server's test set in one round."""

    round: int
    probabilities: np.ndarray
    labels: np.ndarray

    def save(self, path: Path) -> None:
        def write(f) -> None:
            np.savez(
                f,
                round=self.round,
                probabilities=self.probabilities.astype(np.float32),
                labels=self.labels,
            )

        atomic_write(path, write, binary=True)

    @classmethod
    def load(cls, path: Path) -> Predictions | None:
        try:
            with np.load(path) as saved:
                return cls(int(saved["round"]), saved["probabilities"], saved["labels"])
        except (OSError, KeyError, ValueError):
            return None


def write_clinical_summary(run: RunContext, last: Predictions) -> None:
    """``clinical.json``: the global model's clinical reading
    (``evaluation.clinical.clinical_summary``, intervals included) at the last round and at the
    best round (``model_best.pt``'s, read back from ``predictions_best.npz``, so that a resumed
    run has it too; the last round's summary again, not recomputed, when the best round is the
    last). The classes are the run's (``run.classes``, what ``classes.json`` holds)."""
    names, positive = run.classes["names"], run.classes["positive"]

    def summary(predictions: Predictions) -> dict:
        probabilities = predictions.probabilities.astype(np.float64)
        reading = clinical_summary(probabilities, predictions.labels, names, positive)
        return {"round": predictions.round, **reading}

    summaries = {"classes": run.classes, "last": summary(last)}
    best = Predictions.load(run.run_dir / BEST_PREDICTIONS)
    if best is not None:
        same = best.round == last.round
        summaries["best"] = summaries["last"] if same else summary(best)
    write_json(run.run_dir / CLINICAL_FILE, summaries)


class FLRounds(Phase):
    """``num-server-rounds`` rounds of the algorithm ``spec`` (see the module docstring)."""

    MESSAGE_TYPES = (MessageType.TRAIN, MessageType.EVALUATE)
    RESUMABLE = True

    def __init__(self, spec: StrategySpec, hooks: Sequence[RoundsHook] = ()) -> None:
        self.spec = spec
        self.hooks = tuple(hooks)
        self.strategy: Strategy | None = None  # the algorithm's
        self.rounds: Strategy | None = None  # what Flower's loop runs: wrapped by the hooks

    def check(self, run: RunContext) -> None:
        if run.data is None and run.config.fraction_evaluate == 0:
            raise ConfigError(
                "fraction-evaluate=0.0: the server holds no data (server-data), so the"
                " clients' evaluation is the run's only accuracy; set fraction-evaluate > 0"
            )
        if self.spec.check_federation is not None:
            message = self.spec.check_federation(run.config, run.num_partitions)
            if message:
                raise ConfigError(message)
        if run.config.best_model_metric in BINARY_ONLY and run.num_classes != 2:
            raise ConfigError(
                f"best-model-metric={run.config.best_model_metric!r} needs two classes;"
                f" dataset={run.config.dataset!r} has {run.num_classes}: use accuracy,"
                " balanced-accuracy or auroc"
            )
        if run.config.best_model_metric in BINARY_ONLY and run.grid.positive_class is None:
            raise ConfigError(
                f"best-model-metric={run.config.best_model_metric!r} needs a positive class;"
                f" dataset={run.config.dataset!r} declares none: set positive-class (a class"
                " name or index) or use accuracy, balanced-accuracy or auroc"
            )
        self.strategy = self.spec.build_server(run.config, **flower_kwargs(run.config))
        self.rounds = self.strategy
        for hook in self.hooks:
            self.rounds = hook.wrap(self.rounds, run)

    def reply_rules(self, config: RunConfig) -> dict[str, ReplyRules]:
        """Training replies: exactly the arrays the algorithm declares (by default the model
        the server sent), numbers as metrics, ``num-examples`` within the node's training
        split, updates clipped with ``max-update-norm``; evaluation replies: metrics only,
        ``num-examples`` within its test split."""
        return {
            MessageType.TRAIN: ReplyRules(
                arrays=self.spec.reply_arrays(config),
                list_metrics=frozenset(),
                examples=TRAIN,
                max_update_norm=config.max_update_norm,
            ),
            MessageType.EVALUATE: ReplyRules(
                arrays=no_arrays, list_metrics=CLASS_COUNT_METRICS, examples=TEST
            ),
        }

    def run(self, run: RunContext, handoff: Handoff) -> None:
        config, data, model = run.config, run.data, run.model
        resumed = run.checkpoint
        best_accuracy = resumed.best_accuracy if resumed else -1.0
        stamp = checkpoint_stamp(run.run_dir) if config.checkpoint else {}  # versions, identity
        if data is not None:
            x_test, y_test = sampled_test_split(data, config.central_test_samples)
            if len(y_test) < len(data.y_test):
                log(
                    INFO,
                    "flowerbed: the global model is evaluated on %d of the %d test samples"
                    " (central-test-samples)",
                    len(y_test),
                    len(data.y_test),
                )

        def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            nonlocal best_accuracy, latest, last_predictions
            latest = arrays
            model.load_state_dict(arrays.to_torch_state_dict())
            if data is None:  # the round's federated evaluation, already in the grid's record
                row = round_row(server_round, run.grid, federated=True)
                where, selected_on = "federated", "clients' local test splits"
                accuracy, loss = row["federated_accuracy"], row["federated_loss"]
            else:  # one pass: loss, accuracy and the clinical metrics
                with stage(CENTRAL_EVALUATION, server_round):
                    result = evaluate_clinical(
                        model, x_test, y_test, data.num_classes, run.grid.positive_class
                    )
                accuracy, loss = result.accuracy, result.loss
                last_predictions = Predictions(server_round, result.probabilities, result.labels)
                row = round_row(
                    server_round,
                    run.grid,
                    central_accuracy=accuracy,
                    central_loss=loss,
                    **result.columns("central"),
                )
                where, selected_on = "central", "test"
            column = f"{where}_{config.best_model_metric.replace('-', '_')}"
            score = row.get(column, math.nan)  # NaN (undefined, no evaluation) never wins
            if score > best_accuracy:
                best_accuracy = score
                with stage(BEST_MODEL, server_round):
                    save_model(run.run_dir / "model_best.pt", model.state_dict())
                    if data is not None:
                        last_predictions.save(run.run_dir / BEST_PREDICTIONS)
                    write_json(
                        run.run_dir / "model_best.json",
                        {"round": server_round, column: score, "selected_on": selected_on},
                    )
            row.update(self.server_metrics())
            for hook in self.hooks:
                row.update(hook.columns())
            run.history.add(row, config.num_server_rounds)
            if config.checkpoint:
                with stage(CHECKPOINT, server_round):
                    self.save_checkpoint(run, server_round, arrays, best_accuracy, stamp)
            return MetricRecord({"accuracy": accuracy, "loss": loss})

        strategy = RoundsStrategy(self.rounds, config.seed)
        evaluate_fn, num_rounds = central_evaluate, config.num_server_rounds
        if resumed is None:
            initial = handoff.arrays
            initial = ArrayRecord(model.state_dict()) if initial is None else initial
        else:
            initial = resumed.arrays
            self.restore(run, resumed)
            strategy = RoundsStrategy(self.rounds, config.seed, done=resumed.round)
            evaluate_fn = resumed_evaluate_fn(central_evaluate, resumed.round)
            num_rounds -= resumed.round
        latest = initial  # the global model of the last round evaluated
        last_predictions: Predictions | None = None  # its predictions on the server's test set
        if config.checkpoint or config.virtual_clients:  # where clients keep their state
            run.grid.bookkeeping[RECORD] = ConfigRecord({RUN_DIR_KEY: str(run.run_dir)})
        stopped = ""
        try:
            result = strategy.start(
                grid=run.grid,
                initial_arrays=initial,
                num_rounds=num_rounds,
                timeout=config.round_timeout,
                evaluate_fn=evaluate_fn,
            )
        except StopRounds as stop:  # a clean end: the rounds a hook allowed
            stopped, result = str(stop), None
            run.ended_early = stopped  # the completed run's status says why
            log(WARNING, "flowerbed: %s", stopped)
        finally:
            run.grid.bookkeeping.pop(RECORD, None)
            run.grid.seed_sampling(None)
        # Flower's result holds no arrays when no round aggregated anything (every round failed,
        # as max-failed-rounds allows): the global model is then still the initial one.
        if result is None:
            arrays = latest
        else:
            arrays = result.arrays if len(result.arrays) else initial
        for hook in self.hooks:
            hook.finish(run.run_dir, stopped)
        if last_predictions is not None:
            write_clinical_summary(run, last_predictions)
        final = arrays.to_torch_state_dict()
        save_model(run.run_dir / "model.pt", final)
        model.load_state_dict(final)
        handoff.arrays = arrays
        last = run.history.rows[-1]
        log(
            INFO,
            "flowerbed: final accuracy %.4f; results in %s",
            last.get("central_accuracy", last.get("federated_accuracy")),
            run.run_dir,
        )

    def save_checkpoint(
        self,
        run: RunContext,
        server_round: int,
        arrays: ArrayRecord,
        best_accuracy: float,
        stamp: dict,
    ) -> None:
        """The server's checkpoint after ``server_round``'s history row (``runtime.checkpoint``)."""
        checkpoint = ServerCheckpoint(
            round=server_round,
            arrays=arrays,
            strategy=self.strategy_state(),
            rng=rng_states(),
            history=run.history.rows,
            failed_rounds=run.history.failed_rounds,
            best_accuracy=best_accuracy,
            **stamp,
        )
        write_checkpoint(run.run_dir, checkpoint)

    def restore(self, run: RunContext, resumed: ServerCheckpoint) -> None:
        """Everything of the checkpoint but the arrays and the best accuracy (which ``run``
        takes): the strategy's attributes, the history, the grid's round, the random states."""
        state = dict(resumed.strategy)
        saved = [state.pop(hook.STATE_KEY, None) for hook in self.hooks]
        restore_strategy_state(self.strategy, state)
        for hook, hook_state in zip(self.hooks, saved, strict=True):
            hook.restore(hook_state, f"resume={str(run.config.resume)!r}")
        run.history.rows = list(resumed.history)
        run.history.failed_rounds = resumed.failed_rounds
        run.grid.continue_after(resumed.round)
        log(INFO, "flowerbed: resuming %s after round %d", run.run_dir, resumed.round)
        restore_rng_states(resumed.rng)  # last: nothing draws from them before round r + 1

    def strategy_state(self) -> dict:
        """The strategy's attributes (``runtime.checkpoint.strategy_state``) and each hook's
        state (plain data, e.g. the privacy accounting) under the hook's ``STATE_KEY``."""
        state = strategy_state(self.strategy)
        for hook in self.hooks:
            hook_state = hook.state()
            if hook_state is not None:
                state[hook.STATE_KEY] = hook_state
        return state

    def server_metrics(self) -> dict[str, float]:
        """The strategy's own metrics of the round just aggregated (``round_metrics``:
        FedNova's tau_eff, QFedFisher's substituted fraction) as ``server_<name>`` columns;
        read once, so that a round without aggregation reports none."""
        metrics = getattr(self.strategy, "round_metrics", None)
        if not metrics:
            return {}
        row = {f"server_{key.replace('-', '_')}": float(value) for key, value in metrics.items()}
        self.strategy.round_metrics = {}
        return row

    def client_step(self, client: LocalClient, msg: Message) -> Message:
        if msg.metadata.message_type == MessageType.EVALUATE:
            return self.spec.client_evaluate(client, msg)
        return self.spec.client_train(client, msg)
