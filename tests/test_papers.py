"""The papers' headline numbers (``flowerbed.experiments.papers``): every cell is printed in its
paper's table, on a line naming its method, and every claimed ordering holds in the cells; a
result shown only in a figure (``FIGURES``) claims only what its paper's text says of it; a
summary by objective (``SUMMARIES``: the FL + KD benchmark's Table 4) prints every number on
its objective's row, agrees with the per-cell table it summarises, and claims what its text
says.

The text check needs the papers' text files (``/work/shared/papers/``), which a clean checkout
lacks: it is skipped without them. The checks of the data alone always run."""

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest

from flowerbed.experiments.papers import (
    BEHIND_WEAKEST,
    FIGURES,
    PAPERS,
    SUMMARIES,
    PaperTable,
    R,
)

PAPERS_DIR = Path("/work/shared/papers")

# Per paper: its text file, and two markers that enclose its headline table's block (each must
# occur once). FedSA's extracted text prints the table's body before its caption; CTL has no
# table, only the results section that reads its figure.
BLOCKS = {
    "qkt": (
        "qkt-query-based-knowledge-transfer.txt",
        "Table 2: Average accuracy",
        "Data distribution.",
    ),
    "fedsa": (
        "fedsa-federated-selective-aggregation.txt",
        "Dataset Method\nHomogeneous",
        "Table 1: The performance of FedSA",
    ),
    "flkd": (
        "flkd-benchmark-fl-and-kd-point-clouds.txt",
        "Table 1: Standalone FL instance accuracy",
        "Federated training degrades severely",
    ),
    "qfedfisher": (
        "qfedfisher-quantum-fl-fisher-information.txt",
        "TABLE I. Performance",
        "A. Model performance on the ADNI dataset",
    ),
    "ctl": ("ctl-collaborative-transfer-learning.txt", "4.1.3. Results", "4.2. Simulation"),
}


def table_block(paper: str) -> str:
    """The text between the paper's two markers, with the arXiv HTML extraction's doubled
    numbers ("92.2692.26", LaTeX source beside its rendering) collapsed to one."""
    name, start, end = BLOCKS[paper]
    text = (PAPERS_DIR / name).read_text()
    assert text.count(start) == 1 and text.count(end) == 1, (paper, start, end)
    block = text[text.index(start) : text.index(end)]
    assert block, paper
    return re.sub(r"(\d+\.\d+)\1", r"\1", block)


def positions(value: float, line: str) -> list[int]:
    """Where ``line`` prints ``value`` as a whole number token at some precision (0 to 4
    decimals, leading zeros allowed: "09.27"), so 75.4 is not found in "75.43"."""
    found = set()
    for decimals in range(5):
        digits = re.escape(f"{value:.{decimals}f}").lstrip("0") or "0"
        found |= {m.start() for m in re.finditer(rf"(?<![\d.])0*{digits}(?!\.?\d)", line)}
    return sorted(found)


def printed(value: float, line: str) -> bool:
    return bool(positions(value, line))


def lines_naming(method: str, block: str) -> list[str]:
    """The block's lines that name ``method`` as a word (case-insensitive)."""
    pattern = re.compile(rf"(?<!\w){re.escape(method)}(?!\w)", re.IGNORECASE)
    return [line for line in block.splitlines() if pattern.search(line)]


def test_printed_is_strict():
    assert printed(40.0, "Scratch Training 40.00 62.14")
    assert printed(9.27, "FedAvg(1) 1 10.95 09.27")
    assert printed(12, "reaching 0.8503 at iteration 12, demonstrating")
    assert not printed(75.4, "75.43")
    assert not printed(12, "112 and 12.5")
    assert not printed(0.85, "0.8503")


@pytest.mark.skipif(not PAPERS_DIR.exists(), reason="the papers' text files are not here")
@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_every_value_is_printed_in_its_table(paper):
    table, block = PAPERS[paper], table_block(paper)
    for row in table.rows:
        lines = lines_naming(row.method, block)
        assert lines, (paper, row.method)
        if math.isinf(row.value):  # a threshold never reached: the text must say so
            assert any(re.search(r"never|failed to reach", line) for line in lines), row
        else:
            assert any(printed(row.value, line) for line in lines), row


@pytest.mark.skipif(not PAPERS_DIR.exists(), reason="the papers' text files are not here")
@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_columns_are_in_the_papers_order(paper):
    """A method's cells in consecutive settings that one line prints both of are printed in the
    table's order of settings (so two columns swapped are caught)."""
    table, block = PAPERS[paper], table_block(paper)
    for method in dict.fromkeys(row.method for row in table.rows):
        rows = [row for row in table.rows if row.method == method and math.isfinite(row.value)]
        lines = lines_naming(method, block)
        for first, second in itertools.pairwise(rows):
            shared = [ln for ln in lines if printed(first.value, ln) and printed(second.value, ln)]
            if shared:
                assert any(
                    positions(first.value, ln)[0] < positions(second.value, ln)[-1] for ln in shared
                ), (method, first, second)


