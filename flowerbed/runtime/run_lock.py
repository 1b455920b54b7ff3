"""A live run holds its run folder: ``run.lock``, refreshed by a heartbeat, removed at the end.

``run.lock`` is created (exclusively) before the run writes its status, and removed after its
last status is written. It is JSON::

    {"pid": 1234, "host": "node-7", "boot_id": "...", "pid_namespace": "pid:[4026531836]",
     "process_start": 8812345, "started": "2025-01-01T12:00:00+0000",
     "heartbeat": 1735732800.5, "heartbeat_every": 10, "token": "..."}

``process_start`` is the process's start time (``/proc/<pid>/stat`` field 22, in clock ticks
since boot; ``null`` where there is no ``/proc``); ``heartbeat`` (seconds since the epoch) is
rewritten every ``HEARTBEAT_SECONDS`` by a daemon thread, which stops when the run ends;
``token`` tells this lock from a later one at the same path.

Whether a lock is alive (``holder``):

* on the same machine (the same host name, boot and PID namespace: a container with the host's
  name but its own PIDs is another machine here) the process decides: alive while a process
  with that PID runs, is no zombie and started when the lock says (a reused PID is not the
  run's process); the heartbeat does not matter;
* from another machine only the heartbeat can tell: alive while the newer of ``heartbeat`` and
  the file's mtime is at most ``STALE_SECONDS`` old (a frozen process or a clock skew of more
  than that reads as dead);
* a lock file that cannot be read (being written) is alive while its mtime is that fresh.

A run whose ``status.json`` says ``running`` but whose lock is dead, or which holds no lock
(a run of an older flowerbed, a deleted lock), died without a word (SIGKILL, a crash of the
machine): ``settled_status`` rewrites it as ``interrupted`` with why, whoever looks (resume,
``flowerbed.sweep.folder.point_state``). So ``status.json`` tells a killed run from a live one
within ``STALE_SECONDS`` (at once on the run's own machine).

``hold`` takes the lock: a live one is refused with one ``FolderBusy`` line naming its PID and
host (resume, or a second process writing the same folder); a dead one is broken (renamed
aside, then checked to be the one judged dead, so two takers cannot both win).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ..core.results import atomic_write
from ..settings import ConfigError
from .outcome import write_status

LOCK_FILE = "run.lock"
STATUS_FILE = "status.json"
HEARTBEAT_SECONDS = 10.0
STALE_SECONDS = 60.0


class FolderBusy(ConfigError):
    """A live run holds the folder."""


# --- this machine and its processes -----------------------------------------------------------
def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def machine() -> dict[str, str]:
    """What tells this machine's PIDs from another's: host name, boot, PID namespace."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return {
        "host": socket.gethostname(),
        "boot_id": _read("/proc/sys/kernel/random/boot_id"),
        "pid_namespace": namespace,
    }


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3... of ``/proc/<pid>/stat`` (after the command name, which may hold spaces)."""
    stat = _read(f"/proc/{pid}/stat")
    return stat[stat.rfind(")") + 2 :].split() if ")" in stat else None


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (field 22), if known."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def process_alive(pid: int, started: int | None) -> bool:
    """A process ``pid`` runs (no zombie) and, when ``started`` is known, started then."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    fields = _proc_stat(pid)
    if fields is None:  # no /proc: the PID's existence is all there is
        return True
    if fields[0] in ("Z", "X"):  # killed, not reaped yet
        return False
    return started is None or process_start(pid) in (None, started)


# --- the lock file --------------------------------------------------------------------------
def lock_path(run_dir: Path) -> Path:
    return Path(run_dir) / LOCK_FILE


def lock_record(token: str) -> dict:
    """The lock this process writes (module docstring)."""
    pid = os.getpid()
    return {
        "pid": pid,
        **machine(),
        "process_start": process_start(pid),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "heartbeat": time.time(),
        "heartbeat_every": HEARTBEAT_SECONDS,
        "token": token,
    }


