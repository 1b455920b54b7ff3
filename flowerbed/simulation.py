"""Run ``flwr run .`` as a subprocess in an isolated Flower home, and clean up after it.

``flwr run .`` with the default ``:local:`` connection starts a detached local SuperLink that
outlives the command. ``simulate`` gives it its own ``FLWR_HOME`` and free ports, disables
Flower's per-run dependency reinstall, telemetry and update check (no network needed), and
stops that SuperLink, with the processes it started, by PID when the run is over, or, if
this process is killed outright, a watcher does (``core.processes``). Tests and
benchmarks use it; ``flwr_run_command`` gives the same command line and environment to a
caller that runs and watches the process itself.

``ray_address`` runs the simulation on an existing Ray cluster (``RAY_ADDRESS`` for the run's
SuperLink; see ``flowerbed.ray_cluster``), checked before anything starts.

The app ``flwr run`` is given is a folder holding a ``pyproject.toml``. ``simulate`` runs a
generated one unless given another (``app_dir``): ``generated_app`` writes, for any install (a
wheel has no pyproject.toml beside the package), ``[project]`` name and version from the
installed distribution, ``[tool.flwr.app]`` with the components ``flowerbed.server_app:app``
and ``flowerbed.client_app:app`` and every run-config key's declared default, and nothing
else. Flower bundles only that file into the FAB, so the SuperLink's ServerApp and the Ray
actors import flowerbed from where this process imports it (``flwr_run_command`` puts that
folder on ``PYTHONPATH`` if a child would not find it). ``flowerbed run`` and ``flowerbed sweep
--via flwr`` use it too, so an editable install and a wheel run the same.

Why not the repository (``APP_DIR``, what ``flwr run .`` bundles in a source tree): ``flwr
run`` lists every file under the app folder before it filters them (``os.walk``), a ``.venv``
there included, so bundling the repository with the README's virtual environment inside
takes about 12 s of every run on a 2-core machine, against well under a second for the
generated folder (``benchmarks/round_stages.py`` measures start-up).

How many SuperNodes (``federation_layout``, what ``flowerbed run --clients N`` starts): one per
client up to ``VIRTUAL_ABOVE`` clients; above, at most ``VIRTUAL_ABOVE`` SuperNodes (as many as
the largest sample of a round) carry the N clients (run-config ``virtual-clients``,
``runtime.virtual_clients``), so that Flower's engine, whose cost grows with its SuperNodes,
works for the sample, not the federation. Protocols that keep client state outside the FL
rounds, and a site's own data, keep one SuperNode per client.

Usage::

    result = simulate({"num-server-rounds": 2, "output-dir": "/tmp/out"}, num_supernodes=10)
    result.run_dir, result.history, result.seconds
    simulate(run_config, num_supernodes=100, ray_address="10.0.0.5:6379")  # on a Ray cluster
    with generated_app() as app:  # the app as any install has it
        simulate(run_config, app_dir=app, on_line=print)  # Flower's log line by line
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import flowerbed

from .catalog import PROTOCOLS, parse_run_config, pyproject_defaults
from .core.device import check_client_gpus
from .core.processes import local_superlink_pids, stop_local_superlink, stop_pids, watch_owner
from .data.site_reports import nodes_report_data
from .ray_cluster import check_ray_cluster
from .runtime.outcome import write_status

PACKAGE_ROOT = Path(flowerbed.__file__).resolve().parent.parent  # the folder holding flowerbed/
APP_DIR = PACKAGE_ROOT  # in a source tree: the app of `flwr run .` (pyproject.toml + flowerbed/)
COMPONENTS = {"serverapp": "flowerbed.server_app:app", "clientapp": "flowerbed.client_app:app"}

OFFLINE_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "RAY_DEDUP_LOGS": "0",
}


VIRTUAL_ABOVE = 100  # clients: above, SuperNodes carry virtual clients (module docstring)


def federation_layout(run_config: dict, clients: int) -> tuple[int, dict]:
    """(SuperNodes to start, run config) for a simulation of ``clients`` clients (module
    docstring). A run config that sets ``virtual-clients`` itself is left as it is."""
    config = parse_run_config(run_config)
    if (
        clients <= VIRTUAL_ABOVE
        or "virtual-clients" in run_config
        or nodes_report_data(config)
        or not PROTOCOLS[config.strategy].protocol(config).resumable
    ):
        return clients, run_config
    sample = max(1, int(clients * config.fraction_train), int(clients * config.fraction_evaluate))
    return min(sample, VIRTUAL_ABOVE), {**run_config, "virtual-clients": clients}


@dataclass
class SimulationResult:
    returncode: int
    log: str
    run_dir: Path | None
    seconds: float
    ended_early: str = ""  # why flwr run returned before the run ended (``unfinished_run``)

    @property
    def history(self) -> list[dict]:
        if self.run_dir is None:
            raise RuntimeError(f"the run wrote no results; its log ends with:\n{self.log[-3000:]}")
        return json.loads((self.run_dir / "history.json").read_text())


def app_pyproject() -> str:
    """The pyproject.toml of a generated app (module doc): all Flower needs to build the FAB
    (``[project]`` name and version; ``[tool.flwr.app]`` publisher, components and config)."""
    components = "\n".join(f'{name} = "{ref}"' for name, ref in COMPONENTS.items())
    return f"""\