@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_table_is_complete_and_consistent(paper):
    table: PaperTable = PAPERS[paper]
    assert table.paper == paper
    assert table.title and table.source and table.metric
    assert len(table.rows) >= 2
    cells = [(row.method, row.setting) for row in table.rows]
    assert len(cells) == len(set(cells)), "one value per method and setting"
    assert all(not math.isnan(row.value) for row in table.rows)
    assert table.claims
    for better, worse, setting in table.claims:
        assert (better, setting) in cells and (worse, setting) in cells, (better, worse, setting)
        assert table.holds(better, worse, setting), (better, worse, setting)


def test_holds_reads_the_metric_side():
    qkt, ctl = PAPERS["qkt"], PAPERS["ctl"]
    assert qkt.holds("QKT", "KD", "single-class, Path")
    assert not qkt.holds("KD", "QKT", "single-class, Path")
    assert ctl.holds("Best", "Worst") and not ctl.holds("Worst", "Best")
    assert ctl.holds("Worst", "Local")
    with pytest.raises(KeyError):
        qkt.value("QKT", "no such setting")


# Per figure (paper, title): its text section's two markers, and what the text says for each of
# its claims, contrasts and comparable pairs, in that order.
FIGURE_TEXT = {
    ("ctl", "Simulation 2 (spread and dispersion)"): (
        ("4.2.2. Results", "5. Discussion"),
        (
            "collaboration becomes crucial, and best significantly outperforms local",
            "best showed limited improvement over local",
            "the local strategy performs comparably to best",
        ),
    ),
}


@pytest.mark.parametrize("paper", sorted(FIGURES))
def test_a_figures_claims_name_its_methods_and_settings(paper):
    for figure in FIGURES[paper]:
        assert figure.paper == paper and paper in PAPERS
        assert figure.title and figure.source and figure.metric
        pairs = [*figure.claims, *figure.comparable]
        pairs += [(c.better, c.worse, s) for c in figure.contrasts for s in (c.larger, c.smaller)]
        assert pairs
        for better, worse, setting in pairs:
            assert {better, worse} <= set(figure.methods) and better != worse
            assert setting in figure.settings


@pytest.mark.skipif(not PAPERS_DIR.exists(), reason="the papers' text files are not here")
@pytest.mark.parametrize("paper", sorted(FIGURES))
def test_a_figures_claims_are_what_its_text_says(paper):
    name = BLOCKS[paper][0]
    text = (PAPERS_DIR / name).read_text()
    for figure in FIGURES[paper]:
        (start, end), quotes = FIGURE_TEXT[(paper, figure.title)]
        assert text.count(start) == 1 and text.count(end) == 1
        section = text[text.index(start) : text.index(end)]
        claimed = len(figure.claims) + len(figure.contrasts) + len(figure.comparable)
        assert len(quotes) == claimed
        assert all(quote in section for quote in quotes)


# Per summary (paper, title): its file, the markers of its table's block (the caption to the
# next section), of the section whose text reads it, of its per-cell table (the means it
# summarises), and per claim what the text says of each side, in the claims' order.
SUMMARY_TEXT = {
    ("flkd", "Table 4 (the two-stage pipeline by objective)"): {
        "table": ("Table 4: Two-stage combined pipeline", "5 Discussion and Limitations"),
        "section": ("4.5 Real-World Validation", "5 Discussion and Limitations"),
        "cells": ("Table A8: Complete combined-pipeline results on the clinical", "Table A9:"),
        "claims": (
            ("still yields a 97.5%97.5\\% student under Vanilla KD", "FedAvgM with Attention"),
            ("100%100\\% under CRD", "Attention Transfer or SP yields 25.0%25.0\\%"),
            ("track the teacher almost perfectly", "does not correlate with teacher quality"),
            ("track the teacher almost perfectly", "does not correlate with teacher quality"),
        ),
    },
}
# Table A8's columns, in its order, by the name Table 4 gives each objective
A8_COLUMNS = (
    "Vanilla KD",
    "Self-Distillation",
    "Cosine Similarity",
    "Contrastive (CRD)",
    "Decoupled KD",
    "Logit-MSE",
    "Feature KD",
    "Attention Transfer",
    "Relational KD",
    "Similarity-Preserving",
)


def paper_text(name: str) -> str:
    """A paper's text with its non-breaking spaces as spaces (the extraction keeps some)."""
    return (PAPERS_DIR / name).read_text().replace("\u00a0", " ")


def between(text: str, start: str, end: str) -> str:
    assert text.count(start) == 1, start
    assert text.index(start) < text.index(end, text.index(start))
    return text[text.index(start) : text.index(end, text.index(start))]


def signed_numbers(block: str) -> str:
    """``block`` with the extraction's doubled numbers collapsed, signs kept: "0.05-0.05"
    (a rendered minus lost before its source) is -0.05, "+0.37+0.37" is +0.37."""
    block = re.sub(r"(\d+\.\d+)-\1(?![\d.])", r"-\1", block)
    block = re.sub(r"([+-]\d+\.\d+)\1(?![\d.])", r"\1", block)
    return re.sub(r"(\d+\.\d+)\1", r"\1", block)


