"""What a reproduction of a paper is: a study (``driver.Study``) whose rows give, per seed, the
value of each cell of the paper's headline table (``papers.PAPERS``), and the list of the ways its
regime differs from the paper's.

``Cell`` is one measured value of one of the paper's cells: the method and setting as the paper
names them (``PaperRow.method``, ``PaperRow.setting``), the seed, and the value in the table's
unit (``PaperTable.metric``). A study's rows can hold many cells each (one simulation measures
every method at once) or one; ``Reproduction.cells`` turns the rows into cells, so that the
report (paper vs ours, and a verdict per claimed ordering, paired by seed) needs to know
nothing about how a study runs.

A second result of the same study is a ``Part`` of the reproduction: the rows that measure it
(``measures``) are set apart from the headline table's and make its part of the report, after
the headline table's, and its verdict lines. A result the paper shows only in a figure
(``papers.PaperFigure``) is one (``figure_report.FigureReproduction``), and so is the FL + KD
benchmark's Table 4 (``flkd_table4_report.SummaryReproduction``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .document import Block
from .driver import Study, Value

Row = dict[str, Value]


@dataclass(frozen=True)
class Cell:
    """One measured value of a paper's cell: ``method`` and ``setting`` as in ``PaperRow``, the
    ``seed`` it was measured with, and ``value`` in the paper table's metric."""

    method: str
    setting: str
    seed: int
    value: float


@dataclass(frozen=True)
class RegimeDifference:
    """One way a budget's regime differs from the paper's: what (``aspect``: "rounds", "model",
    "data"), the paper's choice, ours, and why (``reason``)."""

    aspect: str
    paper: str
    ours: str
    reason: str = ""


class Part(Protocol):
    """A second result of the study: ``measures(row)``, whether a row measures it (set apart
    from the headline table's); ``blocks(rows, budget)``, its part of the report from those
    rows, after the headline table's; ``lines(rows)``, its verdict lines, as the command
    prints them."""

    measures: Callable[[Row], bool]

    def blocks(self, rows: list[Row], budget: str) -> list[Block]: ...

    def lines(self, rows: list[Row]) -> list[str]: ...


@dataclass(frozen=True)
class Reproduction:
    """A paper's reproduction: ``paper`` is its key in ``papers.PAPERS``; ``study`` runs it
    (budgets ``smoke``, ``cpu``, ``paper``); ``cells`` turns the study's rows into ``Cell``s
    (those that no part ``measures``); ``regime(budget)`` lists how that budget differs
    from the paper; ``parts``: the other results it reproduces (``Part``)."""

    paper: str
    study: Study
    cells: Callable[[list[Row]], list[Cell]]
    regime: Callable[[str], list[RegimeDifference]]
    parts: tuple[Part, ...] = ()

    def rows_of(self, rows: list[Row]) -> tuple[list[Row], list[list[Row]]]:
        """``rows`` set apart: the headline table's, and each part's (``measures``)."""
        of_parts = [[row for row in rows if part.measures(row)] for part in self.parts]
        table = [row for row in rows if not any(part.measures(row) for part in self.parts)]
        return table, of_parts


def seconds_of(rows: list[Row]) -> float:
    """The sum of the rows' own times."""
    return sum(float(row.get("seconds", 0.0)) for row in rows)