# Generated by flowerbed {flowerbed.__version__} for `flwr run`; the package itself is imported
# from where it is installed ({PACKAGE_ROOT}).
[project]
name = "flowerbed"
version = "{flowerbed.__version__}"
description = "flowerbed's Flower app, from the installed package"
license = "Apache-2.0"

[tool.flwr.app]
publisher = "flowerbed"

[tool.flwr.app.components]
{components}

[tool.flwr.app.config]
{pyproject_defaults()}
"""


@contextmanager
def generated_app() -> Iterator[Path]:
    """A temporary app folder holding only a generated pyproject.toml (``app_pyproject``),
    removed when the block ends."""
    parent = Path(tempfile.mkdtemp(prefix="flowerbed-app-"))
    app = parent / "flowerbed"  # Flower names the app after [project]; the folder alike
    app.mkdir()
    (app / "pyproject.toml").write_text(app_pyproject())
    try:
        yield app
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def toml_value(value) -> str:
    """A run-config value as TOML writes it (a string as a basic string: JSON's escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def format_run_config(run_config: dict) -> str:
    """``{"a": 1, "b": "x"}`` -> ``a=1 b='x'`` (TOML values, as ``--run-config`` wants; a
    string holding ``'`` goes in double quotes, and one holding both kinds has no form)."""

    def toml(value):
        if isinstance(value, str) and "'" not in value:
            return "'" + value + "'"
        return toml_value(value)

    return " ".join(f"{key}={toml(value)}" for key, value in run_config.items())


def child_pythonpath(environ: dict[str, str]) -> str | None:
    """``PYTHONPATH`` for the processes of a run, so that they import flowerbed from where this
    process does: ``PACKAGE_ROOT`` put first unless a new interpreter finds it anyway (on
    ``sys.path`` past its first entry, the script's folder: from site-packages, a .pth file or
    ``PYTHONPATH``). None: leave ``PYTHONPATH`` as it is."""
    if str(PACKAGE_ROOT) in [str(Path(p).resolve()) for p in sys.path[1:] if p]:
        return None
    current = environ.get("PYTHONPATH", "")
    return os.pathsep.join([str(PACKAGE_ROOT), *([current] if current else [])])


def flwr_run_command(
    run_config: dict,
    num_supernodes: int,
    num_cpus_per_client: int,
    flwr_home: Path,
    app_dir: Path = APP_DIR,
    ray_address: str | None = None,
    num_gpus_per_client: float = 0.0,
) -> tuple[list[str], dict[str, str]]:
    """The ``flwr run`` command line and environment of one isolated simulation (module doc)."""
    env = {
        **os.environ,
        **OFFLINE_ENV,
        "FLWR_HOME": str(flwr_home),
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
    }
    if (pythonpath := child_pythonpath(env)) is not None:
        env["PYTHONPATH"] = pythonpath
    # flwr starts flower-superlink by name: find it beside this interpreter, so that
    # ``.venv/bin/flowerbed run`` works without activating the environment
    scripts = str(Path(sys.executable).parent)
    if scripts not in env.get("PATH", "").split(os.pathsep):
        env["PATH"] = os.pathsep.join(filter(None, (scripts, env.get("PATH"))))
    if ray_address is not None:
        env["RAY_ADDRESS"] = ray_address
    flwr = str(Path(sys.executable).with_name("flwr"))
    federation = f"num-supernodes={num_supernodes} client-resources-num-cpus={num_cpus_per_client}"
    if num_gpus_per_client:
        federation += f" client-resources-num-gpus={num_gpus_per_client}"
    command = [flwr, "run", str(app_dir), "--stream", "--federation-config", federation]
    if run_config:  # as a file: any string survives (Flower's key=value parser splits quotes)
        path = Path(flwr_home) / "run-config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{key} = {toml_value(v)}\n" for key, v in run_config.items()))
        command += ["--run-config", str(path)]
    return command, env


