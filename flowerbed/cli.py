"""flowerbed's command line, the ``flowerbed`` console script: ``flowerbed run ...``,
``flowerbed sweep ...``, ``flowerbed report FOLDER``, ``flowerbed reproduce PAPER``,
``flowerbed --version``.

The parser is built from the standard library alone, so ``--help`` and a mistyped option
answer at once; the module doing a subcommand's work (which brings torch, Flower and Ray) is
imported by its name (``COMMANDS``) only after the arguments are parsed.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import platform
import re
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from . import __version__

COMMANDS = {
    "run": "flowerbed.run_command",
    "sweep": "flowerbed.sweep.command",
    "report": "flowerbed.sweep.report",
    "reproduce": "flowerbed.experiments.reproduce",
}

RUN_HELP = """Run a Flower simulation of flowerbed through `flwr run`: the embedded default
(FedAvg on digits, 5 rounds) on 10 simulated clients unless told otherwise.

  flowerbed run
  flowerbed run --set strategy=fedprox --set num-server-rounds=3 --clients 20
  flowerbed run --config my-run.toml --set seed=1

--set takes a TOML value (3, 0.1, true, "text"; a bare word is text); --config a flat TOML
file of key = value lines; --run-config "k=v k2=v2" as `flwr run` takes it; --set wins.
Keys, values, data files, the output folder and the memory a run needs are checked before
anything starts. The terminal shows the start-up, one line per round and the end; Flower's
whole log goes to flower.log in the run folder (--verbose: here too). The last lines name
the report, the run folder and how the run ended (its status.json). Exit status: 0
completed, 1 failed or no run folder, 2 bad input, 130 interrupted. The local SuperLink it
starts is always stopped. No exports are needed: Flower's offline settings apply to its own
processes."""

SWEEP_HELP = """Run a grid of runs and summarise them (mean ± std over seeds).

  flowerbed sweep --grid strategy=fedavg,fedprox --grid seed=0,1,2 \\
      --set num-server-rounds=5 --workers 2 --out sweeps/demo

A TOML file holds the same: [grid] key = [values] (or a table of named bundles of keys),
[set] key = value, num-clients = N. A rerun of the same sweep skips the completed points and
redoes the others; see the documentation's how-to, docs/sweeps.md."""

REPORT_HELP = """Write report.html, one self-contained page (no network needed), for a run folder
(status, configuration, curves, clinical metrics, partition, per-client accuracy, distillation,
the protocol's own results) or a sweep folder (a history column by round, mean ± std over
seeds per configuration, and every point with a link to its run's report).

  flowerbed report ~/.flowerbed/runs/20250101-120000-fedavg-digits-seed42
  flowerbed report sweeps/demo --metric central_auroc

A run writes its report when it ends; this rebuilds it, for old runs too (a file an old run
lacks leaves its section out). See docs/reference-run-folder.md."""


REPRODUCE_HELP = """Reproduce a paper's headline table: run its study in a budget and write
reproduction.md and report.html (the paper's numbers beside ours, mean ± std over seeds, and a
verdict per claimed ordering from paired per-seed differences) into the output folder.

  flowerbed reproduce --list
  flowerbed reproduce ctl --budget smoke
  flowerbed reproduce ctl --dry-run
  flowerbed reproduce ctl --workers 2 --out reproductions/ctl-cpu
  flowerbed reproduce qkt --budget paper --gpus-per-client 1 --workers 4
  flowerbed reproduce qkt --budget paper --ray-address 10.0.0.5:6379 --workers 32

Budgets: smoke (the whole pipeline on tiny settings), cpu (the closest regime a 2-core machine
finishes in 2 hours), paper (the paper's own settings). A rerun continues where a killed one
stopped and retries failed runs. With --ray-address or --gpus-per-client every run is a Ray
task (on that cluster, else on this machine) with one CPU and that many GPUs. Exit status: 0 every run succeeded and the report was
written, 1 some run failed (rerun to retry), 2 bad input."""


def version_text() -> str:
    try:
        flwr = version("flwr")
    except PackageNotFoundError:
        flwr = "not installed"
    return f"flowerbed {__version__} (flwr {flwr}, Python {platform.python_version()})"


