"""Published tables of measured results are generated from committed result files: a
benchmark's table file is what its report step makes of its data file (``runs.csv`` and
``table.md`` unless it names others), with the data file of the intervals it shows (their
p-values, ``<table>.intervals.csv``), and the documentation page includes that file (a
pymdownx.snippets line, resolved by the site build) instead of holding a copy; every
"mean [low, high]" interval a page's prose quotes is one of the tables it includes; and every
results page includes its generated Holm block (how many intervals it shows, which survive a
Holm correction), which is what ``result_tables.page_block`` makes of those data files."""

import importlib
import importlib.util
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from flowerbed.experiments.stats import paired_test, welch_test

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def load_benchmark(name: str):
    """A benchmark script as a module (its siblings, such as ``result_tables``, importable),
    registered in ``sys.modules`` while it runs (a dataclass looks its module up there)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def shared():
    """``benchmarks/result_tables.py`` as the benchmarks import it (``import result_tables``):
    its recording of intervals is what their report steps write into."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module("result_tables")


def published(benchmark) -> list[tuple[Path, Path]]:
    """(what the report step reads, the table it writes) for every table the benchmark
    publishes: its ``PUBLISHED`` pairs, else (``DATA``, ``TABLE``), by default ``runs.csv``
    and ``table.md`` in its ``RESULTS``."""
    if hasattr(benchmark, "PUBLISHED"):
        return list(benchmark.PUBLISHED)
    data = getattr(benchmark, "DATA", benchmark.RESULTS / "runs.csv")
    return [(data, getattr(benchmark, "TABLE", benchmark.RESULTS / "table.md"))]


@pytest.mark.parametrize(
    "name",
    [
        "robustness",
        "privacy",
        "qkt",
        "qkt_explain",
        "strategies",
        "ctl",
        "fedsa",
        "fedsa_explain",
        "bn_collapse",
        "flkd",
        "quantum_fl",
        "synthetic_heterogeneity",
        "gpu",
        "startup",
        "memory",
        "scale",
        "overhead",
        "reply_checks",
        "round_stages",
        "flower_message_pass",
    ],
)
def test_a_published_table_is_what_the_report_step_makes_of_its_data(name):
    benchmark = load_benchmark(name)
    tables = shared()
    page = benchmark.DOCS.read_text()
    for data, table in published(benchmark):
        with tables.recording() as recorded:
            text = benchmark.report(data)
        assert table.read_text() == text, f"rewrite it: python benchmarks/{name}.py --report-only"
        intervals = tables.intervals_csv(text, recorded)
        path = tables.intervals_file(table)
        if intervals is None:
            assert not path.exists(), f"{path} is left from an earlier table: rewrite it"
        else:
            assert path.read_text() == intervals, f"rewrite it: python benchmarks/{name}.py"
        # every "mean [low, high]" of the table is an interval with its test (and p-value),
        # except the ranges of the tables that show ranges
        unrecorded = tables.unrecorded_intervals(text, recorded)
        assert not unrecorded or table in RANGES, (
            f"{table}: not made by interval_text: {unrecorded}"
        )
        include = tables.docs_include(table)
        assert include == f'--8<-- "{table.relative_to(ROOT).as_posix()}"'
        assert include.startswith('--8<-- "benchmarks/results/')
        assert page.count(include) == 1, f"{benchmark.DOCS} does not include {table}"
        rows = [line for line in text.splitlines() if line.startswith("| ")]
        assert not any(row in page for row in rows), f"{benchmark.DOCS} holds a copy of {table}"


# tables whose "a [b, c]" cells are ranges, not intervals of a test
RANGES = {BENCHMARKS / "results" / "quantum_fl" / "client_overhead.md"}
# the results pages: each includes its Holm block
RESULTS_PAGES = (
    "robustness",
    "strategies",
    "studies-fedsa",
    "studies-qkt",
    "studies-ctl",
    "studies-distillation",
    "studies-quantum-fl",
    "benchmarks",
)


INTERVAL = re.compile(r"([+\-−]?\d+(?:\.\d+)?) \[([+\-−]?\d+(?:\.\d+)?), ([+\-−]?\d+(?:\.\d+)?)\]")


