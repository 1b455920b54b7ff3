"""What a reproduction of a paper is: a study (``driver.Study``) whose rows give, per seed, the
value of each cell of the paper's headline table (``papers.PAPERS``), and the list of the ways its
regime differs from the paper's.

``Cell`` is one measured value of one of the paper's cells: the method and setting as the paper
names them (``PaperRow.method``, ``PaperRow.setting``), the seed, and the value in the table's
unit (``PaperTable.metric``). A study's rows can hold many cells each (one simulation measures
every method at once) or one; ``Reproduction.cells`` turns the rows into cells, so that the
report (paper vs ours, and a verdict per claimed ordering, paired by seed) needs to know
nothing about how a study runs.

A result the paper shows only in a figure (``papers.PaperFigure``) is a ``FigureReproduction``
of the same study: the rows that measure it (``measures``) are set apart from the headline
table's, turned into cells of their own and reported after it (``figure_report``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .driver import Study, Value
from .papers import PaperFigure

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


@dataclass(frozen=True)
class FigureReproduction:
    """The reproduction of a result shown only in a figure (``figure``), by the rows of its
    paper's study that ``measures`` picks; ``cells`` turns them into ``Cell``s (the figure's
    methods and settings); ``regime(budget)`` lists how that budget differs from the paper."""

    figure: PaperFigure
    measures: Callable[[Row], bool]
    cells: Callable[[list[Row]], list[Cell]]
    regime: Callable[[str], list[RegimeDifference]]


@dataclass(frozen=True)
class Reproduction:
    """A paper's reproduction: ``paper`` is its key in ``papers.PAPERS``; ``study`` runs it
    (budgets ``smoke``, ``cpu``, ``paper``); ``cells`` turns the study's rows into ``Cell``s
    (those that no figure ``measures``); ``regime(budget)`` lists how that budget differs
    from the paper; ``figures``: the results it reproduces that the paper shows only in
    figures."""

    paper: str
    study: Study
    cells: Callable[[list[Row]], list[Cell]]
    regime: Callable[[str], list[RegimeDifference]]
    figures: tuple[FigureReproduction, ...] = ()

    def rows_of(self, rows: list[Row]) -> tuple[list[Row], list[list[Row]]]:
        """``rows`` set apart: the headline table's, and each figure's (``measures``)."""
        of_figures = [[row for row in rows if part.measures(row)] for part in self.figures]
        table = [row for row in rows if not any(part.measures(row) for part in self.figures)]
        return table, of_figures
