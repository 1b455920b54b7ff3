"""``flowerbed run`` end to end: the console command as a user types it (no exports: the
offline variables are removed from its environment), with Flower's real SuperLink and Ray
backend; and the same from a wheel installed outside the source tree.

Each test reads the command's output as it comes, so it also checks that the log streams
(the run folder's line arrives while the run still goes on), and that the local SuperLink of
the Flower home the command names is gone when it ends."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from flowerbed.core.processes import local_superlink_pids
from flowerbed.run_console import LOG_FILE, MISLEADING
from flowerbed.simulation import APP_DIR, OFFLINE_ENV

pytestmark = pytest.mark.e2e

FLOWERBED = [str(Path(sys.executable).with_name("flowerbed"))]
ONE_ROUND = ["--set", "num-server-rounds=1", "--set", "local-epochs=1"]
RESULTS = "flowerbed: results go to "


class Run:
    """``flowerbed run ...`` started in ``cwd``; its output lines with their arrival times."""

    def __init__(self, command: list[str], cwd: Path, env: dict | None = None) -> None:
        env = {k: v for k, v in (env or os.environ).items() if k not in OFFLINE_ENV}
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for _, line in self.lines):
            assert time.monotonic() < deadline and self.proc.poll() is None, self.output
            time.sleep(0.2)

    def finish(self, timeout: float = 240.0) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self.ended = time.monotonic()
        self.reader.join(timeout=10)
        print(f"{self.output[-2000:]}\n[{self.ended - self.started:.0f} s]")
        return code

    @property
    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    @property
    def last(self) -> str:
        return self.lines[-1][1]

    @property
    def run_dir(self) -> Path:
        prefix = "flowerbed run: run folder "
        (folder,) = [line[len(prefix) :] for _, line in self.lines if line.startswith(prefix)]
        return Path(folder)

    @property
    def home(self) -> Path:
        prefix = "flowerbed run: starting Flower's local SuperLink (Flower home "
        (line,) = [line for _, line in self.lines if line.startswith(prefix)]
        return Path(line[len(prefix) :].rstrip(")"))

    def status(self) -> dict:
        return json.loads((self.run_dir / "status.json").read_text())

    def check_superlink_stopped(self) -> None:
        assert local_superlink_pids(self.home) == [], "its local SuperLink is still running"

    def check_streamed(self) -> None:
        """The results line came while the run still went on, not all at the end."""
        (arrived,) = [t for t, line in self.lines if RESULTS in line]
        assert self.ended - arrived > 1.0, "the log came at the end, not as the run went"


def test_flowerbed_run_completes_names_its_run_folder_and_stops_its_superlink(tmp_path):
    run = Run(
        [*FLOWERBED, "run", *ONE_ROUND, "--clients", "3", "--set", "output-dir=runs"], tmp_path
    )
    assert run.finish() == 0
    assert run.run_dir.parent == tmp_path / "runs"  # relative to where the command ran
    assert run.status()["status"] == "completed"
    assert run.last.startswith("flowerbed run: completed [")
    # flowerbed's story, not Flower's log: short, and nothing known to mislead
    assert len(run.lines) <= 25, run.output
    for text in (*MISLEADING, "Traceback", "[ROUND", "Aggregated MetricRecord"):
        assert text not in run.output, text
    assert "flowerbed round 1/1: test acc" in run.output
    report = run.run_dir / "report.html"  # the suite turns reports off (FLOWERBED_REPORT=0)
    shown = f"flowerbed run: report {report}" in [line for _, line in run.lines]
    assert shown == report.exists()
    assert run.lines[-2][1] == f"flowerbed run: run folder {run.run_dir}"
    log = (run.run_dir / LOG_FILE).read_text()  # Flower's whole log, kept in the run folder
    assert "[ROUND 1/1]" in log and "Starting local SuperLink" in log
    history = json.loads((run.run_dir / "history.json").read_text())
    assert [row["round"] for row in history] == [0, 1]
    assert history[1]["clients_trained"] == 3
    run.check_superlink_stopped()
    run.check_streamed()


def test_a_run_that_fails_exits_1_and_says_what_its_status_json_says(tmp_path):
    """Every client fails on purpose (the test-only fault injection of
    ``flowerbed.trust.fault_injection``): the config parses, the run fails in its first round."""
    failing = ["--set", "failing-partitions=0,1,2", "--set", f"output-dir={tmp_path / 'runs'}"]
    run = Run([*FLOWERBED, "run", *ONE_ROUND, *failing, "--clients", "3"], tmp_path)
    assert run.finish() == 1
    status = run.status()
    assert (
        status["status"] == "failed"
        and "no client succeeded (3 failed; partition" in (status["reason"])
    )
    assert run.last.startswith(f"flowerbed run: failed: {status['reason']} [")
    # the last lines say why, where it was raised, and where the whole log is
    ending = [line for _, line in run.lines[-6:]]
    cause = "fails on purpose (run-config failing-partitions) (flowerbed/trust/fault_injection.py:"
    assert any(
        line.startswith("flowerbed run: first error: RuntimeError: partition") and cause in line
        for line in ending
    ), ending
    assert f"flowerbed run: Flower's whole log: {run.run_dir / LOG_FILE}" in ending
    assert "Traceback" not in run.output and "'>" not in run.output
    assert len(run.lines) <= 30, run.output
    run.check_superlink_stopped()


def test_sigterm_stops_the_run_and_its_superlink_with_status_130(tmp_path):
    rounds = ["--set", "num-server-rounds=20", "--set", f"output-dir={tmp_path / 'runs'}"]
    run = Run([*FLOWERBED, "run", *rounds, "--clients", "2"], tmp_path)
    run.wait_for(RESULTS, timeout=180.0)
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish(timeout=60.0) == 130
    assert run.status()["status"] == "interrupted"
    assert run.last.startswith("flowerbed run: interrupted; the run says interrupted")
    run.check_superlink_stopped()


def wheel_of_this_tree(out: Path) -> Path:
    """``pip wheel`` of the source tree (with hatchling from the venv when it is there)."""
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-build-isolation"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(out)]
        + [str(APP_DIR)],
        check=True,
        timeout=300,
    )
    (wheel,) = out.glob("flowerbed-*.whl")
    return wheel


def test_the_wheel_runs_outside_the_source_tree(tmp_path):
    target, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    wheel = wheel_of_this_tree(tmp_path / "dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
        + [str(wheel)],
        check=True,
        timeout=300,
    )
    assert not (target / "pyproject.toml").exists()
    # the ServerApp says where it imported flowerbed from (only this test's copy is changed)
    with open(target / "flowerbed" / "server_app.py", "a") as f:
        f.write(
            "\nfrom flwr.common.logger import log as _log\n\n"
            '_log(20, "flowerbed: ServerApp imported from %s", __file__)\n'
        )
    env = {**os.environ, "PYTHONPATH": str(target)}  # before the editable install's entry
    where = subprocess.run(
        [sys.executable, "-c", "import flowerbed; print(flowerbed.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(target), where
    command = [sys.executable, "-m", "flowerbed.cli", "run", *ONE_ROUND, "--clients", "2"]
    run = Run([*command, "--set", "output-dir=runs"], elsewhere, env)
    assert run.finish() == 0
    assert run.status()["status"] == "completed"
    assert run.run_dir.parent == elsewhere / "runs"
    server_app = target / "flowerbed" / "server_app.py"
    assert f"flowerbed: ServerApp imported from {server_app}" in run.output
    run.check_superlink_stopped()
