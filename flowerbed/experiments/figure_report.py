"""The part of a reproduction's report for a result its paper shows only in a figure
(``papers.PaperFigure``: CTL's Simulation 2), made from the figure's ``Cell``s and placed after
the headline table's part of ``reproduction.md`` and ``report.html`` (``reproduction_tables``'s
``more``). Under headings that start with the figure's title, it shows:

* per method and setting, ours (mean ± std over seeds) beside the paper's column, which says
  that the paper prints no number for it: none is invented;
* per claim within a setting, its paired per-seed differences judged as the headline claims
  are (``reproduction_report.judge``);
* per contrast across two settings (``papers.Contrast``), the mean paired difference in each
  and ``verdicts.contrast_verdict``: the Welch interval of the difference of the two means,
  unpaired because each setting keeps its own seeds;
* how many of these intervals exclude 0 against how many would by chance alone;
* per pair the paper calls comparable, the paired differences' mean and 95 % t interval as
  information, with no verdict: "comparable" is no ordering, and an interval holding 0 does not
  show that two methods are the same;
* every compared pair's per-seed differences;
* the regime's differences from the paper's, the budget and the figure's runs' measured time.

``FigureReproduction`` is the figure's part of its paper's reproduction
(``reproduction.Part``): the rows that measure it, their cells and the regime, reported so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .document import Block, Heading, Paragraph, Table
from .papers import Contrast, PaperFigure
from .reproduction import Cell, RegimeDifference, Row, seconds_of
from .reproduction_report import (
    CLAIM_HEADER,
    NOT_FINITE,
    ClaimResult,
    centre_text,
    chance_line,
    claim_line,
    claim_row,
    interval_text,
    judge,
    number,
    part_regime_blocks,
    seed_differences,
    summary,
    values_of,
    verdict_line,
)
from .stats import paired_test
from .verdicts import NO_SEED, NOT_JUDGED, Verdict, contrast_verdict

NO_NUMBER = "no number: figure only"


@dataclass(frozen=True)
class ContrastResult:
    """The judgement of a contrast: the paired differences in its two settings (``first``:
    where the paper has the larger lead) and the verdict on the difference of their means."""

    contrast: Contrast
    first: ClaimResult
    second: ClaimResult
    verdict: Verdict

    @property
    def judged(self) -> bool:
        return self.verdict.word != NOT_JUDGED


def judge_contrast(figure: PaperFigure, cells: list[Cell], contrast: Contrast) -> ContrastResult:
    """A contrast's paired differences in each setting and its verdict (module docstring); not
    judged where a value is not finite."""
    first, second = (
        judge(figure, cells, (contrast.better, contrast.worse, setting))
        for setting in (contrast.larger, contrast.smaller)
    )
    leads = [list(first.differences), list(second.differences)]
    if all(math.isfinite(d) for lead in leads for d in lead):
        verdict = contrast_verdict(*leads, figure.higher_is_better)
    else:
        verdict = Verdict(NOT_JUDGED, NO_SEED, NOT_FINITE)
    return ContrastResult(contrast, first, second, verdict)


def contrast_name(contrast: Contrast) -> str:
    return (
        f"({contrast.better} - {contrast.worse}) larger at {contrast.larger} than at"
        f" {contrast.smaller}"
    )


def contrast_line(result: ContrastResult) -> str:
    """One line per contrast, as the command prints it."""
    interval = result.verdict.interval
    return verdict_line(
        contrast_name(result.contrast),
        result.verdict,
        f"difference {number(interval.mean)}, 95 % Welch interval {interval_text(interval)}; ",
    )


def figure_lines(figure: PaperFigure, cells: list[Cell]) -> list[str]:
    """The verdict lines of a figure's claims and contrasts."""
    claims = [claim_line(judge(figure, cells, claim)) for claim in figure.claims]
    return claims + [contrast_line(judge_contrast(figure, cells, c)) for c in figure.contrasts]


def lead_text(result: ClaimResult) -> str:
    """A setting's mean paired difference and its number of seeds."""
    if not result.seeds:
        return "–"
    return f"{number(sum(result.differences) / len(result.seeds))} ({len(result.seeds)} seeds)"


def figure_measured_blocks(figure: PaperFigure, cells: list[Cell]) -> list[Block]:
    rows = tuple(
        (method, setting, NO_NUMBER, summary(list(values_of(cells, method, setting).values())))
        for setting in figure.settings
        for method in figure.methods
    )
    return [
        Heading(f"{figure.title}: the paper's figure and ours"),
        Paragraph(
            f"The paper's result: {figure.source}. The paper prints no number for it, only"
            " curves: its column says so. Metric: "
            f"{figure.metric}; {'higher' if figure.higher_is_better else 'lower'} is better."
            " Ours: mean ± standard deviation over seeds (n - 1 in the denominator)."
        ),
        Table(("method", "setting", "paper", "ours"), rows),
    ]


