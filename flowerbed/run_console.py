"""What ``flowerbed run`` shows of a run: flowerbed's story, not Flower's verbose log.

Flower's log (``flwr run --stream``: the CLI, the SuperLink's simulation, the ServerApp, Ray's
actors) goes, whole, into ``flower.log`` in the run folder (in the Flower home when no run
folder appears: the ServerApp failed before making one). The terminal gets:

* the phases of the start-up, said once each (``PHASES``: the SuperLink, the run and its
  SuperNodes), and on a terminal a live status line with the seconds spent in the current one;
* flowerbed's own log records (``flowerbed: ...``, ``flowerbed round ...``) with their
  continuation lines (the label-count table), at most ``MAX_WARNINGS`` warnings in a row
  (the rest are counted, and in the log);
* with ``verbose``, every line of Flower's log instead, except the ones known to mislead
  (``MISLEADING``: advice about the federation size that ``--clients`` sets, a default Flower
  configuration nobody asked for, an actor stopped on purpose), which are never shown.

``runtime.outcome.first_error`` reads the log for the exception that started a failure, and where
it was raised; ``flowerbed run`` prints it, with the log's path, when a run does not complete.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .runtime.outcome import RECORD, clean
from .simulation import RESULTS_LINE

LOG_FILE = "flower.log"
OWN = ("flowerbed:", "flowerbed round")
MISLEADING = (
    "default simulated SuperNodes changed from",  # flowerbed sets the federation's size
    "To change federation size",  # advice for Flower's CLI, not --clients
    "flwr federation simulation-config",
    "Flower configuration not found",  # a fresh Flower home is made for every run
    "Manually terminating ClientAppActor",  # Ray's actors stopped at the end, on purpose
)
# (Flower's line, the phase it starts): said once, as ``flowerbed run: <phase>``
PHASES = (
    (
        "Successfully started run",
        "run {run} started: {clients} simulated SuperNodes come up on Ray",
    ),
)
# (Flower's line, what the live status line then says)
STATUS = (
    ("Starting local SuperLink", "starting Flower's local SuperLink"),
    ("Successfully started run", "starting the SuperNodes and the ServerApp"),
    ("Successfully installed", "the ServerApp starts"),
    ("flowerbed: loading", "loading the data"),
    ("flowerbed: asking", "waiting for the nodes' handshake"),
    ("flowerbed: results go to", "round 1"),
    ("flowerbed: final", "writing the report"),
)
ROUND = re.compile(r"^flowerbed round (\d+)/(\d+)")
MAX_WARNINGS = 5  # flowerbed warnings shown in a row before the rest are only counted
MAX_CHARS = 400  # a longer line than this (not a round's) is cut on the terminal


@dataclass
class Shown:
    """What the last record was: whether its continuation lines are shown."""

    own: bool = False
    warnings: int = 0
    hidden_warnings: int = 0


class RunConsole:
    """Feed it Flower's log line by line (``feed``); it writes the whole log to the run folder's
    ``flower.log`` and flowerbed's story to ``out`` (module doc). ``close`` ends the status line
    and the log file."""

    def __init__(
        self, clients: int, verbose: bool = False, out: IO[str] | None = None, prefix: str = ""
    ) -> None:
        self.clients, self.verbose = clients, verbose
        self.out = sys.stdout if out is None else out
        self.prefix = prefix
        self.live = bool(getattr(self.out, "isatty", lambda: False)())
        self.lock = threading.Lock()
        self.pending: list[str] = []  # the log before the run folder is known
        self.log_file: IO[str] | None = None
        self.log_path: Path | None = None
        self.run_dir: Path | None = None
        self.shown = Shown()
        self.said: set[str] = set()
        self.status, self.status_since = "starting Flower's local SuperLink", time.monotonic()
        self.status_drawn = False
        self.stopped = threading.Event()
        self.ticker = threading.Thread(target=self._tick, name="run-console", daemon=True)
        if self.live:
            self.ticker.start()

    # --- the terminal ---------------------------------------------------------------------
    def say(self, text: str) -> None:
        """One line of flowerbed's story on the terminal (the status line redrawn under it)."""
        with self.lock:
            self._erase_status()
            self.out.write(text + "\n")
            self._draw_status()
            self.out.flush()

    def _erase_status(self) -> None:
        if self.status_drawn:
            self.out.write("\r\x1b[K")
            self.status_drawn = False

    def _draw_status(self) -> None:
        if self.live and not self.stopped.is_set():
            seconds = time.monotonic() - self.status_since
            self.out.write(f"  ... {self.status} ({seconds:.0f} s)")
            self.status_drawn = True

    def _tick(self) -> None:
        while not self.stopped.wait(1.0):
            with self.lock:
                self._erase_status()
                self._draw_status()
                self.out.flush()

    def _set_status(self, text: str) -> None:
        if text != self.status:
            self.status, self.status_since = text, time.monotonic()

    # --- Flower's log -------------------------------------------------------------------------
    def feed(self, raw: str) -> None:
        line = clean(raw)
        self._keep(line)
        if any(text in line for text in MISLEADING):
            return
        if self.verbose:
            self.say(line)
            return
        self._follow(line)
        shown = self._shown(line)
        if shown is not None:
            self.say(shown)

    def _follow(self, line: str) -> None:
        """The phases and the status line, from the lines that mark them."""
        for marker, phase in PHASES:
            if marker in line and marker not in self.said:
                self.said.add(marker)
                run = line.rsplit(" ", 1)[-1]
                self.say(f"{self.prefix}{phase.format(run=run, clients=self.clients)}")
        for marker, status in STATUS:
            if marker in line:
                self._set_status(status)
        record = RECORD.match(line)
        message = record.group(2) if record else line
        if match := ROUND.match(message):
            done, total = int(match.group(1)), int(match.group(2))
            if done < total:
                self._set_status(f"round {done + 1} of {total}")

    def _shown(self, line: str) -> str | None:
        """The text to show for ``line``, None to keep it in the log only."""
        record = RECORD.match(line)
        if record is None:  # a continuation of the last record, Flower's CLI, or Ray's output
            if self.shown.own and not line.startswith("("):
                return line
            return None
        level, message = record.groups()
        self.shown.own = message.startswith(OWN)
        if not self.shown.own:
            return None
        if level in ("WARNING", "ERROR", "CRITICAL"):
            self.shown.warnings += 1
            if self.shown.warnings > MAX_WARNINGS:
                self.shown.hidden_warnings += 1
                self.shown.own = False
                return None
            message = f"{message} [{level.lower()}]"
        else:
            self.shown.warnings = 0
            if self.shown.hidden_warnings:
                hidden, self.shown.hidden_warnings = self.shown.hidden_warnings, 0
                self.say(f"{self.prefix}{hidden} more warnings, in {self.log_name()}")
        if not message.startswith("flowerbed round") and len(message) > MAX_CHARS:
            message = message[: MAX_CHARS - 3] + "..."
        return message

    # --- the log file ---------------------------------------------------------------------
    def log_name(self) -> str:
        return str(self.log_path) if self.log_path is not None else LOG_FILE

    def _keep(self, line: str) -> None:
        found = RESULTS_LINE.search(line)
        if found and self.log_file is None:
            self.run_dir = Path(found.group(1))
            self._open_log(self.run_dir / LOG_FILE)
        if self.log_file is None:
            self.pending.append(line)
        else:
            self.log_file.write(line + "\n")
            self.log_file.flush()

    def _open_log(self, path: Path) -> None:
        try:
            # open for the run's length, closed by close(); a resumed run's log goes on
            self.log_file = open(path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError:
            return
        self.log_path = path
        for line in self.pending:
            self.log_file.write(line + "\n")
        self.pending.clear()

    def close(self, fallback_folder: Path) -> Path | None:
        """Stop the status line; the log goes to ``fallback_folder`` when no run folder
        appeared. Returns the log's path (None when it could not be written)."""
        self.stopped.set()
        if self.live:
            self.ticker.join(timeout=2.0)
        with self.lock:
            self._erase_status()
            self.out.flush()
        if self.log_file is None:
            self._open_log(fallback_folder / LOG_FILE)
        if self.log_file is not None:
            self.log_file.close()
        return self.log_path
