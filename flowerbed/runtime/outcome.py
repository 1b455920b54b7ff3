"""How a run ends: ``status.json`` in its run folder, and errors that read as one line.

``status.json`` is written atomically: ``running`` when the run folder is made, then
``completed``, ``failed`` (with the reason, the exception's whole message on one line: a
configuration or data error, a round in which no client succeeded, an exception) or
``interrupted`` (SIGINT or SIGTERM; a run killed without a word, SIGKILL or a crash, is marked
``interrupted`` by whoever looks at it: ``runtime.run_lock.settled_status``). A failed run also
writes ``error.log`` with the traceback. ``flwr run`` exits 0 whatever the ServerApp does, so
the status file (or ``flwr ls``) is where a script learns how a run ended.

Errors flowerbed raises on purpose (``CLEAR_ERRORS``) are logged as one line, and Flower's
own report of the exception keeps its message but not the traceback, unless the environment
sets ``FLOWERBED_TRACEBACK=1``.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..core.results import atomic_write, write_json
from ..data.splits import DataFileError, DataNotFoundError
from ..settings import ConfigError

STATUSES = ("running", "completed", "failed", "interrupted")


class RunFailed(RuntimeError):
    """The run cannot go on: no client succeeded in a round, the nodes never came."""


class Interrupted(KeyboardInterrupt):
    """The ServerApp process was asked to stop (SIGTERM)."""


CLEAR_ERRORS = (ConfigError, DataNotFoundError, DataFileError, RunFailed)


MAX_REASON_CHARS = 1000  # a reason longer than this is cut, marked with " [...]"


def one_line(error: BaseException) -> str:
    """The whole message of ``error`` on one line: its lines stripped and joined with ``" | "``
    (a multi-line message keeps every line), at most ``MAX_REASON_CHARS`` characters."""
    lines = [" ".join(line.split()) for line in str(error).splitlines() if line.strip()]
    text = " | ".join(lines) or type(error).__name__
    if len(text) > MAX_REASON_CHARS:
        text = text[: MAX_REASON_CHARS - len(" [...]")].rstrip() + " [...]"
    return text


def write_status(run_dir: Path, status: str, reason: str = "") -> None:
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}; valid choices: {', '.join(STATUSES)}")
    write_json(
        run_dir / "status.json",
        {"status": status, "reason": reason, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
    )


def _raise_interrupted(signum, frame):
    raise Interrupted(f"stopped by signal {signal.Signals(signum).name}")


@contextmanager
def recorded_outcome(run_dir: Path, note: Callable[[], str] = str) -> Iterator[None]:
    """``running`` now; ``completed``, ``failed`` or ``interrupted`` when the block ends;
    ``note()`` is a completed run's reason (why it ended before its last round, if it did)."""
    write_status(run_dir, "running")
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_interrupted) if in_main_thread else None
    try:
        yield
    except KeyboardInterrupt as error:
        write_status(run_dir, "interrupted", one_line(error) if str(error) else "SIGINT")
        raise
    except Exception as error:
        atomic_write(run_dir / "error.log", lambda f: f.write(traceback.format_exc()))
        write_status(run_dir, "failed", one_line(error))
        raise
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
    write_status(run_dir, "completed", note())


class OneLineErrors(logging.Filter):
    """Drops the traceback from log records about flowerbed's clear errors (module doc)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and os.environ.get("FLOWERBED_TRACEBACK") != "1":
            error = record.exc_info[1]
            if isinstance(error, CLEAR_ERRORS):
                record.exc_info = None
                record.exc_text = None
        return True


# --- the exception that started a failure, in a log or an error reply ------------------------
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RECORD = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*:\s*(.*)$")  # Flower's log record


def clean(line: str) -> str:
    """A line of Flower's log without its colours and line end."""
    return ANSI.sub("", line).rstrip("\n")


EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*([A-Z]\w*(?:Error|Exception|Failed|Interrupt)): (.+)$"
)
WRAPPERS = ("ClientAppException", "RayTaskError", "ServerAppException")
FRAME = re.compile(r'^\s*File "(.+)", line (\d+), in (.+)$')


def where(path: str, line: str, function: str) -> str:
    """``.../flowerbed/trust/fault_injection.py``, 70, ``f`` ->
    ``flowerbed/trust/fault_injection.py:70 in f`` (else the file's last two parts)."""
    parts = Path(path).parts
    if "flowerbed" in parts:
        short = "/".join(parts[len(parts) - parts[::-1].index("flowerbed") - 1 :])
    else:
        short = "/".join(parts[-2:])
    return f"{short}:{line} in {function}"


def first_error(log: str) -> str | None:
    """The first exception in ``log`` that is not a wrapper (Ray's, Flower's), with where it
    was raised (its traceback's last frame): ``"RuntimeError: ...
    (flowerbed/trust/fault_injection.py:70 in fail_on_purpose)"``; None when the log holds none."""
    frame = None  # the last frame of the traceback being read
    for raw in log.splitlines():
        line = clean(raw)
        record = RECORD.match(line)
        text = (record.group(2) if record else line).strip()
        if text.startswith("Traceback (most recent call last)"):
            frame = None
        elif found := FRAME.match(text):
            frame = found.groups()
        elif (found := EXCEPTION.match(text)) is not None:
            if not any(wrapper in text for wrapper in WRAPPERS):
                message = found.group(2).removesuffix("'>").strip()
                at = f" ({where(*frame)})" if frame else ""
                return f"{found.group(1)}: {message}{at}"
            frame = None
    return None
