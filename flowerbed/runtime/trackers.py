"""Live curves: every history row's numbers sent to TensorBoard and/or MLflow as the run goes.

``tracker='tensorboard'`` writes event files into ``<run-dir>/tensorboard/`` (so
``tensorboard --logdir <output-dir>`` shows every run of that folder side by side);
``tracker='mlflow'`` logs to the MLflow tracking store ``mlflow-tracking-uri`` (default: the
SQLite database ``<output-dir>/mlflow.db``, one store for all runs of that folder), under the
experiment ``mlflow-experiment``, one MLflow run per flowerbed run named after its run folder,
with the run config (``config.json``) as its parameters and its end status: FINISHED,
FAILED or KILLED (interrupted). ``tracker='tensorboard,mlflow'`` does both.

What is logged: at step = round, every column of the row that is a finite number
(``central_accuracy``, ``train_loss``, ``client_accuracy``, ``bytes_sent``, ``seconds``,
the ``client_<metric>_mean`` columns...). Per-client values (``client_accuracies``, a dict)
and failure messages are not: their summaries are columns already, a thousand clients would be
a thousand curves, and ``history.json`` keeps them. NaN (a round without client evaluation)
is left out rather than drawn as a gap.

Files stay the source of truth. A row is written to ``history.json``/``.csv`` before any
tracker sees it, and a tracker that fails (its server gone, its disk full) is logged once as a
warning and dropped for the rest of the run, which goes on; one that cannot start is dropped
the same way. MLflow retries an HTTP server that does not answer, for minutes by default:
``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` and ``MLFLOW_HTTP_REQUEST_TIMEOUT`` in the ServerApp's
environment bound that one wait.

Only the ServerApp tracks: a missing package stops the run at its start (``check_trackers``,
before data or clients), with the pip command; ClientApps never need these packages, so the
check is not part of the key's validation, which every process runs. The packages are
imported only when a tracker is opened (start-up time matters: see docs/architecture.md).
"""

from __future__ import annotations

import importlib.util
import math
import numbers
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from logging import WARNING
from pathlib import Path
from typing import Any, Protocol

from flwr.common.logger import log

from ..settings import ConfigError, RunConfig, Setting, comma_list

NONE = "none"
TRACKERS = ("tensorboard", "mlflow")
PACKAGE_OF = {"tensorboard": "tensorboard", "mlflow": "mlflow"}  # tracker -> module to import
INSTALL = "pip install 'flowerbed[trackers]'"
RUN_DIR_TAG = "flowerbed.run-dir"
MLFLOW_STATUS = {"completed": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


def _tracker_problem(value: str, config: RunConfig | None = None) -> str | None:
    names = comma_list(value)
    unknown = [name for name in names if name not in (NONE, *TRACKERS)]
    if not names or unknown or (NONE in names and len(names) > 1):
        return (
            f"tracker={value!r} is not valid; valid choices: {NONE}, {', '.join(TRACKERS)}"
            " (several comma-separated, e.g. 'tensorboard,mlflow')"
        )
    return None


SETTINGS = (
    Setting(
        "tracker",
        NONE,
        "live curves of every numeric history column per round: `none`, `tensorboard` (event"
        " files in `<run-dir>/tensorboard/`), `mlflow`, or both comma-separated; needs"
        f" `{INSTALL}`; history files stay the source of truth, see"
        " [Trackers](docs/trackers.md)",
        check=_tracker_problem,
    ),
    Setting(
        "mlflow-tracking-uri",
        "",
        "tracker=mlflow: the MLflow tracking store (`http://host:5000`, `sqlite:///path.db`,"
        " ...); empty = `sqlite:///<output-dir>/mlflow.db`",
    ),
    Setting("mlflow-experiment", "flowerbed", "tracker=mlflow: the MLflow experiment's name"),
)


def chosen_trackers(config: RunConfig) -> list[str]:
    """The trackers ``config`` asks for, in ``TRACKERS`` order (``[]`` for none)."""
    names = comma_list(config.tracker)
    return [name for name in TRACKERS if name in names]


def check_trackers(config: RunConfig) -> None:
    """``ConfigError`` naming key, value and the pip command if a chosen tracker's package is
    missing (looked up, not imported)."""
    for name in chosen_trackers(config):
        if importlib.util.find_spec(PACKAGE_OF[name]) is None:
            raise ConfigError(
                f"tracker={config.tracker!r} needs the {PACKAGE_OF[name]} package, which is"
                f" not installed: {INSTALL}"
            )


def scalar_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    """The row's columns that are finite numbers, ``round`` (the step) excepted."""
    return {
        key: float(value)
        for key, value in row.items()
        if key != "round"
        and isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
    }


class Tracker(Protocol):
    """Where a run's rows go besides its files."""

    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self, outcome: str) -> None:
        """``outcome``: completed, failed or interrupted (``runtime.outcome.STATUSES``)."""


