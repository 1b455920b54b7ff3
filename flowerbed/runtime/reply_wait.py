"""Send messages and wait for their replies, polling at a pace that follows the wait.

Flower's ``Grid.send_and_receive`` pushes the messages, then pulls the replies and sleeps a
fixed interval between pulls: 0.1 s in the simulation's in-memory grid, 3 s over gRPC (a
deployment's SuperLink). The last reply of a round therefore waits on average half that
interval before the strategy sees it: about 0.05 s per message round in a simulation (1 % of a
5 s round) and 1.5 s in a deployment, where a short round is stretched to the next multiple of
3 s.

``send_and_receive`` here does the same with the public ``push_messages`` and
``pull_messages``, and sleeps ``poll_interval(elapsed)`` between pulls: a hundredth of the time
waited so far, between ``MIN_POLL`` and ``MAX_POLL``. A reply then waits at most about 1 % of
the round's time (on average half that), and the number of pulls grows with the logarithm
of a long wait rather than with its length.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import Message
from flwr.serverapp import Grid

MIN_POLL = 0.005  # seconds between the first pulls
MAX_POLL = 1.0  # seconds between pulls of a long wait
POLL_FRACTION = 0.01  # of the time waited so far


def poll_interval(elapsed: float) -> float:
    """Seconds to sleep before the next pull, ``elapsed`` seconds after the messages were
    pushed: ``POLL_FRACTION`` of it, within [``MIN_POLL``, ``MAX_POLL``]."""
    return min(MAX_POLL, max(MIN_POLL, POLL_FRACTION * elapsed))


def send_and_receive(
    grid: Grid, messages: Iterable[Message], timeout: float | None = None
) -> list[Message]:
    """Push ``messages`` and return the replies that arrive within ``timeout`` seconds (None:
    wait for all of them), as ``Grid.send_and_receive`` does; in arrival order. A grid that is
    not a Flower ``Grid`` (flowerbed's in-process grid, a test's) answers when asked: its own
    ``send_and_receive`` is called."""
    if not isinstance(grid, Grid):
        return list(grid.send_and_receive(messages, timeout=timeout))
    waiting = set(grid.push_messages(messages))
    started = time.monotonic()
    replies: list[Message] = []
    while waiting:
        arrived = list(grid.pull_messages(waiting))
        replies += arrived
        waiting -= {reply.metadata.reply_to_message_id for reply in arrived}
        elapsed = time.monotonic() - started
        if not waiting or (timeout is not None and elapsed >= timeout):
            break
        pause = poll_interval(elapsed)
        if timeout is not None:
            pause = min(pause, timeout - elapsed)
        time.sleep(pause)
    return replies
