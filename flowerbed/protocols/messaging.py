"""What every phase's server half does to ask the nodes: send one message per node, keep the
good answers.

``send_to_nodes`` builds the messages of one message type (the same content for every node of
the run, or one content per chosen node), sends them through the run's recording grid within
``round-timeout`` and returns the replies without an error, in the grid's order (partition
order). The grid has already counted every failure in the round's traffic (an error reply, a
reply its checks rejected, a node that did not answer in time); ``send_to_nodes`` also logs
them at once, in one line naming the message type, since a phase that adds no history row
(the knowledge-transfer metrics) never closes a round that would list them.
``by_partition`` keys the kept replies by the sender's partition id.
"""

from __future__ import annotations

from collections.abc import Mapping
from logging import WARNING

from flwr.app import Message, RecordDict
from flwr.common.logger import log

from ..runtime.context import RunContext
from ..runtime.recording_grid import short_reason


def send_to_nodes(
    run: RunContext, message_type: str, content: RecordDict | Mapping[int, RecordDict]
) -> list[Message]:
    """Send ``message_type`` and return the replies without an error, in the grid's order.

    ``content``: one ``RecordDict`` sent to every node of ``run.grid.get_node_ids()``, or a
    mapping node id -> the content for that node (only those nodes are asked). Failed nodes
    are dropped from the result and logged in one WARNING line (module docstring).
    """
    if isinstance(content, RecordDict):
        content = dict.fromkeys(run.grid.get_node_ids(), content)
    messages = [
        Message(content=node_content, message_type=message_type, dst_node_id=node)
        for node, node_content in content.items()
    ]
    replies = run.grid.send_and_receive(messages, timeout=run.config.round_timeout)
    kept = [reply for reply in replies if not reply.has_error()]
    failures = [
        f"{run.grid.describe(reply)}: {short_reason(reply)}"
        for reply in replies
        if reply.has_error()
    ]
    if len(replies) < len(messages):
        failures.append(f"{len(messages) - len(replies)} node(s) did not reply in time")
    if failures:
        log(
            WARNING,
            "flowerbed: %d of %d node(s) answered %s; left out: %s",
            len(kept),
            len(messages),
            message_type,
            "; ".join(failures),
        )
    return kept


def by_partition(run: RunContext, replies: list[Message]) -> dict[int, Message]:
    """``replies`` keyed by their sender's partition id (in the order given)."""
    return {run.grid.partition_of[reply.metadata.src_node_id]: reply for reply in replies}
