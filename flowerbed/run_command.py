"""``flowerbed run``: a Flower simulation of the app through ``flwr run``, in one command.

    flowerbed run                                   # the embedded default: 5 rounds, 10 clients
    flowerbed run --set strategy=fedprox --set num-server-rounds=3 --clients 20
    flowerbed run --config my-run.toml --set seed=1  # a flat key = value file; --set wins

What it does, in order:

1. the run config from ``--config`` (a flat TOML table) and ``--set key=value`` (a TOML value;
   a bare word is a string), checked against every declared key (``catalog.parse_run_config``)
   and the federation: a bad key or value is one line and exit status 2, before any process
   starts;
2. ``flwr run`` of a generated app (``simulation.generated_app``: a pyproject.toml written from
   the declarations, the package imported from where it is installed), so an editable install
   and a wheel run the same; with its own ``FLWR_HOME`` and ports and Flower's offline
   environment (``simulation.OFFLINE_ENV``) for its processes only; a federation of
   ``--clients`` simulated clients on Flower's Ray backend (``--ray-address``: an existing
   Ray cluster): one SuperNode each, or above 100 clients fewer SuperNodes carrying them
   (``simulation.federation_layout``, virtual clients);
3. flowerbed's story of the run on this terminal as it goes (``run_console``: the start-up,
   the handshake, one line per round), Flower's whole log (``flwr run --stream``) in the run
   folder's ``flower.log`` (``--verbose``: on the terminal too); the same retry as
   ``simulate`` when the local SuperLink is too slow to start;
4. the local SuperLink it started stopped, with its processes, however the run ends (Ctrl-C
   and SIGTERM included);
5. the report, the run folder (the ServerApp's ``flowerbed: results go to``) and how the run
   ended, from its ``status.json``, on the last lines; a run that did not complete says first
   the exception that started the failure (``runtime.outcome.first_error``) and where the log is.

Before anything starts, the pre-flight (``preflight``) refuses what cannot work: a model that
cannot take the data set, a data file that is missing (and not to be downloaded), an output
folder that cannot be written, a run that does not fit this machine's memory or disk.

Exit status: 0 when ``status.json`` says ``completed``; 1 when the run failed, was stopped by
someone else, or made no run folder; 2 on bad input; 130 when interrupted (Ctrl-C, SIGTERM).
``flwr run`` itself exits 0 whatever the ServerApp does, hence the status file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import textwrap
import time
import tomllib
from pathlib import Path
from typing import Any, Self

from .catalog import SETTINGS, check_model, parse_run_config
from .core.device import check_client_gpus
from .core.processes import local_superlink_pids
from .ray_cluster import check_ray_cluster
from .run_console import RunConsole
from .runtime.outcome import first_error
from .runtime.preflight import check_data_files, check_resources
from .runtime.run_lock import STATUS_FILE, settled_status
from .settings import ConfigError, RunConfig, Value
from .simulation import VIRTUAL_ABOVE, federation_layout, generated_app, simulate

EXIT_COMPLETED, EXIT_NOT_COMPLETED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_CLIENTS = 10
PATH_KEYS = ("data-dir", "cache-dir", "output-dir", "resume")  # relative to the caller's folder
PREFIX = "flowerbed run"


# --- the run config from the command line -------------------------------------------------
def parse_value(text: str) -> Value:
    """A ``--set`` value as TOML reads it (``3``, ``0.1``, ``true``, ``"x"``); anything TOML
    does not read as a bool, number or string (a bare word, a path) is that text."""
    try:
        value = tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text.strip()
    return value if isinstance(value, (bool, int, float, str)) else text.strip()


SEVERAL_PAIRS = re.compile(r"\s([a-z][a-z0-9-]*)=")  # "a=1 b=2": a second key after a space


def parse_assignment(item: str) -> tuple[str, Value]:
    key, equals, text = item.partition("=")
    if not equals or not key.strip():
        raise ConfigError(f"--set {item!r}: expected key=value")
    second = SEVERAL_PAIRS.search(text)
    if second and second.group(1) in SETTINGS:
        raise ConfigError(
            f"--set {item!r} holds several key=value pairs; give one per --set"
            f" ({' '.join('--set ' + pair for pair in shlex.split(item))}) or all of them"
            f" to --run-config {shlex.quote(item)}"
        )
    return key.strip(), parse_value(text.strip())


def run_config_pairs(text: str) -> list[str]:
    """``--run-config "a=1 b='x y'"`` as ``flwr run`` reads it: space-separated key=value
    pairs (quotes keep a value's spaces); a path to a ``.toml`` file is read as ``--config``."""
    try:
        return shlex.split(text)
    except ValueError as error:
        raise ConfigError(f"--run-config {text!r}: {error}") from None


def config_file(path: Path) -> dict[str, Value]:
    """A flat ``key = value`` TOML file (a run config, as ``--set`` gives)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"--config {path}: {error}") from None
    nested = [key for key, value in data.items() if not isinstance(value, (bool, int, float, str))]
    if nested:
        raise ConfigError(
            f"--config {path}: {', '.join(nested)} must be a bool, number or string; the file"
            " is a flat table of run-config keys (key = value), no [sections] or lists"
        )
    return data


def overrides_from(
    sets: list[str], config: Path | None = None, run_configs: list[str] = ()
) -> dict[str, Value]:
    """The file's keys, then each ``--run-config`` (a TOML file or ``flwr run``'s
    ``"k=v k2=v2"``), then each ``--set`` (a later one wins)."""
    overrides = {} if config is None else config_file(config)
    for text in run_configs:
        if text.strip().endswith(".toml") and "=" not in text:
            overrides.update(config_file(Path(text.strip())))
            continue
        for item in run_config_pairs(text):
            key, value = parse_assignment(item)
            overrides[key] = value
    for item in sets:
        key, value = parse_assignment(item)
        overrides[key] = value
    return overrides


def checked_overrides(
    overrides: dict[str, Any], clients: int, cwd: Path | None = None
) -> dict[str, Value]:
    """``overrides`` typed as the declarations say, checked with every key (``ConfigError``),
    relative paths made absolute against ``cwd`` (the ServerApp works elsewhere)."""
    config = parse_run_config(overrides)
    if config["min-available-clients"] > clients:
        raise ConfigError(
            f"min-available-clients={config['min-available-clients']} is more than the"
            f" {clients} clients of this federation; lower it or raise --clients"
        )
    check_model(config, overrides)  # a model set here is checked as given (not the data's)
    cwd = Path.cwd() if cwd is None else cwd
    typed = {key: config[key] for key in overrides}
    for key in PATH_KEYS:
        value = typed.get(key)
        if isinstance(value, str) and value and not value.startswith("~"):
            typed[key] = str((cwd / value).resolve())
    return typed


def preflight(overrides: dict[str, Value], clients: int) -> RunConfig:
    """What can be checked before anything starts (module doc), as ``ConfigError``s in
    ``flowerbed run``'s own syntax; the run config as the ServerApp will read it."""
    config = parse_run_config(overrides)
    check_data_files(config)
    check_model(config)
    check_writable("output-dir", config.output_path)
    check_resources(config, clients)
    return config