class TensorBoardTracker:
    """Scalars into ``<run-dir>/tensorboard/``, flushed every round (live curves)."""

    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self, outcome: str) -> None:
        self.writer.close()


class MlflowTracker:
    """One MLflow run through ``MlflowClient`` (no fluent global state: in-process runs follow
    one another in one interpreter), named after the run folder and tagged with its path
    (``flowerbed.run-dir``), the files being the record."""

    def __init__(self, uri: str, experiment: str, run_dir: Path, params: Mapping) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        run = self.client.create_run(
            self._experiment_id(experiment),
            run_name=run_dir.name,
            tags={RUN_DIR_TAG: str(run_dir)},
        )
        self.run_id = run.info.run_id
        self.client.log_batch(self.run_id, params=[Param(k, str(v)) for k, v in params.items()])

    def _experiment_id(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except MlflowException:  # another run created it meanwhile
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()]
        )

    def close(self, outcome: str) -> None:
        self.client.set_terminated(self.run_id, status=MLFLOW_STATUS[outcome])


def mlflow_uri(config: RunConfig) -> str:
    """``mlflow-tracking-uri``, or the SQLite store in the output folder."""
    return config.mlflow_tracking_uri or f"sqlite:///{config.output_path / 'mlflow.db'}"


class Trackers:
    """The run's trackers; one that raises is warned about once and dropped (module doc)."""

    def __init__(self, trackers: Mapping[str, Tracker] | None = None) -> None:
        self.active = dict(trackers or {})

    def log(self, row: Mapping[str, Any]) -> None:
        if not self.active:
            return
        metrics = scalar_metrics(row)
        for name, tracker in list(self.active.items()):
            self._call(
                name, f"round {row['round']}", lambda t=tracker: t.log(row["round"], metrics)
            )

    def close(self, outcome: str) -> None:
        for name, tracker in list(self.active.items()):
            self._call(name, "its end", lambda t=tracker: t.close(outcome))
        self.active.clear()

    def _call(self, name: str, when: str, call) -> None:
        try:
            call()
        except Exception as error:  # noqa: BLE001 - a tracker never stops the run
            del self.active[name]
            _warn_dropped(name, when, error)


def _warn_dropped(name: str, when: str, error: Exception) -> None:
    log(
        WARNING,
        "flowerbed: tracker %s failed at %s (%s: %s); it logs nothing more, the run goes on"
        " and history.json has every round",
        name,
        when,
        type(error).__name__,
        error,
    )


def open_trackers(config: RunConfig, run_dir: Path, params: Mapping) -> Trackers:
    """The trackers ``config`` asks for, started for the run in ``run_dir`` (``params``: the
    run config as written to ``config.json``); one that cannot start is warned about and
    left out."""
    opened: dict[str, Tracker] = {}
    for name in chosen_trackers(config):
        try:
            if name == "tensorboard":
                opened[name] = TensorBoardTracker(run_dir)
            else:
                opened[name] = MlflowTracker(
                    mlflow_uri(config), config.mlflow_experiment, run_dir, params
                )
        except Exception as error:  # noqa: BLE001 - a tracker never stops the run
            _warn_dropped(name, "its start", error)
    return Trackers(opened)


@contextmanager
def closed_with_outcome(trackers: Trackers) -> Iterator[None]:
    """Close ``trackers`` when the block ends, telling them how: completed, failed or
    interrupted (the statuses of ``status.json``)."""
    try:
        yield
    except KeyboardInterrupt:
        trackers.close("interrupted")
        raise
    except Exception:
        trackers.close("failed")
        raise
    trackers.close("completed")
