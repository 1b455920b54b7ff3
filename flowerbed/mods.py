"""Flower client mods of flowerbed.

``fail_on_purpose``: test-only fault injection. The run-config key ``failing-partitions``
lists partition ids whose training messages raise instead of training, so that tests and
demonstrations can watch a round go on without them (the failure is counted in the history).
It wraps the ClientApp's training handlers as a Flower mod, so no algorithm knows of it.
"""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable

from .settings import RunConfig, Setting, comma_list


def _check_partition_ids(value: str, config: RunConfig) -> str | None:
    try:
        [int(token) for token in comma_list(value)]
    except ValueError:
        return f"failing-partitions must be partition ids separated by commas, got {value!r}"
    return None


SETTINGS = (
    Setting(
        "failing-partitions",
        "",
        'partition ids whose training raises on purpose (tests fault tolerance), e.g. `"3,7"`',
        check=_check_partition_ids,
    ),
)


def failing_partition_ids(run_config) -> frozenset[int]:
    """The partition ids of ``failing-partitions`` (raw or parsed run config)."""
    return frozenset(int(token) for token in comma_list(run_config.get("failing-partitions", "")))


def fail_on_purpose(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Raise for the partitions of ``failing-partitions``; pass everything else on."""
    partition_id = int(context.node_config["partition-id"])
    if partition_id in failing_partition_ids(context.run_config):
        raise RuntimeError(
            f"partition {partition_id} fails on purpose (run-config failing-partitions)"
        )
    return call_next(msg, context)