def read_lock(run_dir: Path) -> dict | None:
    """The lock's content; ``None`` when there is none; ``{}`` when it cannot be read."""
    try:
        content = json.loads(lock_path(run_dir).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


@dataclass(frozen=True)
class Holder:
    """What a look at a folder's lock found: ``alive``, and who (``who``: PID and host) or why
    it is dead (``why``)."""

    alive: bool
    who: str
    why: str = ""
    token: str | None = None


def holder(run_dir: Path) -> Holder | None:
    """The folder's lock judged (module docstring); ``None`` when the folder holds none."""
    content = read_lock(run_dir)
    try:
        mtime = lock_path(run_dir).stat().st_mtime
    except FileNotFoundError:
        return None
    if content is None:
        return None
    beat = content.get("heartbeat")
    age = time.time() - max(mtime, beat if isinstance(beat, (int, float)) else mtime)
    fresh = age <= STALE_SECONDS
    pid, host = content.get("pid"), content.get("host")
    if not isinstance(pid, int) or pid <= 0 or not isinstance(host, str):
        why = f"its lock file {LOCK_FILE} cannot be read and is {age:.0f} s old"
        return Holder(fresh, f"a lock file {LOCK_FILE} being written", why)
    who = f"PID {pid} on host {host}"
    token = content.get("token")
    # (Windows' os.kill would terminate the process: there only the heartbeat tells)
    if os.name != "nt" and all(content.get(key) == value for key, value in machine().items()):
        if process_alive(pid, content.get("process_start")):
            return Holder(True, f"{who}, started {content.get('started')}", token=token)
        return Holder(False, who, f"its process ({who}) is gone", token)
    if fresh:
        return Holder(True, f"{who}, heartbeat {age:.0f} s ago", token=token)
    return Holder(False, who, f"its heartbeat ({who}) stopped {age:.0f} s ago", token)


def busy_message(what: str, found: Holder) -> str:
    return (
        f"{what}: a live run holds this run folder ({found.who}); wait for it to end or stop it"
        " first"
    )


class RunLock:
    """This process's lock on a run folder (``hold``), refreshed until ``release``; also a
    context manager that releases it when the block ends."""

    def __init__(self, run_dir: Path, record: dict) -> None:
        self.run_dir = Path(run_dir)
        self.record = record
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"flowerbed-lock-{self.run_dir.name}", daemon=True
        )
        self._thread.start()

    def ours(self) -> bool:
        return (read_lock(self.run_dir) or {}).get("token") == self.record["token"]

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            if not self.ours():
                return  # taken over (this process was judged dead): never overwrite another's
            self.record = {**self.record, "heartbeat": time.time()}
            try:
                atomic_write(lock_path(self.run_dir), lambda f, r=self.record: json.dump(r, f))
            except OSError:
                pass  # a full disk: the next beat tries again

    def release(self) -> None:
        """Stop the heartbeat and remove the lock, if it is still this one."""
        self._stop.set()
        self._thread.join()
        if self.ours():
            lock_path(self.run_dir).unlink(missing_ok=True)

    def __enter__(self) -> None:
        pass

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()


def _create(path: Path, record: dict) -> bool:
    """Create the lock file exclusively; False when there is one."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
    return True


def _break(run_dir: Path, dead: Holder, token: str) -> None:
    """Remove the lock judged dead; a lock that replaced it meanwhile is put back."""
    path = lock_path(run_dir)
    aside = path.with_name(f".{LOCK_FILE}.{token}.dead")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # another taker broke it first
    try:
        moved = json.loads(aside.read_text()).get("token")
    except (OSError, ValueError, AttributeError):
        moved = None
    if moved != dead.token:  # a fresh lock another process just took: give it back
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
    aside.unlink(missing_ok=True)


def hold(run_dir: Path, what: str) -> RunLock:
    """Take ``run_dir``'s lock (module docstring); ``FolderBusy`` names the live holder, with
    ``what`` (the key or folder) first."""
    token = secrets.token_hex(8)
    for _ in range(5):
        record = lock_record(token)
        try:
            if _create(lock_path(run_dir), record):
                return RunLock(run_dir, record)
        except OSError as error:
            raise ConfigError(
                f"{what}: cannot write the lock {lock_path(run_dir)} ({error.strerror or error});"
                " a run needs a folder it can write"
            ) from None
        found = holder(run_dir)
        if found is not None and found.alive:
            raise FolderBusy(busy_message(what, found))
        if found is not None:
            _break(run_dir, found, token)
    raise FolderBusy(f"{what}: another process keeps taking this run folder's lock {LOCK_FILE}")


# --- status.json as whoever looks sees it ----------------------------------------------------
def settled_status(run_dir: Path) -> dict:
    """``status.json``, with a ``running`` run whose lock is dead or missing rewritten as
    ``interrupted`` (with why); the file is rewritten too where it can be. ``OSError`` or
    ``ValueError`` for a status that cannot be read."""
    status = json.loads((Path(run_dir) / STATUS_FILE).read_text())
    if not isinstance(status, dict):
        raise ValueError(f"{STATUS_FILE} holds no JSON object")  # noqa: TRY004 - bad content
    if status.get("status") != "running":
        return status
    found = holder(run_dir)
    if found is not None and found.alive:
        return status
    why = (
        found.why
        if found is not None
        else f"it holds no {LOCK_FILE} (a run of an older flowerbed, or the lock was deleted)"
    )
    reason = f"the run stopped without a word: {why}"
    latest = holder(run_dir)
    if latest is not None and latest.alive:  # a resumed run took the folder since the look above
        return json.loads((Path(run_dir) / STATUS_FILE).read_text())
    try:
        write_status(run_dir, "interrupted", reason)
    except OSError:  # a folder this process cannot write: report it all the same
        pass
    return {**status, "status": "interrupted", "reason": reason}
