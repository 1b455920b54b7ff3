"""Stage timers: where the seconds of one FL round go, written only when asked.

``with stage("aggregate train", server_round):`` times the block and, only when the environment
variable ``FLOWERBED_STAGE_TIMES`` names a file, appends one JSON line to it::

    {"stage": "aggregate train", "seconds": 0.012, "round": 3, "pid": 4711,
     "side": "server", "within": null}

Each line is one ``os.write`` on a file opened for appending, so the Ray actors of a
``flwr run`` (which inherit the variable) and the ServerApp can all append to the same file.
When the variable is unset a stage costs one lookup in ``os.environ`` and nothing is written:
the run's outputs are the same either way.

Stages nest: a stage opened inside another inherits its round and side unless given, and
names it as ``within`` (``clinical metrics`` within ``central evaluation``), so that the
top-level stages (``within`` null) of a round never count a second twice. ``record`` writes a
duration measured elsewhere (the whole round, ``ROUND``). ``benchmarks/round_stages.py`` reads
the file; the names below are every stage flowerbed times.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

ENV = "FLOWERBED_STAGE_TIMES"
SERVER, CLIENT = "server", "client"

ROUND = "round"  # the whole round as the server sees it: configure train .. central evaluation
# the server's stages, in the order of a round
REPLY_CHECKS = "reply checks"
AGGREGATE_TRAIN = "aggregate train"
AGGREGATE_EVALUATE = "aggregate evaluate"
CENTRAL_EVALUATION = "central evaluation"
BEST_MODEL = "best model"
HISTORY = "history"
TRACKERS = "trackers"
CHECKPOINT = "checkpoint"
# the clients' stages: the whole client step and its parts, and the client-state mod around it
CLIENT_STEP = "client step"
CLIENT_DECODE = "client decode"
CLIENT_TRAINING = "client training"
CLIENT_ENCODE = "client encode"
CLIENT_EVALUATION = "client evaluation"
CLIENT_STATE = "client state"
# within an evaluation, on either side
CLINICAL_METRICS = "clinical metrics"

SERVER_STAGES = (
    REPLY_CHECKS,
    AGGREGATE_TRAIN,
    AGGREGATE_EVALUATE,
    CENTRAL_EVALUATION,
    BEST_MODEL,
    HISTORY,
    TRACKERS,
    CHECKPOINT,
)
CLIENT_STAGES = (
    CLIENT_STEP,
    CLIENT_DECODE,
    CLIENT_TRAINING,
    CLIENT_ENCODE,
    CLIENT_EVALUATION,
    CLIENT_STATE,
)

# the innermost open stage: (name, round, side)
_open: ContextVar[tuple[str, int | None, str] | None] = ContextVar("flowerbed_stage", default=None)


def record(
    name: str,
    seconds: float,
    server_round: int | None = None,
    side: str = SERVER,
    within: str | None = None,
) -> None:
    """Append one stage's line to the ``FLOWERBED_STAGE_TIMES`` file; nothing when unset."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = {
        "stage": name,
        "seconds": seconds,
        "round": server_round,
        "pid": os.getpid(),
        "side": side,
        "within": within,
    }
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (json.dumps(line) + "\n").encode())
    finally:
        os.close(descriptor)


@contextmanager
def stage(name: str, server_round: int | None = None, side: str | None = None) -> Iterator[None]:
    """Time the block as stage ``name`` of ``server_round`` on ``side`` (module docstring);
    round and side default to the enclosing stage's (else no round, the server)."""
    if not os.environ.get(ENV):
        yield
        return
    outer = _open.get()
    if outer is not None:
        server_round = outer[1] if server_round is None else server_round
        side = side or outer[2]
    side = side or SERVER
    token = _open.set((name, server_round, side))
    started = time.perf_counter()
    try:
        yield
    finally:
        _open.reset(token)
    record(name, time.perf_counter() - started, server_round, side, outer and outer[0])
