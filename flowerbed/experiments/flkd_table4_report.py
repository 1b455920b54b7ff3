"""The FL + KD benchmark's Table 4 in its reproduction's report: a ``reproduction.Part``
(``SummaryReproduction``) made from the Table 4 rows alone (``flkd_table4``), after Table 1's
part of ``reproduction.md`` and ``report.html``. Under headings that start with the summary's
title (``papers.PaperSummary``) it shows:

* per data setting measured, and for the paper's (its clinical column) where it is not: which
  teachers are the weakest and the strongest here, and per objective the paper's number beside
  ours: the CE weight, the student behind the weakest and the strongest teacher (mean ± std
  over seeds), the range of the student's means over the teachers, and r, ours both as the
  mean ± std of the per-seed r and as the r of the seed means (the paper's);
* per claim (better, worse, column), judged in the paper's setting only (its Table 4 is of
  that column): the paired per-seed differences of the two objectives' students behind the
  weakest teacher, or of their per-seed r, their mean, 95 % t interval and verdict
  (``reproduction_report.judge``), and how many of these intervals exclude 0 against how many
  would by chance alone;
* what the paper says without an ordering (``papers.Unjudged``: "recover the student
  regardless of teacher quality", "track the teacher"), per objective it is said of and per
  setting: the student behind the strongest teacher minus behind the weakest, paired by seed,
  and the per-seed r, each with its mean and 95 % t interval, shown and never judged;
* every claim's per-seed differences, and the regime (its differences from the paper's, the
  budget, the runs' measured time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .document import Block, Heading, Paragraph, Table
from .flkd_table4 import Grid, ObjectiveResult, cells, column_setting, grids, objective_results
from .flkd_table4 import measures as table4_measures
from .papers import BEHIND_WEAKEST, PAPERS, PaperSummary
from .reproduction import RegimeDifference, Row, seconds_of
from .reproduction_report import (
    CLAIM_HEADER,
    ClaimResult,
    chance_line,
    claim_line,
    claim_row,
    interval_cells,
    judge,
    number,
    paper_number,
    part_regime_blocks,
    seed_differences,
    summary,
)


def judge_summary(table: PaperSummary, rows: list[Row]) -> list[ClaimResult]:
    """Every claim of ``table`` judged on the rows' cells in its setting (module docstring)."""
    found = cells(rows)
    return [
        judge(table, found, (better, worse, column_setting(table.setting, column)))
        for better, worse, column in table.claims
    ]


def teachers_text(grid: Grid) -> str:
    """Which teachers are the weakest and the strongest in ``grid``, with their mean accuracy."""
    weakest, strongest = grid.weakest, grid.strongest
    return (
        f"weakest teacher {weakest} ({grid.teacher_mean(weakest):.1f} %), strongest"
        f" {strongest} ({grid.teacher_mean(strongest):.1f} %), of {len(grid.teachers)} teachers"
    )


HEADER = (
    "objective",
    "CE weight: paper / ours",
    "behind the weakest: paper",
    "ours",
    "behind the strongest: paper",
    "ours",
    "range: paper",
    "ours",
    "r: paper",
    "ours: per seed",
    "ours: of the means",
)


def objective_row(table: PaperSummary, objective: str, ours: ObjectiveResult | None) -> tuple:
    """One objective's row of a setting's table (``HEADER``): the paper's numbers and ours."""
    paper = table.row(objective)
    if ours is None:
        measured = ("not measured",) * 5
        ce = "–"
    else:
        measured = (
            summary(list(ours.weakest.values())),
            summary(list(ours.strongest.values())),
            number(ours.range),
            summary(list(ours.r_per_seed.values())),
            number(ours.r_of_means),
        )
        ce = f"{ours.ce_weight:g}"
    return (
        objective,
        f"{paper.ce_weight:g} / {ce}",
        paper_number(paper.weakest),
        measured[0],
        paper_number(paper.strongest),
        measured[1],
        paper_number(paper.range),
        measured[2],
        f"{paper.r:+.2f}",
        measured[3],
        measured[4],
    )


