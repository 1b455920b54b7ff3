"""``flowerbed sweep``: the grid from the command line and a TOML file, then ``run_sweep``.

Exit status 0 when every point completed, 1 when some did not (they are listed in the
summary), 2 on bad input (one line, nothing run or written), 130 when interrupted (the running
points say ``interrupted``; the same command redoes them).

It ends with the summary in at most 100 columns (``summary.terminal_summary``: the grid keys
that vary, seeds, final and best accuracy); ``summary.md`` and ``summary.csv`` keep every
column, ``report.html`` draws the curves.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..report import REPORT_FILE
from ..settings import ConfigError
from .execute import run_sweep
from .folder import load_spec
from .grid import DEFAULT_NUM_CLIENTS, SweepSpec, grid_from_cli, grid_from_toml
from .report import write_sweep_files
from .summary import summary_rows, terminal_summary, unfinished_points

WRITTEN = ("summary.md", "summary.csv", "accuracy.png", REPORT_FILE)


def spec_from_args(args: argparse.Namespace) -> SweepSpec:
    axes, fixed, num_clients = ([], {}, None) if args.file is None else grid_from_toml(args.file)
    cli_axes, cli_fixed = grid_from_cli(args.grid, args.set)
    fixed = {**fixed, **cli_fixed}
    num_clients = args.num_clients or num_clients or DEFAULT_NUM_CLIENTS
    return SweepSpec(tuple(axes + cli_axes), fixed, num_clients)


def main(args: argparse.Namespace) -> int:
    out = Path(args.out).expanduser().resolve()
    try:
        if args.report_only:
            write_sweep_files(out, load_spec(out))
            ok = True
        else:
            results = run_sweep(
                spec_from_args(args),
                out,
                workers=args.workers,
                via=args.via,
                ray_address=args.ray_address,
                extend=args.extend,
            )
            ok = all(result.state.finished for result in results)
    except ConfigError as error:
        print(f"flowerbed sweep: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        report = out / REPORT_FILE
        shown = f" {report} shows the points completed;" if report.is_file() else ""
        print(
            f"flowerbed sweep: interrupted;{shown} the same command goes on where it stopped",
            file=sys.stderr,
        )
        return 130
    spec = load_spec(out)  # with --extend, the grid the folder holds now
    print(terminal_summary(out, spec, summary_rows(spec, out), unfinished_points(spec, out)))
    print(f"written in {out}:\n  {', '.join(WRITTEN)}")
    return 0 if ok else 1
