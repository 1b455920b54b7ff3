"""``flowerbed sweep``: the grid from the command line and a TOML file, then ``run_sweep``.

Exit status 0 when every point completed, 1 when some did not (they are listed in the
summary), 2 on bad input (one line, nothing run or written), 130 when interrupted (the running
points say ``interrupted``; the same command redoes them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..settings import ConfigError
from .execute import run_sweep
from .folder import load_spec
from .grid import DEFAULT_NUM_CLIENTS, SweepSpec, grid_from_cli, grid_from_toml
from .summary import write_summary


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
            write_summary(out, load_spec(out))
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
        print(
            "flowerbed sweep: interrupted; the same command goes on where it stopped",
            file=sys.stderr,
        )
        return 130
    print((out / "summary.md").read_text())
    print(f"written: {out / 'summary.md'}, {out / 'summary.csv'}, {out / 'accuracy.png'}")
    return 0 if ok else 1