def measured_blocks(table: PaperSummary, found: list[Grid]) -> list[Block]:
    """The paper's numbers and ours, one table per setting (module docstring)."""
    headline = PAPERS[table.paper]
    weakest = headline.value(table.weakest, table.setting)
    strongest = headline.value(table.strongest, table.setting)
    blocks: list[Block] = [
        Heading(f"{table.title}: the paper's numbers and ours"),
        Paragraph(
            f"The paper's numbers: {table.source}; its {table.setting} column, behind"
            f" {table.weakest} ({paper_number(weakest)} %) as the weakest teacher and"
            f" {table.strongest} ({paper_number(strongest)} %) as the strongest. Metric:"
            f" {table.metric}. Ours, per data set: the weakest and the strongest teacher are"
            " those of lowest and highest mean accuracy over seeds here (the first in Table 1's"
            " order on a tie), whichever they are; the student behind each as mean ± standard"
            " deviation over seeds (n - 1); the range, max - min over the teachers of the"
            " student's mean over seeds; r, Pearson's between the student's and the teacher's"
            " accuracy over the teachers, within each seed (mean ± std over seeds) and of the"
            " means over seeds (the paper's). A student that is the same behind every teacher"
            " has r = 0 (no covariance); teachers all the same give NaN."
        ),
    ]
    settings = {grid.setting: grid for grid in found}
    for setting in dict.fromkeys([table.setting, *settings]):
        grid = settings.get(setting)
        results = {r.objective: r for r in objective_results(grid)} if grid else {}
        if grid is None:
            where = f"{setting}: not measured in this budget."
        else:
            seeds = ", ".join(map(str, grid.seeds))
            where = f"{setting} ({grid.ran_on}; seeds {seeds}): {teachers_text(grid)}."
            if setting != table.setting:
                where += (
                    f" The paper's numbers beside ours are of its {table.setting} column"
                    " (Table 4 has no other): shown for reading, not judged."
                )
        rows = tuple(
            objective_row(table, row.objective, results.get(row.objective)) for row in table.rows
        )
        blocks += [Paragraph(where), Table(HEADER, rows)]
    return blocks


def claim_blocks(table: PaperSummary, results: list[ClaimResult]) -> list[Block]:
    return [
        Heading(f"{table.title}: the paper's claims"),
        Paragraph(
            f"Judged in the {table.setting} column (the paper's Table 4 is of it), paired by"
            " seed (the seeds both objectives have): the differences better - worse of the"
            f" students {BEHIND_WEAKEST}, or of the per-seed r over the teachers; their mean"
            " and 95 % t interval; the claimed side is positive. The seeds in which the"
            " claimed order holds are counted for every claim."
        ),
        Table(CLAIM_HEADER, tuple(claim_row(r) for r in results)),
        Paragraph(chance_line([r.verdict for r in results])),
    ]


def unjudged_blocks(table: PaperSummary, found: list[Grid]) -> list[Block]:
    rows = []
    for grid in found:
        results = {r.objective: r for r in objective_results(grid)}
        for said in table.unjudged:
            for objective in said.objectives:
                result = results.get(objective)
                if result is None:
                    continue
                seeds = sorted(set(result.weakest) & set(result.strongest))
                gaps = [result.strongest[s] - result.weakest[s] for s in seeds]
                rows.append(
                    (
                        said.words,
                        objective,
                        grid.setting,
                        str(len(seeds)),
                        *interval_cells(gaps),
                        *interval_cells(list(result.r_per_seed.values())),
                    )
                )
    return [
        Heading(f"{table.title}: what the paper says without an ordering"),
        Paragraph(
            "Shown as information, never judged: the paper's words are no ordering between"
            " two cells, and an interval that holds 0 does not show that a student is the"
            " same behind every teacher. Per objective they are said of: the student behind"
            " the strongest teacher minus behind the weakest, paired by seed (near 0 for a"
            " student recovered whatever the teacher, near the teachers' gap for one that"
            " tracks it), and the per-seed r over the teachers (the paper: r ≈ 0 and"
            " r ≈ 0.99), each with its mean and 95 % t interval."
        ),
        Table(
            (
                "the paper says they",
                "objective",
                "setting",
                "seeds",
                "strongest - weakest",
                "95 % interval",
                "r per seed",
                "95 % interval",
            ),
            tuple(rows),
        ),
    ]


@dataclass(frozen=True)
class SummaryReproduction:
    """Table 4's part of its paper's reproduction (``reproduction.Part``): the rows that
    ``flkd_table4.measures`` picks, reported against ``summary`` (module docstring);
    ``regime(budget)`` lists how that budget differs from the paper."""

    summary: PaperSummary
    regime: Callable[[str], list[RegimeDifference]]

    def measures(self, row: Row) -> bool:
        return table4_measures(row)

    def blocks(self, rows: list[Row], budget: str) -> list[Block]:
        """The part of the report (module docstring) from the Table 4 rows."""
        found = grids(rows)
        results = judge_summary(self.summary, rows)
        title = self.summary.title
        return [
            *measured_blocks(self.summary, found),
            *claim_blocks(self.summary, results),
            *unjudged_blocks(self.summary, found),
            Heading(f"{title}: per-seed differences"),
            *[seed_differences(r) for r in results],
            *part_regime_blocks(title, self.regime(budget), budget, seconds_of(rows)),
        ]

    def lines(self, rows: list[Row]) -> list[str]:
        """One verdict line per claim, as the command prints it."""
        return [claim_line(result) for result in judge_summary(self.summary, rows)]
