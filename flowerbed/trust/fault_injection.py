"""Test-only fault injection: chosen partitions fail their training on purpose.

``fail_on_purpose`` is a Flower client mod. The run-config key ``failing-partitions``
lists partition ids whose training messages fail, so that tests and demonstrations can watch
a round go on without them (the failure is counted in the history); ``failure-mode`` says how:
``raise`` (the handler raises instead of training) or ``nonfinite`` (the client trains and
replies with NaN in every float array, as a diverging client would). It wraps the ClientApp's
training handlers as a Flower mod, so no algorithm knows of it.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message
from flwr.clientapp.typing import ClientAppCallable

from ..settings import ConfigError, RunConfig, Setting, comma_list


def _check_partition_ids(value: str, config: RunConfig) -> str | None:
    try:
        [int(token) for token in comma_list(value)]
    except ValueError:
        return f"failing-partitions must be partition ids separated by commas, got {value!r}"
    return None


FAILURE_MODES = ("raise", "nonfinite")
SETTINGS = (
    Setting(
        "failing-partitions",
        "",
        'partition ids whose training fails on purpose (tests fault tolerance), e.g. `"3,7"`',
        check=_check_partition_ids,
    ),
    Setting(
        "failure-mode",
        "raise",
        "how `failing-partitions` fail: `raise` (the training handler raises) or `nonfinite`"
        " (they train and reply with NaN in every float array)",
        choices=FAILURE_MODES,
    ),
)


def failing_partition_ids(run_config) -> frozenset[int]:
    """The partition ids of ``failing-partitions`` (raw or parsed run config)."""
    return frozenset(int(token) for token in comma_list(run_config.get("failing-partitions", "")))


def check_federation(config: RunConfig, num_partitions: int) -> None:
    """``failing-partitions`` names partitions of this federation (``ConfigError`` naming the
    ids that do not exist)."""
    missing = sorted(failing_partition_ids(config) - set(range(num_partitions)))
    if missing:
        raise ConfigError(
            f"failing-partitions={config.failing_partitions!r} names partitions {missing} that"
            f" do not exist; valid ids: 0 to {num_partitions - 1}"
        )


def with_nonfinite_arrays(reply: Message) -> Message:
    """``reply`` with NaN in every float entry of its ArrayRecords."""
    for name, record in list(reply.content.array_records.items()):
        arrays = {key: array.numpy().copy() for key, array in record.items()}
        for values in arrays.values():
            if np.issubdtype(values.dtype, np.inexact):
                values[...] = np.nan
        reply.content[name] = ArrayRecord({key: Array(v) for key, v in arrays.items()})
    return reply


def fail_on_purpose(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Fail for the partitions of ``failing-partitions`` (module doc); pass the rest on."""
    partition_id = int(context.node_config["partition-id"])
    if partition_id not in failing_partition_ids(context.run_config):
        return call_next(msg, context)
    if context.run_config.get("failure-mode", "raise") == "nonfinite":
        reply = call_next(msg, context)
        return reply if reply.has_error() else with_nonfinite_arrays(reply)
    raise RuntimeError(f"partition {partition_id} fails on purpose (run-config failing-partitions)")
