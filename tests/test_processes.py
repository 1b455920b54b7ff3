"""A local SuperLink does not outlive the process that started it, even one killed by SIGKILL:
the owner's watcher stops it (and what it started), and leaves it alone while the owner lives."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from flowerbed.core.processes import ended, local_superlink_pids, watch_owner, with_descendants

# a stand-in for `flower-superlink --database <home>/local-superlink/...`: a process whose command
# line names both, with a child of its own (the SuperExec, the simulation, Ray)
FAKE_SUPERLINK = (
    "import subprocess, sys, time;"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']);"
    "time.sleep(120)"
)
# an owner that starts the watcher, says its PID, and waits to be killed
OWNER = (
    "import sys, time; from pathlib import Path;"
    "from flowerbed.core.processes import watch_owner;"
    "watcher = watch_owner(Path(sys.argv[1])); print(watcher.pid, flush=True); time.sleep(120)"
)


def alive(pid: int) -> bool:
    return not ended(pid)


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def start_fake_superlink(home: Path) -> subprocess.Popen:
    marker = str(home / "local-superlink" / "state.db")
    link = subprocess.Popen([sys.executable, "-c", FAKE_SUPERLINK, "flower-superlink", marker])
    assert wait_until(lambda: len(with_descendants(local_superlink_pids(home))) == 2, 10)
    return link


def start_owner(home: Path) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(home)], stdout=subprocess.PIPE, text=True, env=env
    )
    return owner, int(owner.stdout.readline())


def test_a_killed_owners_superlink_and_its_children_are_stopped(tmp_path):
    link = start_fake_superlink(tmp_path)
    tree = with_descendants([link.pid])
    owner, watcher = start_owner(tmp_path)
    try:
        time.sleep(1.5)  # three looks of the watcher: the owner lives, nothing is stopped
        assert all(alive(pid) for pid in tree) and alive(watcher)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert wait_until(lambda: not any(alive(pid) for pid in tree), 15)
        assert wait_until(lambda: not alive(watcher), 5)  # its work done, it ends
        assert local_superlink_pids(tmp_path) == []
    finally:
        for pid in [*tree, watcher, owner.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        link.wait()


def test_a_zombie_has_ended_and_a_running_process_has_not():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        assert not ended(child.pid) and not ended(os.getpid())
        child.kill()
        assert wait_until(lambda: ended(child.pid), 5)  # a zombie until it is waited for
    finally:
        child.wait()
    assert ended(child.pid)  # gone


def test_the_watcher_of_a_run_that_ended_normally_stops_nothing(tmp_path):
    link = start_fake_superlink(tmp_path)
    watcher = watch_owner(tmp_path)
    try:
        time.sleep(1.0)
        watcher.terminate()  # what simulate does once it has stopped the SuperLink itself
        assert watcher.wait(timeout=5) != 0
        assert alive(link.pid)  # here nobody stopped it: the watcher did not either
    finally:
        for pid in with_descendants([link.pid]):
            os.kill(pid, signal.SIGKILL)
        link.wait()