def table_a8(block: str) -> dict[str, tuple[float, list[float]]]:
    """Table A8's rows: teacher -> (its standalone accuracy, the ten students' means)."""
    rows = {}
    for line in block.splitlines():
        match = re.match(r"(\w+) \[\w+\] \((\d+\.\d)\) ([\d. ]+)$", line.strip())
        if match:
            rows[match[1]] = (float(match[2]), [float(v) for v in match[3].split()])
    return rows


def test_every_summary_is_complete_and_its_claims_hold_in_its_numbers():
    for paper, summaries in SUMMARIES.items():
        for table in summaries:
            assert table.paper == paper and paper in PAPERS
            assert table.title and table.source and table.metric
            headline = PAPERS[paper]
            for teacher in (table.weakest, table.strongest):  # methods of the headline table
                assert not math.isnan(headline.value(teacher, table.setting))
            objectives = [row.objective for row in table.rows]
            assert len(objectives) == len(set(objectives)) >= 2
            assert table.claims
            for better, worse, column in table.claims:
                assert {better, worse} <= set(objectives) and better != worse
                assert column in (BEHIND_WEAKEST, R)
                assert table.holds(better, worse, column), (better, worse, column)
            said = [o for u in table.unjudged for o in u.objectives]
            assert sorted(said) == sorted(objectives)  # each objective in one statement
            for unjudged in table.unjudged:  # one statement per side of the CE weight
                ce = {table.row(o).ce_weight > 0 for o in unjudged.objectives}
                assert len(ce) == 1


@pytest.mark.skipif(not PAPERS_DIR.exists(), reason="the papers' text files are not here")
@pytest.mark.parametrize("paper", sorted(SUMMARIES))
def test_every_number_of_a_summary_is_printed_on_its_row_in_order(paper):
    for table in SUMMARIES[paper]:
        markers = SUMMARY_TEXT[(paper, table.title)]
        block = signed_numbers(between(paper_text(BLOCKS[paper][0]), *markers["table"]))
        for row in table.rows:
            lines = lines_naming(row.objective, block)
            assert len(lines) == 1, row.objective
            line = lines[0]
            values = (row.ce_weight, row.weakest, row.strongest, row.range)
            assert all(printed(v, line) for v in values), row
            sign = re.escape(f"{row.r:+.2f}")  # r with its sign, the last number of the row
            assert re.search(rf"(?<![\d.]){sign}$", line.strip()), row
            for first, second in itertools.pairwise(values):
                assert positions(first, line)[0] < positions(second, line)[-1], (row, first)


@pytest.mark.skipif(not PAPERS_DIR.exists(), reason="the papers' text files are not here")
@pytest.mark.parametrize("paper", sorted(SUMMARIES))
def test_a_summarys_rows_are_its_per_cell_tables_summary(paper):
    """Behind the weakest and the strongest teacher: their rows of Table A8; the range: max -
    min of the column; r: Pearson's over the 13 teachers of Table A8's rounded means (so
    within 0.02 of the printed r)."""
    for table in SUMMARIES[paper]:
        markers = SUMMARY_TEXT[(paper, table.title)]
        cells = table_a8(between(paper_text(BLOCKS[paper][0]), *markers["cells"]))
        assert len(cells) == 13
        assert {table.weakest, table.strongest} <= set(cells)
        teachers = [accuracy for accuracy, _ in cells.values()]
        headline = PAPERS[paper]
        weakest = headline.value(table.weakest, table.setting)
        assert cells[table.weakest][0] == pytest.approx(weakest, abs=0.05)
        assert min(teachers) == pytest.approx(weakest, abs=0.05)  # the weakest of the 13
        assert max(teachers) == pytest.approx(cells[table.strongest][0])  # the strongest
        for row in table.rows:
            column = A8_COLUMNS.index(row.objective)
            students = [means[column] for _, means in cells.values()]
            assert cells[table.weakest][1][column] == row.weakest, row
            assert cells[table.strongest][1][column] == row.strongest, row
            assert max(students) - min(students) == pytest.approx(row.range, abs=0.051), row
            r = float(np.corrcoef(teachers, students)[0, 1])
            assert r == pytest.approx(row.r, abs=0.02), (row, r)


@pytest.mark.skipif(not PAPERS_DIR.exists(), reason="the papers' text files are not here")
@pytest.mark.parametrize("paper", sorted(SUMMARIES))
def test_a_summarys_claims_and_words_are_what_its_text_says(paper):
    for table in SUMMARIES[paper]:
        markers = SUMMARY_TEXT[(paper, table.title)]
        text = paper_text(BLOCKS[paper][0])
        section = between(text, *markers["section"])
        assert len(markers["claims"]) == len(table.claims)
        for claim, quotes in zip(table.claims, markers["claims"], strict=True):
            assert all(quote in section for quote in quotes), claim
        caption = between(text, *markers["table"])
        for unjudged in table.unjudged:
            assert unjudged.words in caption, unjudged.words
        assert table.weakest in caption and table.strongest in caption