SUPERLINK_TOO_SLOW = "Failed to start local SuperLink within"
SUPERLINK_TRIES = 3  # `flwr run` tries in all when its SuperLink is too slow to start
RESULTS_LINE = re.compile(
    r"flowerbed: results go to (.+?)(?: \(a resumed run\))?\s*$", re.MULTILINE
)
RUN_STARTED = re.compile(r"Successfully started run (\d+)")
FINISHED = "finished"  # how a run that has ended starts its status in ``flwr ls``


def run_command(
    command: list[str],
    env: dict,
    cwd: Path,
    timeout: float | None,
    on_line: Callable[[str], None] | None = None,
) -> tuple[str, int]:
    """Output (stdout and stderr as they interleave) and exit status of ``command``; -1 and the
    output so far when it runs past ``timeout`` seconds (None: no limit). ``on_line`` gets each
    line as it comes. The process is stopped if this one is interrupted (then the exception
    goes on)."""
    proc = subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        bufsize=1,
    )
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if on_line is not None:
                on_line(line)

    reader = threading.Thread(target=read, name="flwr-run-output", daemon=True)
    reader.start()
    try:
        returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        returncode = -1
    finally:
        if proc.poll() is None:  # past the timeout, or this process was interrupted
            stop_pids([proc.pid], timeout=5.0)
            proc.wait()
        reader.join(timeout=5.0)
    return "".join(lines), returncode


def run_with_retry(
    command: list[str],
    env: dict,
    cwd: Path,
    timeout: float | None,
    on_line: Callable[[str], None] | None = None,
) -> tuple[str, int]:
    """``run_command``, started again (``SUPERLINK_TRIES`` in all) when ``flwr run`` gave up
    waiting for its local SuperLink: Flower waits 15 s, and on a busy machine the SuperLink
    comes up later (the same command then uses it) or was killed by Flower (the same command
    then starts another)."""
    started = time.monotonic()
    log, returncode = run_command(command, env, cwd, timeout, on_line)
    output = log
    for _ in range(SUPERLINK_TRIES - 1):
        if SUPERLINK_TOO_SLOW not in output:
            break
        if local_superlink_pids(Path(env["FLWR_HOME"])):
            wait_for_local_superlink(env, timeout=120.0)
        remaining = None if timeout is None else max(1.0, timeout - (time.monotonic() - started))
        output, returncode = run_command(command, env, cwd, remaining, on_line)
        log += output
    return log, returncode


def wait_for_local_superlink(env: dict, timeout: float) -> bool:
    """True once the local SuperLink of ``env`` answers Flower's health probe (the check
    ``flwr run`` makes before it starts one) within ``timeout`` seconds."""
    url = f"http://127.0.0.1:{env['FLWR_LOCAL_SUPERLINK_HTTP_API_PORT']}/health"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2.0) as response:
                if response.status == 200:
                    return True
        except OSError:  # URLError and connection errors: not up yet
            pass
        time.sleep(0.5)
    return False


def results_folder(log: str) -> Path | None:
    """The run folder the ServerApp named in ``log`` (its last ``results go to`` line)."""
    found = RESULTS_LINE.findall(log)
    return Path(found[-1]) if found else None


