"""The FL-rounds phase: N rounds of a Flower strategy, wrapped, not rewritten.

Server half: the algorithm's Flower ``Strategy`` (``StrategySpec.build_server``, built in
``check`` so that its requirements stop the run before any training) runs
``strategy.start`` on the run's recording grid for ``num-server-rounds`` rounds, starting
from the handoff's global arrays (or the run's freshly built global model). After every
round the global model is evaluated on the held-out test set (``central_accuracy``) and the
history row is logged and written, with the strategy's own metrics of the round
(``round_metrics``, e.g. QFedFisher's substituted fraction) as ``server_<name>``. The final arrays go to ``model.pt`` and to the handoff; the
best round's (highest ``central_accuracy``, the earliest on a tie, round 0 included) go to
``model_best.pt``, with that round and accuracy in ``model_best.json``. "Best" is selected on
the test set, as the point-cloud FL + KD benchmark does for its teachers: an optimistic choice,
never a held-out one.

Client half: Flower's default ``train`` and ``evaluate`` messages go to the algorithm's
client step and evaluation (``StrategySpec.client_train`` / ``client_evaluate``).
"""

from __future__ import annotations

from logging import INFO

from flwr.app import ArrayRecord, Message, MessageType, MetricRecord
from flwr.common.logger import log
from flwr.serverapp.strategy import Strategy

from ..runtime.context import RunContext
from ..runtime.history import round_row
from ..runtime.results import save_model, write_json
from ..strategies.common import StrategySpec, flower_kwargs
from ..training.local_client import LocalClient
from ..training.loops import evaluate
from .phase import Handoff, Phase


class FLRounds(Phase):
    """``num-server-rounds`` rounds of the algorithm ``spec`` (see the module docstring)."""

    MESSAGE_TYPES = (MessageType.TRAIN, MessageType.EVALUATE)

    def __init__(self, spec: StrategySpec) -> None:
        self.spec = spec
        self.strategy: Strategy | None = None

    def check(self, run: RunContext) -> None:
        self.strategy = self.spec.build_server(run.config, **flower_kwargs(run.config))

    def run(self, run: RunContext, handoff: Handoff) -> None:
        config, data, model = run.config, run.data, run.model
        best_accuracy = -1.0

        def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            nonlocal best_accuracy
            model.load_state_dict(arrays.to_torch_state_dict())
            loss, accuracy = evaluate(model, data.x_test, data.y_test)
            if accuracy > best_accuracy:
                best_accuracy = accuracy
                save_model(run.run_dir / "model_best.pt", model.state_dict())
                write_json(
                    run.run_dir / "model_best.json",
                    {"round": server_round, "central_accuracy": accuracy, "selected_on": "test"},
                )
            row = round_row(server_round, run.grid, central_accuracy=accuracy, central_loss=loss)
            row.update(self.server_metrics())
            run.history.add(row, config.num_server_rounds)
            return MetricRecord({"accuracy": accuracy, "loss": loss})

        initial = handoff.arrays if handoff.arrays is not None else ArrayRecord(model.state_dict())
        result = self.strategy.start(
            grid=run.grid,
            initial_arrays=initial,
            num_rounds=config.num_server_rounds,
            timeout=config.round_timeout,
            evaluate_fn=central_evaluate,
        )
        # Flower's result holds no arrays when no round aggregated anything (every round failed,
        # as max-failed-rounds allows): the global model is then still the initial one.
        arrays = result.arrays if len(result.arrays) else initial
        final = arrays.to_torch_state_dict()
        save_model(run.run_dir / "model.pt", final)
        model.load_state_dict(final)
        handoff.arrays = arrays
        log(
            INFO,
            "flowerbed: final accuracy %.4f; results in %s",
            run.history.rows[-1]["central_accuracy"],
            run.run_dir,
        )

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