def check_writable(key: str, folder: Path) -> None:
    """``folder`` exists (it is made now, as the run would) and can be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK | os.X_OK)
        reason = "not writable"
    except OSError as error:
        writable, reason = False, error.strerror or str(error)
    if not writable:
        raise ConfigError(
            f"{key}={str(folder)!r} cannot be written ({reason}); set {key} to a folder you"
            " can write"
        )


# --- how the run ended -----------------------------------------------------------------------
def outcome(run_dir: Path | None, interrupted: bool, returncode: int) -> tuple[int, str]:
    """Exit status and the last line, from the run folder's ``status.json``."""
    if run_dir is None:
        if interrupted:
            return EXIT_INTERRUPTED, "interrupted before the run made its folder"
        return EXIT_NOT_COMPLETED, (
            f"failed: the ServerApp made no run folder (flwr run exited with status {returncode})"
        )
    try:
        status = settled_status(run_dir)
    except (OSError, ValueError) as error:
        code = EXIT_INTERRUPTED if interrupted else EXIT_NOT_COMPLETED
        return code, f"failed: the run folder's {STATUS_FILE} cannot be read ({error})"
    state, reason = status.get("status"), status.get("reason") or ""
    if interrupted:
        return EXIT_INTERRUPTED, f"interrupted; the run says {state}" + (
            f": {reason}" if reason else ""
        )
    if state == "completed":
        return EXIT_COMPLETED, "completed" + (f" ({reason})" if reason else "")
    return EXIT_NOT_COMPLETED, f"{state}" + (f": {reason}" if reason else "")


