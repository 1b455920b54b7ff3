"""The reproduction report (``flowerbed.experiments.reproduction_report``) on hand-made cells:
every number it shows checked against a value worked out by hand here."""

import html
import math
import re

import pytest

from flowerbed.experiments.papers import PAPERS, PaperRow, PaperTable
from flowerbed.experiments.reproduction import Cell, RegimeDifference
from flowerbed.experiments.reproduction_report import (
    HTML,
    MARKDOWN,
    NOT_FINITE,
    judge_claims,
    reproduction_tables,
    summary,
)
from flowerbed.experiments.stats import SIGN_TEST
from flowerbed.experiments.verdicts import (
    BEYOND_NOISE,
    INCLUDES_ZERO,
    NO_SPREAD,
    NOT_JUDGED,
    REPRODUCED,
    REVERSED,
    WITHIN_NOISE,
)

T_975_2 = 4.302652729911275  # Student t, 97.5 % quantile, 2 degrees of freedom

# higher is better; per seed 1, 2, 3:
#   A 10 12 14 | B 8 9 10 | C 11 13 13 | D 11 11 13 | E 9 11 13 | F: no cell
#   A - B = 2 3 4 (reproduced), B - C = -3 -4 -3 (reversed), A - D = -1 1 1 (within noise),
#   A - E = 1 1 1 (no spread), A - F: no seed
MEASURED = {
    "A": (10, 12, 14),
    "B": (8, 9, 10),
    "C": (11, 13, 13),
    "D": (11, 11, 13),
    "E": (9, 11, 13),
}
TABLE = PaperTable(
    paper="hand",
    title="A <hand-made> paper & its table",
    source="Table 1, p. 2",
    metric="accuracy (%)",
    higher_is_better=True,
    rows=tuple(PaperRow(m, v, "x") for m, v in zip("ABCDEF", (11, 9.5, 12, 11.25, 10, 7))),
    claims=(("A", "B", "x"), ("B", "C", "x"), ("A", "D", "x"), ("A", "E", "x"), ("A", "F", "x")),
)
CELLS = [
    Cell(method, "x", seed, float(value))
    for method, values in MEASURED.items()
    for seed, value in zip((1, 2, 3), values)
]
REGIME = [RegimeDifference("rounds", "100", "20", "a quick check | on purpose")]


def half_width(sd: float) -> float:
    return T_975_2 * sd / math.sqrt(3)


@pytest.fixture(scope="module")
def files():
    return reproduction_tables(TABLE, CELLS, REGIME, "smoke", 125.0)


def test_each_row_the_paper_and_ours(files):
    text = files[MARKDOWN]
    # A: mean 12, sd sqrt(((-2)^2 + 0 + 2^2) / 2) = 2; B: 9, 1; C: 37/3, sqrt(4/3);
    # D: 35/3, sqrt(4/3); E: 11, 2
    assert "| A | x | 11 | 12.00 ± 2.00 (3 seeds) |" in text
    assert "| B | x | 9.5 | 9.00 ± 1.00 (3 seeds) |" in text
    assert "| C | x | 12 | 12.33 ± 1.15 (3 seeds) |" in text
    assert "| D | x | 11.25 | 11.67 ± 1.15 (3 seeds) |" in text
    assert "| E | x | 10 | 11.00 ± 2.00 (3 seeds) |" in text
    assert "| F | x | 7 | not measured |" in text


def test_each_claim_its_interval_and_verdict(files):
    text = files[MARKDOWN]
    # A - B: mean 3, sd 1, half 4.3027 / sqrt(3) = 2.484
    half = half_width(1.0)
    assert half == pytest.approx(2.484, abs=1e-3)
    assert (
        f"| A ahead of B (x) | 3 | mean 3.00 | [{3 - half:.2f}, {3 + half:.2f}] | 3 of 3 | reproduced |"
        f" {BEYOND_NOISE} |" in text
    )
    # B - C: mean -10/3, sd sqrt(1/3)
    half = half_width(math.sqrt(1 / 3))
    assert (
        f"| B ahead of C (x) | 3 | mean -3.33 | [{-10 / 3 - half:.2f}, {-10 / 3 + half:.2f}] | 0 of 3 |"
        f" reversed | {BEYOND_NOISE} |" in text
    )
    # A - D: mean 1/3, sd sqrt(4/3)
    half = half_width(math.sqrt(4 / 3))
    assert (
        f"| A ahead of D (x) | 3 | mean 0.33 | [{1 / 3 - half:.2f}, {1 / 3 + half:.2f}] | 2 of 3 |"
        f" within noise | {INCLUDES_ZERO} |" in text
    )
    assert (
        "| A ahead of E (x) | 3 | mean 1.00 | [1.00, 1.00] (no spread) | 3 of 3 | within noise |"
        in text
    )
    assert "| A ahead of F (x) | 0 | – | – | 0 of 0 | not judged | F not measured here |" in text
    assert "A ahead of B (x): seed 1: +2.00; seed 2: +3.00; seed 3: +4.00." in text
    assert "A ahead of F (x): no seed measured for both." in text


