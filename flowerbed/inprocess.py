"""An in-process federation for tests and benchmarks: the real ServerApp job and ClientApp
handlers, without Ray or a SuperLink.

``run_in_process(overrides, num_clients)`` resolves the run config like ``flwr run`` (every
key's declared default, which pyproject's ``[tool.flwr.app.config]`` repeats; unknown keys
rejected), then runs the ServerApp's job on an
``InProcessGrid``, which delivers every message to the ClientApp in this process. A
``flwr run`` costs about 12 s of start-up (more on a loaded machine); this costs none, so
strategy tests and benchmarks over many runs take seconds. The real path is covered by
``flowerbed.simulation.simulate`` in the end-to-end tests.

``use_server_identity`` is the one place that touches Flower's private API (its task
identity, which the real ServerApp runtime sets); ``tests/test_inprocess.py`` fails if a
Flower upgrade breaks it.
"""

from __future__ import annotations

import copy
from pathlib import Path

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.supercore.task_identity import TaskIdentity  # private Flower API: used here only

from .catalog import SETTINGS, parse_run_config
from .client_app import app as client_app
from .server_app import run_protocol
from .settings import unknown_keys_message
from .simulation import APP_DIR

__all__ = [
    "APP_DIR",  # the source tree, for the tests that read its files
    "InProcessGrid",
    "default_run_config",
    "resolve_run_config",
    "run_in_process",
    "use_server_identity",
]


def use_server_identity() -> None:
    """Let this process create Flower messages as a ServerApp does.

    Flower stamps new messages with the running task's identity; the real ServerApp runtime
    sets it, so an in-process one must too (private API, wrapped here only).
    """
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID


def default_run_config() -> dict:
    """Every run-config key's declared default, in the declared order (what pyproject's
    ``[tool.flwr.app.config]`` holds; no file is read, so any install has them)."""
    return {key: setting.default for key, setting in SETTINGS.items()}


def resolve_run_config(overrides: dict) -> dict:
    """Defaults with ``overrides`` applied; unknown keys are rejected as ``flwr run`` does."""
    config = default_run_config()
    unknown = sorted(set(overrides) - set(config))
    if unknown:
        raise KeyError(unknown_keys_message(unknown, config))
    return {**config, **overrides}


class InProcessGrid:
    """A Grid that delivers messages to the ClientApp in this process, one node after another.

    Each node has its own ``Context`` (partition id, persistent ``state``), as a SuperNode
    does; every message is delivered as a deep copy, as a serialised message would be. An
    exception in the ClientApp becomes an error reply, as in Flower's simulation.
    """

    def __init__(
        self, client_app, run_config: dict, num_nodes: int, node_configs: list[dict] | None = None
    ) -> None:
        use_server_identity()
        self.client_app = client_app
        extra = node_configs or [{}] * num_nodes
        self.contexts = {
            1000 + pid: Context(
                run_id=1,
                node_id=1000 + pid,
                node_config={"partition-id": pid, "num-partitions": num_nodes, **extra[pid]},
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for pid in range(num_nodes)
        }

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def send_and_receive(self, messages, *, timeout: float | None = None) -> list:
        replies = []
        for message in messages:
            context = self.contexts[message.metadata.dst_node_id]
            delivered = copy.deepcopy(message)
            try:
                reply = self.client_app(delivered, context)
            except Exception as error:  # noqa: BLE001 - mirrors Flower's error replies
                reason = f"{type(error).__name__}: {error}"
                reply = Message(Error(code=0, reason=reason), reply_to=delivered)
            replies.append(reply)
        return replies


def run_in_process(
    overrides: dict,
    num_clients: int = 10,
    app=client_app,
    node_configs: list[dict] | None = None,
) -> Path:
    """Run the ServerApp's job with the ClientApp in this process; returns the results folder.

    ``app``: the ClientApp, or any ``(message, context) -> reply`` wrapping it (a test's mod).
    ``node_configs``: per node, node-config entries beside its partition id (a site's
    ``data-dir``).
    """
    run_config = resolve_run_config(overrides)
    config = parse_run_config(run_config)
    return run_protocol(InProcessGrid(app, run_config, num_clients, node_configs), config)