class RunHelp(argparse.Action):
    """``flowerbed run --help``: the options, then every run-config key with its default."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, **kw):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        keys = importlib.import_module(COMMANDS["run"]).keys_help()
        print(parser.format_help() + "\n" + keys)
        parser.exit()


def add_run(commands) -> None:
    run = commands.add_parser(
        "run",
        help="run a Flower simulation (the embedded default unless told otherwise)",
        description=RUN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    run.add_argument(
        "-h", "--help", action=RunHelp, help="show this help and every run-config key, then exit"
    )
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run-config value (repeatable; wins over --config)",
    )
    run.add_argument("--config", type=Path, metavar="FILE.toml", help="a flat key = value file")
    run.add_argument(
        "--run-config",
        action="append",
        default=[],
        metavar='"K=V K2=V2"',
        help="run-config values as `flwr run` takes them (or a .toml file); --set wins",
    )
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show Flower's whole log here too (it is always kept in the run folder's flower.log)",
    )
    run.add_argument("--clients", type=int, default=10, help="simulated clients (default 10)")
    run.add_argument(
        "--cpus-per-client", type=int, default=1, help="CPUs per client's Ray actor (default 1)"
    )
    run.add_argument(
        "--gpus-per-client",
        type=float,
        default=0.0,
        help="GPUs per client's Ray actor; a fraction shares a GPU (default 0)",
    )
    run.add_argument(
        "--ray-address",
        help="an existing Ray cluster's head (host:port); default: a private Ray on this machine",
    )


class Parser(argparse.ArgumentParser):
    """argparse, with a did-you-mean for a mistyped subcommand or option."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}{self.suggestion(message)}\n")

    def suggestion(self, message: str) -> str:
        if found := re.search(r"invalid choice: '([^']*)'", message):
            choices = [name for action in self._actions for name in (action.choices or ())]
            close = difflib.get_close_matches(found.group(1), choices, n=1)
            return f"; did you mean '{close[0]}'?" if close else ""
        if found := re.search(r"unrecognized arguments: (.*)", message):
            options = [o for action in self.active()._actions for o in action.option_strings]
            hints = []
            for word in found.group(1).split():
                close = difflib.get_close_matches(word.split("=")[0], options, n=1)
                if word.startswith("-") and close:
                    hints.append(f"{word}: did you mean {close[0]}?")
            return "; " + "; ".join(hints) if hints else ""
        return ""

    def active(self) -> argparse.ArgumentParser:
        """The subcommand's parser named on the command line (this one if none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for word in sys.argv[1:] if self.argv is None else self.argv:
                    if word in action.choices:
                        return action.choices[word]
        return self

    argv: list[str] | None = None


def parser() -> argparse.ArgumentParser:
    root = Parser(prog="flowerbed", description="flowerbed's tools")
    root.add_argument("--version", action="version", version=version_text())
    commands = root.add_subparsers(dest="command", required=True)
    add_run(commands)
    sweep = commands.add_parser(
        "sweep",
        help="run a grid of runs",
        description=SWEEP_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sweep.add_argument("--out", type=Path, required=True, help="the sweep folder")
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="run-config values to cross (repeat for more keys)",
    )
    sweep.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run-config value for every point (repeatable; wins over the file's [set])",
    )
    sweep.add_argument("--file", type=Path, help="a TOML file with [grid] and [set]")
    sweep.add_argument("--num-clients", type=int, help="clients per run (default 10)")
    sweep.add_argument("--workers", type=int, default=1, help="points run at the same time")
    sweep.add_argument(
        "--via",
        choices=("inprocess", "flwr"),
        default="inprocess",
        help="run each point in the Ray task's process (default) or through `flwr run`",
    )
    sweep.add_argument(
        "--ray-address",
        help="an existing Ray cluster's head (host:port); default RAY_ADDRESS, else a private Ray",
    )
    sweep.add_argument(
        "--extend", action="store_true", help="add the new grid values to an existing sweep"
    )
    sweep.add_argument(
        "--report-only",
        action="store_true",
        help="only rewrite the summary of the sweep folder --out from its runs",
    )
    report = commands.add_parser(
        "report",
        help="write report.html for a run or sweep folder",
        description=REPORT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("folder", type=Path, help="a run folder or a sweep folder")
    report.add_argument(
        "--metric",
        metavar="COLUMN",
        help="sweeps: the history column to draw (default: the summary's accuracy column)",
    )
    add_reproduce(commands)
    return root


def add_reproduce(commands) -> None:
    reproduce = commands.add_parser(
        "reproduce",
        help="reproduce a paper's headline table and judge its claims",
        description=REPRODUCE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    reproduce.add_argument("paper", nargs="?", help="the paper's key (--list names them)")
    reproduce.add_argument(
        "--list", action="store_true", help="list the papers, their budgets and results"
    )
    reproduce.add_argument(
        "--budget", choices=("smoke", "cpu", "paper"), default="cpu", help="default: cpu"
    )
    reproduce.add_argument(
        "--out", type=Path, help="the output folder (default: reproductions/PAPER-BUDGET)"
    )
    reproduce.add_argument("--workers", type=int, default=1, help="runs at the same time")
    reproduce.add_argument(
        "--ray-address",
        help="run every run as a task on the Ray cluster with this head (host:port)",
    )
    reproduce.add_argument(
        "--gpus-per-client",
        type=float,
        default=0.0,
        help="GPUs of each run, whose clients train one after another (a fraction shares one);"
        " runs on Ray: --ray-address, else RAY_ADDRESS, else a private Ray here",
    )
    reproduce.add_argument(
        "--report-only", action="store_true", help="only write the report from the rows on disk"
    )
    reproduce.add_argument(
        "--dry-run",
        action="store_true",
        help="print the grid, its estimated time and memory; run nothing",
    )


def main(argv: list[str] | None = None) -> int:
    root = parser()
    root.argv = argv
    args = root.parse_args(argv)
    command = importlib.import_module(COMMANDS[args.command])
    return command.main(args)


if __name__ == "__main__":
    sys.exit(main())
