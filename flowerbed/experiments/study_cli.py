"""The command line every study gets: a benchmark script's ``main`` is one call to ``main``.

    python benchmarks/X.py                    # the study's default budget, into its folder
    python benchmarks/X.py --quick            # its quick budget (= --budget quick)
    python benchmarks/X.py --budget NAME      # any budget it names
    python benchmarks/X.py --report-only      # the tables from the rows on disk
    python benchmarks/X.py --workers 2 --out DIR

What runs is ``driver.run_study``: resumable (a rerun runs only what ``rows.jsonl`` lacks, and
again what failed), ``--workers`` at a time (1 for a study that alternates its variants),
provenance in ``measured.jsonl``. The default budget runs into the study's folder, another
budget into ``<folder>/<budget>`` (so that a quick check never adds rows to the committed
ones); ``--out`` names any folder. A study for this command line names its budgets
(``budgets``, a mapping or sequence of names) and its default (``default_budget``). A script
with options of its own (``--data-dir``) passes them as a parser (``options``) and the study as
a function of their values: ``--help`` lists them, and the command line ``measured.jsonl``
records is the whole one, theirs included.

Exit status: 0 when every run of the budget has a row and the tables were written, 1 when a run
failed (it runs again on the next start), 2 for bad input (an unknown budget, fewer than one
worker, more than one for an alternating study: one line on stderr, before anything runs).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ..cli import Parser
from .driver import BudgetError, Study, WorkersError, Write, missing_runs, run_study, write_file

QUICK = "quick"


def parser(
    study: Study, description: str, options: argparse.ArgumentParser | None = None
) -> argparse.ArgumentParser:
    """The command line of ``study``, with the script's own ``options`` (a parser made with
    ``add_help=False``) where it has some."""
    budgets = ", ".join(study.budgets)
    cli = Parser(
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[] if options is None else [options],
    )
    chosen = cli.add_mutually_exclusive_group()
    chosen.add_argument(
        "--budget",
        default=study.default_budget,
        help=f"one of: {budgets} (default {study.default_budget})",
    )
    chosen.add_argument("--quick", action="store_true", help=f"the quick budget (--budget {QUICK})")
    cli.add_argument("--workers", type=int, default=1, help="runs at the same time (default 1)")
    cli.add_argument(
        "--report-only", action="store_true", help="the tables from the rows on disk; run nothing"
    )
    cli.add_argument(
        "--out",
        type=Path,
        help="the folder of rows.jsonl and the tables (default: the study's folder for its"
        " default budget, <folder>/<budget> for another)",
    )
    return cli


def out_folder(study: Study, folder: Path, budget: str, out: Path | None) -> Path:
    """``out`` if given, else ``folder`` for the default budget, ``folder/budget`` otherwise."""
    if out is not None:
        return out
    return Path(folder) if budget == study.default_budget else Path(folder) / budget


def main(
    study: Study | Callable[[argparse.Namespace], Study],
    folder: Path,
    description: str = "",
    argv: list[str] | None = None,
    write: Write = write_file,
    options: argparse.ArgumentParser | None = None,
) -> int:
    """Parse ``argv`` (default: this process's arguments), run ``study`` and write its tables
    (``write``, as ``driver.run_study`` takes it) into its folder; the exit status (module
    docstring). With ``options`` (the script's own, a parser made with ``add_help=False``),
    ``study`` is a function of their values that makes the study."""
    words = sys.argv[1:] if argv is None else list(argv)
    if options is not None:
        study = study(options.parse_known_args(words)[0])
    cli = parser(study, description, options)
    cli.argv = words
    args = cli.parse_args(words)
    budget = QUICK if args.quick else args.budget
    out = out_folder(study, folder, budget, args.out)
    command = " ".join(["python", Path(sys.argv[0]).as_posix(), *words])
    try:
        tables = run_study(
            study, out, budget, args.workers, args.report_only, command=command, write=write
        )
    except (BudgetError, WorkersError) as error:
        print(f"{cli.prog}: error: {error}", file=sys.stderr)
        return 2
    for text in tables.values():
        print(text)
    print("written: " + ", ".join(str(out / name) for name in tables))
    missing = missing_runs(study, out, budget)
    if missing:
        print(
            f"{len(missing)} runs of {study.name} ({budget}) have no row (failed or not run);"
            " run the command again to retry them",
            file=sys.stderr,
        )
        return 1
    return 0
