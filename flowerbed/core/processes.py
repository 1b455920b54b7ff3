"""The processes of a local Flower run: list them, find a process tree, stop it, and stop it
when its owner dies.

``flwr run`` with the default ``:local:`` connection starts a detached SuperLink (with its
SuperExec, the simulation runtime and Ray under it) that outlives the command. The process that
asked for it (``simulation.simulate``) stops it by PID when the run ends, however it ends in
Python (an exception, Ctrl-C). A process killed by SIGKILL (the kernel's out-of-memory killer,
``kill -9``) runs no ``finally``: for that, ``watch_owner`` starts a small watcher process
(``python -m flowerbed.core.processes OWNER HOME``, which imports nothing heavy) that polls
every half second whether its parent, the owner, is still its parent; once it is not (the
owner died and the watcher was handed to another parent), it stops the SuperLink of that
Flower home with every process under it and exits. The owner stops the watcher when the run
ends normally.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

WATCH_INTERVAL = 0.5  # seconds between two looks at the owner


def local_superlink_pids(flwr_home: Path) -> list[int]:
    """PIDs of SuperLinks started for this Flower home (their database lives in it)."""
    marker = str(flwr_home / "local-superlink")
    return [pid for pid, _, args in processes() if "flower-superlink" in args and marker in args]


def processes() -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of every process."""
    out = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=False
    ).stdout
    rows = [line.split(None, 2) for line in out.splitlines()]
    return [(int(row[0]), int(row[1]), row[2] if len(row) > 2 else "") for row in rows]


def with_descendants(pids: list[int]) -> list[int]:
    """``pids`` and every process started under them (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for pid, parent, _ in processes():
        children.setdefault(parent, []).append(pid)
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def stop_local_superlink(flwr_home: Path) -> None:
    """Stop this Flower home's SuperLinks with the processes they started (SuperExec, the
    simulation runtime: one still waiting for a Ray cluster would otherwise linger)."""
    stop_pids(with_descendants(local_superlink_pids(flwr_home)))


def ended(pid: int) -> bool:
    """Whether process ``pid`` has ended: gone, or a zombie (ended; its parent has not read its
    exit status yet, which a parent that died never will)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):  # ended meanwhile, or no /proc (macOS): it runs
        return False


def stop_pids(pids: list[int], timeout: float = 10.0) -> None:
    """SIGTERM to each of ``pids``; SIGKILL to those that have not ended ``timeout`` seconds
    later."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            if ended(pid):
                break
            time.sleep(0.2)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def watch_owner(flwr_home: Path) -> subprocess.Popen:
    """Start the watcher of this process's SuperLink in ``flwr_home`` (module docstring);
    stop it with ``.terminate()`` when the run is over."""
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding flowerbed/
    pythonpath = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-m", __name__, str(os.getpid()), str(flwr_home)],
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": pythonpath},  # found from any working folder
        start_new_session=True,  # a Ctrl-C to the owner's terminal is the owner's to handle
    )


def stop_when_orphaned(owner: int, flwr_home: Path, interval: float = WATCH_INTERVAL) -> None:
    """Wait while ``owner`` is this process's parent; then stop ``flwr_home``'s SuperLink."""
    while os.getppid() == owner:
        time.sleep(interval)
    stop_local_superlink(flwr_home)


if __name__ == "__main__":
    stop_when_orphaned(int(sys.argv[1]), Path(sys.argv[2]))