def simulate(
    run_config: dict,
    num_supernodes: int = 10,
    num_cpus_per_client: int = 1,
    timeout: float | None = 900.0,
    flwr_home: Path | None = None,
    app_dir: Path | None = None,
    ray_address: str | None = None,
    num_gpus_per_client: float = 0.0,
    on_line: Callable[[str], None] | None = None,
    cwd: Path | None = None,
) -> SimulationResult:
    """Run one simulation of the app in ``app_dir`` and return its log and results folder.

    ``app_dir``: None runs ``generated_app()`` (module docstring). ``ray_address`` (``host:port`` of a Ray head, or ``ray://host:port``) runs
    it on that existing cluster, after checking that the head answers (``ConfigError`` if not,
    before anything starts); None leaves ``RAY_ADDRESS`` as this process's environment has it.
    ``num_gpus_per_client``: Ray's ``client-resources-num-gpus`` (a fraction shares a GPU);
    more than this machine has is a ``ConfigError`` before anything starts. ``on_line`` gets
    each line of Flower's log as it comes; ``cwd`` is the folder the SuperLink and the
    ServerApp work in (default: the app folder). ``timeout``: seconds, None for no limit. The
    local SuperLink is stopped however this ends: an interruption included, and this process
    killed by SIGKILL (``core.processes.watch_owner``)."""
    if ray_address is not None:
        check_ray_cluster({"RAY_ADDRESS": ray_address})
    elif num_gpus_per_client:
        check_client_gpus(num_gpus_per_client)
    home = Path(tempfile.mkdtemp(prefix="flwr-home-")) if flwr_home is None else Path(flwr_home)
    started = time.perf_counter()
    with generated_app() if app_dir is None else nullcontext(Path(app_dir)) as app:
        command, env = flwr_run_command(
            run_config,
            num_supernodes,
            num_cpus_per_client,
            home,
            app,
            ray_address,
            num_gpus_per_client,
        )
        watcher = watch_owner(home)  # stops the SuperLink if this process is killed
        ended_early = ""
        try:
            log, returncode = run_with_retry(command, env, cwd or app, timeout, on_line)
            ended_early = unfinished_run(log, returncode, env, cwd or app, timeout)
        finally:
            stop_local_superlink(home)
            watcher.terminate()
            watcher.wait()
    seconds = time.perf_counter() - started
    found = results_folder(log)
    if ended_early and found is not None and (found / "status.json").exists():
        write_status(found, "interrupted", ended_early)  # its processes are stopped now
    run_dir = found if found is not None and (found / "history.json").exists() else None
    return SimulationResult(returncode, log, run_dir, seconds, ended_early)


def unfinished_run(log: str, returncode: int, env: dict, cwd: Path, timeout: float | None) -> str:
    """Why ``flwr run --stream`` returned while its run had not ended, or "" if it had.

    Flower's log stream can end, or the command be stopped at ``timeout``, while the local
    SuperLink still runs the run (the ServerApp and its clients go on working): the run
    folder's ``status.json`` still says ``running``, or the ServerApp made no folder yet and
    the SuperLink has not finished the run (one that failed before it made its folder, a bad
    setting, has ended: its log says why). The SuperLink is asked (``flwr ls``) what it has,
    and the answer says so; ``simulate`` stops the run and writes the answer into the run
    folder, so that the folder says how the run ended. Where no SuperLink runs any more (killed
    with the run) nothing is said: the run folder's dead lock tells (``runtime.run_lock``), and
    asking would start a new SuperLink."""
    run_id = RUN_STARTED.findall(log)
    folder = results_folder(log)
    if not run_id or (folder is not None and folder_status(folder) != "running"):
        return ""
    if not local_superlink_pids(Path(env["FLWR_HOME"])):
        return ""  # no SuperLink runs it: the run died with it (its dead lock says so)
    answer = superlink_run_state(env, cwd, run_id[-1])
    if answer is None:  # the SuperLink did not answer
        return ""
    state, details = answer
    if folder is not None and folder_status(folder) != "running":  # it ended meanwhile
        return ""
    if folder is None and state.startswith(FINISHED):  # it ended before it made its folder
        return ""
    stopped = (
        f"flwr run ran past its {timeout:.0f} s limit"
        if returncode == -1 and timeout is not None
        else f"flwr run returned (exit status {returncode})"
    )
    said = state + (f" ({details})" if details and details != "N/A" else "")
    return f"{stopped} while the SuperLink had run {run_id[-1]} {said}; flowerbed stopped it"


def superlink_run_state(env: dict, cwd: Path, run_id: str) -> tuple[str, str] | None:
    """(status, details) of ``run_id`` as the local SuperLink of ``env`` reports it (``flwr ls
    --run-id``); None when no SuperLink answers (it was killed with the run)."""
    flwr = str(Path(sys.executable).with_name("flwr"))
    command = [flwr, "ls", "--run-id", run_id, "--format", "json"]
    try:
        out = subprocess.run(
            command, env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
        )
        run = json.loads(out.stdout)["runs"][0]
        return str(run["status"]), str(run.get("status-details", ""))
    except (subprocess.TimeoutExpired, ValueError, KeyError, IndexError, TypeError):
        return None


def folder_status(run_dir: Path) -> str:
    """The status a run folder's ``status.json`` holds as written ("" if it cannot be read)."""
    try:
        return str(json.loads((run_dir / "status.json").read_text()).get("status", ""))
    except (OSError, ValueError, AttributeError):
        return ""