def comparable_row(result: ClaimResult) -> tuple[str, ...]:
    """A comparable pair's row: its paired differences' centre and interval, no verdict."""
    interval = paired_test(list(result.differences)) if result.seeds else NO_SEED
    return (
        f"{result.better} and {result.worse} ({result.setting})",
        str(len(result.seeds)),
        centre_text(interval) if result.seeds else "–",
        interval_text(interval),
        f"{result.ordered} of {len(result.seeds)}",
    )


def figure_claim_blocks(figure: PaperFigure, cells: list[Cell]) -> list[Block]:
    claims = [judge(figure, cells, claim) for claim in figure.claims]
    contrasts = [judge_contrast(figure, cells, c) for c in figure.contrasts]
    comparable = [judge(figure, cells, pair) for pair in figure.comparable]
    contrast_rows = tuple(
        (
            contrast_name(r.contrast),
            lead_text(r.first),
            lead_text(r.second),
            number(r.verdict.interval.mean) if r.judged else "–",
            interval_text(r.verdict.interval) if r.judged else "–",
            r.verdict.word,
            r.verdict.reason,
        )
        for r in contrasts
    )
    blocks: list[Block] = [
        Heading(f"{figure.title}: the paper's claims"),
        Paragraph(
            "A claim within a setting is paired by seed, as above: the differences better -"
            " worse, their mean and 95 % t interval. A contrast compares one difference"
            " across two settings: the mean paired difference in each, and the 95 % Welch t"
            " interval of the first minus the second (unpaired: each setting keeps its own"
            " seeds). The claimed side is "
            + ("positive." if figure.higher_is_better else "negative.")
        ),
        Table(CLAIM_HEADER, tuple(claim_row(r) for r in claims)),
        Table(
            (
                "contrast",
                "mean difference, first setting",
                "mean difference, second setting",
                "first - second",
                "95 % interval (Welch)",
                "verdict",
                "reason",
            ),
            contrast_rows,
        ),
        Paragraph(chance_line([r.verdict for r in [*claims, *contrasts]])),
    ]
    if comparable:
        blocks += [
            Paragraph(
                "Where the paper calls two methods comparable, the paired differences (the"
                ' first - the second) are shown as information, not judged: "comparable" is'
                " no ordering, and an interval that holds 0 does not show that two methods are"
                " the same."
            ),
            Table(
                ("comparable in the paper", "seeds", "centre", "95 % interval", "first ahead"),
                tuple(comparable_row(r) for r in comparable),
            ),
        ]
    compared = {(r.better, r.worse, r.setting): r for r in [*claims, *comparable]}
    for r in contrasts:
        compared |= {(x.better, x.worse, x.setting): x for x in (r.first, r.second)}
    blocks.append(Heading(f"{figure.title}: per-seed differences"))
    return blocks + [seed_differences(r) for r in compared.values()]


def figure_blocks(
    figure: PaperFigure,
    cells: list[Cell],
    regime: list[RegimeDifference],
    budget: str,
    seconds: float,
) -> list[Block]:
    """The figure's part of the report (module docstring)."""
    return [
        *figure_measured_blocks(figure, cells),
        *figure_claim_blocks(figure, cells),
        *part_regime_blocks(figure.title, regime, budget, seconds),
    ]


@dataclass(frozen=True)
class FigureReproduction:
    """The reproduction of a result shown only in a figure (``figure``), a ``reproduction.Part``
    of its paper's: the rows of the study that ``measures`` picks; ``cells`` turns them into
    ``Cell``s (the figure's methods and settings); ``regime(budget)`` lists how that budget
    differs from the paper."""

    figure: PaperFigure
    measures: Callable[[Row], bool]
    cells: Callable[[list[Row]], list[Cell]]
    regime: Callable[[str], list[RegimeDifference]]

    def blocks(self, rows: list[Row], budget: str) -> list[Block]:
        """The figure's part of the report (``figure_blocks``) from its rows."""
        regime = self.regime(budget)
        return figure_blocks(self.figure, self.cells(rows), regime, budget, seconds_of(rows))

    def lines(self, rows: list[Row]) -> list[str]:
        """The verdict lines of the figure's claims and contrasts (``figure_lines``)."""
        return figure_lines(self.figure, self.cells(rows))