def interval_keys(text: str) -> set[tuple[float, float, float]]:
    """Every "mean [low, high]" in ``text``, as numbers (signs and minus glyphs aside)."""
    return {
        tuple(float(part.replace("−", "-")) for part in match.groups())
        for match in INTERVAL.finditer(text)
    }


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_interval_a_page_quotes_is_in_a_table_it_includes(page):
    """A paired interval quoted in the prose comes from a table the page includes (made by a
    report step from committed data), not from a hand computation."""
    text = page.read_text()
    # a snippet line names a file, or a file and one of its sections ("README.md:intro")
    snippets = re.findall(r'--8<-- "([^"]+)"', text)
    included = "".join((ROOT / path.split(":")[0]).read_text() for path in snippets)
    unmatched = interval_keys(text) - interval_keys(included)
    assert not unmatched, f"{page.name} quotes intervals no included table holds: {unmatched}"


@pytest.mark.parametrize("page", RESULTS_PAGES)
def test_a_results_page_says_which_intervals_survive_a_holm_correction(page):
    """Each results page includes its Holm block, generated from the intervals' data files of
    the tables it includes (rewritten by any report step of those tables)."""
    tables = shared()
    path = ROOT / "docs" / f"{page}.md"
    block = tables.page_block_file(path)
    assert path.read_text().count(tables.docs_include(block)) == 1, f"{page}.md lacks {block}"
    assert block.read_text() == tables.page_block(path), "rewrite it with a report step"
    # the prose's "the page's N intervals" (a finding that does not survive the correction for
    # them) counts what the block counts
    shown = sum(len(tables.read_intervals(table)) for table in tables.page_tables(path))
    prose = re.sub(r"\s+", " ", path.read_text())
    for count in re.findall(r"the page's (\d+) intervals", prose):
        assert int(count) == shown, f"{page}.md says {count} intervals; it shows {shown}"


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_a_page_that_shows_intervals_includes_its_holm_block(page):
    tables = shared()
    if any(map(tables.read_intervals, tables.page_tables(page))):
        assert tables.docs_include(tables.page_block_file(page)) in page.read_text()


def test_a_zero_variance_interval_is_marked_and_never_bold():
    """Every seed's difference the same: the interval has no width, the t test no statistic;
    the cell says so and is not bold, and the interval never survives the correction."""
    tables = shared()
    # differences of accuracies k/360, stored as float32 (as the runs' files hold them): equal
    # in exact arithmetic, about 1e-5 points apart in floating point
    differences = [
        100 * (float(np.float32(k / 360)) - float(np.float32((k + 1) / 360)))
        for k in (300, 320, 340)
    ]
    assert len(set(differences)) > 1
    assert tables.interval_cell(differences) == "-0.3 [-0.3, -0.3] (no spread)"
    test = paired_test(differences)
    assert not test.spread and not test.beyond_noise and math.isnan(test.p)
    assert tables.interval_cell([0.0, 0.0, 0.0]) == "+0.0 [+0.0, +0.0] (no spread)"
    assert tables.interval_cell([3.0, 3.5, 4.0]) == "**+3.5 [+2.3, +4.7]**"
    assert tables.interval_cell([1.0, 2.0, 4.0]) == "+2.3 [-1.5, +6.1]"
    assert tables.interval_text(welch_test([2.0, 2.0], [1.0, 1.0])) == (
        "+1.0 [+1.0, +1.0] (no spread)"
    )


def test_intervals_are_placed_where_the_table_shows_them():
    tables = shared()
    with tables.recording() as recorded:
        text = "\n".join(
            [
                "caption",
                "",
                "| method | k = 1 | k = 5 |",
                "|---|---|---|",
                "| A − B | "
                + " | ".join(tables.interval_cell(d) for d in ([1.0, 2.0, 4.0], [3.0, 3.5, 4.0]))
                + " |",
            ]
        )
    rows = tables.shown_intervals(text, recorded)
    assert [(r["table"], r["row"], r["column"], r["shown"]) for r in rows] == [
        (1, "A − B", "k = 1", "+2.3 [-1.5, +6.1]"),
        (1, "A − B", "k = 5", "+3.5 [+2.3, +4.7]"),
    ]
    assert tables.unrecorded_intervals(text + "\n+1.0 [+0.0, +2.0]", recorded) == [
        "+1.0 [+0.0, +2.0]"
    ]


def test_a_table_written_outside_the_checkout_is_written_and_no_page_is_touched(tmp_path):
    """A measurement into another ``--out`` (a temporary folder): the table and its intervals'
    data file are written; no page includes it."""
    tables = shared()
    table = tmp_path / "table.md"
    text = tables.write_table(
        table,
        lambda: f"| a | b |\n|---|---|\n| A − B | {tables.interval_cell([1.0, 2.0, 4.0])} |\n",
    )
    assert table.read_text() == text and tables.pages_including(table) == []
    assert "+2.3 [-1.5, +6.1]" in tables.intervals_file(table).read_text()