class Interruption:
    """SIGINT and SIGTERM handler: the first raises ``KeyboardInterrupt`` (the SuperLink is
    then stopped); later ones only say that this is under way, so the cleanup finishes."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signal is None:
            self.signal = signum
            raise KeyboardInterrupt(signal.Signals(signum).name)
        print(f"{PREFIX}: stopping the local SuperLink, a moment", file=sys.stderr, flush=True)

    def __enter__(self) -> Self:
        self.previous = {s: signal.signal(s, self) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)


def echo(line: str) -> None:
    sys.stdout.write(line)
    sys.stdout.flush()


# --- the command ---------------------------------------------------------------------------------
def main(args: argparse.Namespace) -> int:
    try:
        if args.clients < 1:
            raise ConfigError(f"--clients must be at least 1, got {args.clients}")
        if args.cpus_per_client < 1:
            raise ConfigError(f"--cpus-per-client must be at least 1, got {args.cpus_per_client}")
        if not math.isfinite(args.gpus_per_client) or args.gpus_per_client < 0:
            raise ConfigError(f"--gpus-per-client must be >= 0, got {args.gpus_per_client}")
        overrides = checked_overrides(
            overrides_from(args.set, args.config, args.run_config), args.clients
        )
        preflight(overrides, args.clients)
        supernodes, overrides = federation_layout(overrides, args.clients)
        if args.ray_address is not None:  # the head must answer (simulate checks it too)
            check_ray_cluster({"RAY_ADDRESS": args.ray_address})
        elif args.gpus_per_client:  # the GPUs must be there, as simulate checks
            check_client_gpus(args.gpus_per_client)
    except ConfigError as error:
        print(f"{PREFIX}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    home = Path(tempfile.mkdtemp(prefix="flowerbed-flwr-home-"))
    console = RunConsole(supernodes, verbose=args.verbose, prefix=f"{PREFIX}: ")
    if supernodes != args.clients:
        console.say(
            f"{PREFIX}: {supernodes} SuperNodes carry the {args.clients} clients"
            f" (virtual clients: as many SuperNodes as a round samples, at most {VIRTUAL_ABOVE})"
        )
    console.say(f"{PREFIX}: starting Flower's local SuperLink (Flower home {home})")
    started = time.monotonic()
    returncode, ended_early = -1, ""
    with Interruption() as interruption:
        try:
            with generated_app() as app:
                result = simulate(
                    overrides,
                    num_supernodes=supernodes,
                    num_cpus_per_client=args.cpus_per_client,
                    num_gpus_per_client=args.gpus_per_client,
                    ray_address=args.ray_address,
                    timeout=None,
                    flwr_home=home,
                    app_dir=app,
                    on_line=console.feed,
                    cwd=Path.cwd(),
                )
                returncode = result.returncode
                ended_early = result.ended_early
        except ConfigError as error:  # the GPU or Ray cluster checks, before anything started
            console.close(home)
            print(f"{PREFIX}: error: {error}", file=sys.stderr)
            shutil.rmtree(home, ignore_errors=True)
            return EXIT_BAD_INPUT
        except KeyboardInterrupt:
            pass  # simulate stopped the SuperLink on the way out
    log_path = console.close(home)
    seconds = time.monotonic() - started
    run_dir = console.run_dir
    code, how = outcome(run_dir, interruption.signal is not None, returncode)
    if ended_early and run_dir is None:  # a run folder says it in its status.json
        how += f"; {ended_early}"
    superlink_log = home / "local-superlink" / "superlink.log"
    keep_home = run_dir is None and code != EXIT_INTERRUPTED  # its flower.log says why
    if local_superlink_pids(home):  # never expected: simulate stops them
        how += f"; a SuperLink of {home} is still running"
    elif keep_home and log_path is None and superlink_log.exists():
        how += f"; the SuperLink's log: {superlink_log}"
    elif not keep_home:
        shutil.rmtree(home, ignore_errors=True)
    for line in ending(run_dir, code, log_path):
        print(f"{PREFIX}: {line}")
    print(f"{PREFIX}: {how} [{seconds:.0f} s]", flush=True)
    return code


def ending(run_dir: Path | None, code: int, log_path: Path | None) -> list[str]:
    """The lines before the last: the report and the run folder; for a run that did not
    complete, first the exception that started it and where Flower's whole log is."""
    lines = []
    if code == EXIT_NOT_COMPLETED:
        log = log_path.read_text(errors="replace") if log_path and log_path.exists() else ""
        if cause := first_error(log):
            lines.append(f"first error: {cause}")
        if log_path is not None:
            lines.append(f"Flower's whole log: {log_path}")
        if run_dir is not None and (run_dir / "error.log").exists():
            lines.append(f"the ServerApp's traceback: {run_dir / 'error.log'}")
    if run_dir is not None:
        if (run_dir / "report.html").exists():
            lines.append(f"report {run_dir / 'report.html'}")
        lines.append(f"run folder {run_dir}")
    return lines


def keys_help() -> str:
    """Every run-config key with its default and valid values (``flowerbed run --help``)."""
    lines = ["run-config keys (--set key=value), with their defaults:"]
    for key, setting in SETTINGS.items():
        default = setting.default
        shown = json.dumps(default) if isinstance(default, (bool, str)) else repr(default)
        text = f"{key} = {shown}"
        valid = setting.range_text()
        if setting.choices is not None and not callable(setting.choices):
            valid = "one of " + ", ".join(setting.valid_choices())
        if valid:
            text += f"  ({valid})"
        lines.extend(textwrap.wrap(text, 96, initial_indent="  ", subsequent_indent="      "))
    lines.append("Their meanings: the docs' run-config reference.")
    return "\n".join(lines)
