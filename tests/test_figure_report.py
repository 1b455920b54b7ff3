"""The report's part for a result shown only in a figure (``flowerbed.experiments.figure_report``)
on hand-made cells: the paper's column says it has no number, a claim within a setting is paired
by seed, a contrast across settings (on different seeds) is judged by the Welch interval worked
out by hand here, a comparable pair is shown with its interval and no verdict, and the part comes
after the headline table's regime."""

import math

import pytest

from flowerbed.experiments.figure_report import (
    NO_NUMBER,
    figure_blocks,
    figure_lines,
    judge_contrast,
)
from flowerbed.experiments.papers import Contrast, PaperFigure, PaperRow, PaperTable
from flowerbed.experiments.reproduction import Cell, RegimeDifference
from flowerbed.experiments.reproduction_report import MARKDOWN, reproduction_tables
from flowerbed.experiments.verdicts import (
    INCLUDES_ZERO,
    NOT_JUDGED,
    REPRODUCED,
    REVERSED,
    TOO_FEW_IN_A_SETTING,
)

T_975_2 = 4.302653  # Student t, 97.5 % quantile, 2 degrees of freedom
T_975_4 = 2.776445  # 4 degrees of freedom: Welch's for two samples of 3 with equal variances

FIGURE = PaperFigure(
    paper="hand",
    title="Figure 9 (far and near)",
    source="Fig. 9, p. 3",
    metric="accuracy (%)",
    higher_is_better=True,
    methods=("A", "B"),
    settings=("far", "near"),
    claims=(("A", "B", "far"),),
    contrasts=(Contrast("A", "B", "far", "near"),),
    comparable=(("A", "B", "near"),),
)


def cells(far: dict[str, tuple], near: dict[str, tuple]) -> list[Cell]:
    """Cells of the figure: ``far`` on seeds 1, 2, 3 and ``near`` on seeds 4, 5, 6."""
    return [
        Cell(method, setting, seed, float(value))
        for setting, seeds, measured in (("far", (1, 2, 3), far), ("near", (4, 5, 6), near))
        for method, values in measured.items()
        for seed, value in zip(seeds, values, strict=True)
    ]


# far: A - B = 5, 6, 7 (mean 6, variance 1); near: A - B = 1, 2, 3 (mean 2, variance 1)
CELLS = cells({"A": (80, 82, 84), "B": (75, 76, 77)}, {"A": (90, 91, 92), "B": (89, 89, 89)})
REGIME = [RegimeDifference("rounds", "100", "20", "a quick check")]


@pytest.fixture(scope="module")
def text():
    table = PaperTable("hand", "A hand-made paper", "Table 1", "rounds", False, (), ())
    more = figure_blocks(FIGURE, CELLS, REGIME, "smoke", 30.0)
    return reproduction_tables(table, [], [], "smoke", 10.0, more=more)[MARKDOWN]


def test_the_paper_column_says_there_is_no_number(text):
    # A far: 80 82 84, mean 82, sd 2; B near: 89 89 89, mean 89, sd 0
    assert f"| A | far | {NO_NUMBER} | 82.00 ± 2.00 (3 seeds) |" in text
    assert f"| B | near | {NO_NUMBER} | 89.00 ± 0.00 (3 seeds) |" in text
    assert text.count(NO_NUMBER) == 4


def test_a_claim_within_a_setting_is_paired_by_seed(text):
    # A - B far: 5 6 7, mean 6, sd 1, half 4.302653 / sqrt(3) = 2.484138
    half = T_975_2 / math.sqrt(3)
    assert (
        f"| A ahead of B (far) | 3 | mean 6.00 | [{6 - half:.2f}, {6 + half:.2f}] | 3 of 3 |"
        " reproduced |" in text
    )