def test_verdict_words_and_chance_line(files):
    words = [r.verdict.word for r in judge_claims(TABLE, CELLS)]
    assert words == [REPRODUCED, REVERSED, WITHIN_NOISE, WITHIN_NOISE, NOT_JUDGED]
    assert judge_claims(TABLE, CELLS)[3].verdict.reason == NO_SPREAD
    # F has no cell at all: the reason says it was not measured, not that seeds were too few
    assert judge_claims(TABLE, CELLS)[4].verdict.reason == "F not measured here"
    # judged: 4 intervals (the one without spread among them), 2 beyond noise; 4 x 0.05 = 0.2
    assert "2 of 4 intervals exclude 0; about 0.2 would by chance alone" in files[MARKDOWN]


def test_title_source_regime_budget_and_time(files):
    text = files[MARKDOWN]
    assert text.startswith("# Reproduction: A <hand-made> paper & its table\n")
    assert "The paper's numbers: Table 1, p. 2." in text
    assert "| rounds | 100 | 20 | a quick check \\| on purpose |" in text
    assert "Budget: smoke. Measured time: 125 s (2.1 min)" in text


def test_the_page_holds_the_same_cells_escaped(files):
    page = files[HTML]
    assert "<script" not in page and "http" not in page
    assert "A &lt;hand-made&gt; paper &amp; its table" in page and "<hand-made>" not in page
    for line in files[MARKDOWN].splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            for cell in cells:
                assert f">{html.escape(cell)}</t" in page


def test_a_value_that_is_not_finite_is_shown_and_its_claims_judged_by_the_sign_test():
    ctl = PAPERS["ctl"]
    values = {"Best": (10, 12, 14), "Worst": (20, 20, 30), "Local": (math.inf, math.inf, 25)}
    cells = [
        Cell(method, "", seed, float(v))
        for method, vs in values.items()
        for seed, v in zip((1, 2, 3), vs)
    ]
    text = reproduction_tables(ctl, cells, [], "cpu", 0.0)[MARKDOWN]
    assert "| Local | ∞ | ∞ in 2 of 3 seeds; the other 1: 25.00 |" in text
    assert "| All | 15 | not measured |" in text
    results = {(r.better, r.worse): r for r in judge_claims(ctl, cells)}
    # Best - Worst = -10 -8 -16: finite, a t interval (lower is better: the claimed side is
    # negative)
    assert results["Best", "Worst"].verdict.word == REPRODUCED
    for claim, ordered in ((("Best", "Local"), 3), (("Worst", "Local"), 2)):
        # an infinity: the sign test, whose interval cannot exclude 0 with 3 seeds
        assert results[claim].verdict.word == WITHIN_NOISE
        assert results[claim].verdict.interval.test == SIGN_TEST
        assert results[claim].ordered == ordered  # 30 vs 25: Worst behind Local in seed 3
    assert "Worst ahead of Local: seed 1: 20.00 vs ∞; seed 2: 20.00 vs ∞; seed 3: +5.00." in text
    # Worst - Local = -∞, -∞, +5: median -∞, interval (-∞, ∞) under 6 seeds
    assert "| Worst ahead of Local | 3 | median -∞ | [-∞, ∞] (sign test) | 2 of 3 |" in text
    assert "1 of 3 intervals exclude 0; about 0.15 would by chance alone" in text


def test_with_six_seeds_an_infinity_behind_every_value_is_a_reproduced_ordering():
    ctl = PAPERS["ctl"]
    seeds = range(6)
    cells = [Cell("Best", "", s, 10.0 + s) for s in seeds]
    cells += [Cell("Local", "", s, math.inf) for s in seeds]
    cells += [Cell("Local", "", 9, math.nan), Cell("Best", "", 9, 3.0)]  # a NaN: not judged
    (result,) = [r for r in judge_claims(ctl, cells) if (r.better, r.worse) == ("Best", "Local")]
    assert result.verdict.word == NOT_JUDGED
    assert result.verdict.reason == NOT_FINITE  # the NaN seed makes the claim unjudgeable
    cells = cells[:-2]
    (result,) = [r for r in judge_claims(ctl, cells) if (r.better, r.worse) == ("Best", "Local")]
    assert result.verdict.word == REPRODUCED and result.ordered == 6
    assert (result.verdict.interval.low, result.verdict.interval.high) == (-math.inf, -math.inf)


def test_summary_never_shows_a_number_for_infinity():
    assert summary([math.inf, math.inf]) == "∞ in 2 of 2 seeds"
    assert summary([5.0]) == "5.00 (1 seed)"
    assert summary([]) == "not measured"


def test_runs_in_no_invocations_record_are_counted_beside_the_invocations():
    provenance = ["1 run on 2026-01-01 at commit abc, on a machine, by `x`."]
    text = reproduction_tables(TABLE, CELLS, REGIME, "smoke", 1.0, provenance, 2)[MARKDOWN]
    assert (
        "Measured: 1 run on 2026-01-01 at commit abc, on a machine, by `x`. 2 of the folder's"
        " runs are in no invocation's record (measured before measured.jsonl existed, or by an"
        " invocation killed before its end): where is not recorded." in text
    )
    without = reproduction_tables(TABLE, CELLS, REGIME, "smoke", 1.0, [], 2)[MARKDOWN]
    assert "Where it was measured was not recorded (rows measured before" in without
