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
   ``--clients`` simulated SuperNodes on Flower's Ray backend (``--ray-address``: an existing
   Ray cluster);
3. Flower's log on this terminal line by line as the run goes (``flwr run --stream``); the same
   retry as ``simulate`` when the local SuperLink is too slow to start;
4. the local SuperLink it started stopped, with its processes, however the run ends (Ctrl-C
   and SIGTERM included);
5. the run folder (the ServerApp's ``flowerbed: results go to``) and how the run ended, from its
   ``status.json``, on the last two lines.

Exit status: 0 when ``status.json`` says ``completed``; 1 when the run failed, was stopped by
someone else, or made no run folder; 2 on bad input; 130 when interrupted (Ctrl-C, SIGTERM).
``flwr run`` itself exits 0 whatever the ServerApp does, hence the status file.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import sys
import tempfile
import textwrap
import time
import tomllib
from pathlib import Path
from typing import Any, Self

from .catalog import SETTINGS, parse_run_config
from .ray_cluster import check_ray_cluster
from .runtime.device import check_client_gpus
from .runtime.run_lock import STATUS_FILE, settled_status
from .settings import ConfigError, Value
from .simulation import generated_app, local_superlink_pids, results_folder, simulate

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


def parse_assignment(item: str) -> tuple[str, Value]:
    key, equals, text = item.partition("=")
    if not equals or not key.strip():
        raise ConfigError(f"--set {item!r}: expected key=value")
    return key.strip(), parse_value(text.strip())


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


def overrides_from(sets: list[str], config: Path | None = None) -> dict[str, Value]:
    """The file's keys, then each ``--set`` (a later one wins)."""
    overrides = {} if config is None else config_file(config)
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
    cwd = Path.cwd() if cwd is None else cwd
    typed = {key: config[key] for key in overrides}
    for key in PATH_KEYS:
        value = typed.get(key)
        if isinstance(value, str) and value and not value.startswith("~"):
            typed[key] = str((cwd / value).resolve())
    return typed


# --- how the run ended -----------------------------------------------------------------------
def outcome(run_dir: Path | None, interrupted: bool, returncode: int) -> tuple[int, str]:
    """Exit status and the last line, from the run folder's ``status.json``."""
    if run_dir is None:
        if interrupted:
            return EXIT_INTERRUPTED, "interrupted before the run made its folder"
        return EXIT_NOT_COMPLETED, (
            f"failed: no run folder appeared (flwr run exited with status {returncode});"
            " see Flower's log above"
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
        overrides = checked_overrides(overrides_from(args.set, args.config), args.clients)
        if args.ray_address is not None:  # the head must answer (simulate checks it too)
            check_ray_cluster({"RAY_ADDRESS": args.ray_address})
        elif args.gpus_per_client:  # the GPUs must be there, as simulate checks
            check_client_gpus(args.gpus_per_client)
    except ConfigError as error:
        print(f"{PREFIX}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    home = Path(tempfile.mkdtemp(prefix="flowerbed-flwr-home-"))
    lines: list[str] = []

    def on_line(line: str) -> None:
        lines.append(line)
        echo(line)

    print(f"{PREFIX}: Flower home {home} (its own local SuperLink, stopped at the end)")
    sys.stdout.flush()
    started = time.monotonic()
    returncode = -1
    with Interruption() as interruption:
        try:
            with generated_app() as app:
                result = simulate(
                    overrides,
                    num_supernodes=args.clients,
                    num_cpus_per_client=args.cpus_per_client,
                    num_gpus_per_client=args.gpus_per_client,
                    ray_address=args.ray_address,
                    timeout=None,
                    flwr_home=home,
                    app_dir=app,
                    on_line=on_line,
                    cwd=Path.cwd(),
                )
                returncode = result.returncode
        except ConfigError as error:  # the GPU or Ray cluster checks, before anything started
            print(f"{PREFIX}: error: {error}", file=sys.stderr)
            shutil.rmtree(home, ignore_errors=True)
            return EXIT_BAD_INPUT
        except KeyboardInterrupt:
            pass  # simulate stopped the SuperLink on the way out
    seconds = time.monotonic() - started
    run_dir = results_folder("".join(lines))
    code, how = outcome(run_dir, interruption.signal is not None, returncode)
    superlink_log = home / "local-superlink" / "superlink.log"
    if local_superlink_pids(home):  # never expected: simulate stops them
        how += f"; a SuperLink of {home} is still running"
    elif run_dir is None and code != EXIT_INTERRUPTED and superlink_log.exists():
        how += f"; the SuperLink's log: {superlink_log}"  # kept: it may say why
    else:
        shutil.rmtree(home, ignore_errors=True)
    if run_dir is not None:
        print(f"{PREFIX}: run folder {run_dir}")
    print(f"{PREFIX}: {how} [{seconds:.0f} s]", flush=True)
    return code


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