def test_a_contrast_across_settings_is_judged_by_the_welch_interval(text):
    # 6 - 2 = 4, standard error sqrt(1/3 + 1/3), half 2.776445 x 0.816497 = 2.266966
    half = T_975_4 * math.sqrt(2 / 3)
    assert (
        f"| (A - B) larger at far than at near | 6.00 (3 seeds) | 2.00 (3 seeds) | 4.00 |"
        f" [{4 - half:.2f}, {4 + half:.2f}] | reproduced |" in text
    )
    assert "2 of 2 intervals exclude 0; about 0.1 would by chance alone" in text


def test_a_comparable_pair_is_shown_with_its_interval_and_no_verdict(text):
    # A - B near: 1 2 3, mean 2, sd 1: [2 - 2.484, 2 + 2.484], which holds 0
    half = T_975_2 / math.sqrt(3)
    row = f"| A and B (near) | 3 | mean 2.00 | [{2 - half:.2f}, {2 + half:.2f}] | 3 of 3 |"
    assert row + "\n" in text  # the row ends there: no verdict column
    assert "A ahead of B (near): seed 4: +1.00; seed 5: +2.00; seed 6: +3.00." in text


def test_the_figures_part_follows_the_headline_tables_regime(text):
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == [
        "## The paper's numbers and ours",
        "## The paper's claims",
        "## Per-seed differences",
        "## Regime",
        "## Figure 9 (far and near): the paper's figure and ours",
        "## Figure 9 (far and near): the paper's claims",
        "## Figure 9 (far and near): per-seed differences",
        "## Figure 9 (far and near): regime",
    ]
    assert "Budget: smoke. Measured time: 30 s (0.5 min), the sum of these runs' own times" in text
    assert "| rounds | 100 | 20 | a quick check |" in text


def test_a_reversed_contrast_a_noisy_one_and_one_without_seeds():
    reversed_ = cells({"A": (80, 81, 82), "B": (79, 79, 79)}, {"A": (95, 96, 97), "B": (90,) * 3})
    assert judge_contrast(FIGURE, reversed_, FIGURE.contrasts[0]).verdict.word == REVERSED
    # far: A - B = 0, 3, 6 (mean 3, variance 9); near: -1, 2, 5 (mean 2, variance 9)
    noisy = cells({"A": (80, 83, 86), "B": (80,) * 3}, {"A": (89, 92, 95), "B": (90,) * 3})
    result = judge_contrast(FIGURE, noisy, FIGURE.contrasts[0])
    assert result.verdict.reason == INCLUDES_ZERO
    assert result.verdict.interval.low == pytest.approx(1 - T_975_4 * math.sqrt(6), abs=1e-5)
    one_far = [c for c in CELLS if c.setting == "near" or c.seed == 1]
    result = judge_contrast(FIGURE, one_far, FIGURE.contrasts[0])
    assert result.verdict.word == NOT_JUDGED and result.verdict.reason == TOO_FEW_IN_A_SETTING


def test_the_command_prints_a_line_per_claim_and_contrast():
    lines = figure_lines(FIGURE, CELLS)
    assert lines[0].startswith(f"A ahead of B (far): {REPRODUCED} (mean 6.00, 95 % interval [")
    assert lines[1].startswith(f"(A - B) larger at far than at near: {REPRODUCED} (difference 4.00")
    assert len(lines) == 2  # the comparable pair has no verdict


def test_a_figure_without_cells_says_not_measured():
    text = reproduction_tables(
        PaperTable("hand", "t", "s", "m", True, (PaperRow("A", 1.0),), ()),
        [],
        [],
        "smoke",
        0.0,
        more=figure_blocks(FIGURE, [], [], "smoke", 0.0),
    )[MARKDOWN]
    assert f"| A | far | {NO_NUMBER} | not measured |" in text
    assert (
        "| A ahead of B (far) | 0 | – | – | 0 of 0 | not judged | A and B not measured here |"
        in text
    )
    assert "| (A - B) larger at far than at near | – | – | – | – | not judged |" in text
    assert "| A and B (near) | 0 | – | – | 0 of 0 |" in text
