"""Published tables of measured results are generated from committed result files: a
benchmark's table file is what its report step makes of its data file (``runs.csv`` and
``table.md`` unless it names others), and the documentation page includes that file (a
pymdownx.snippets line, resolved by the site build) instead of holding a copy; and every
"mean [low, high]" interval a page's prose quotes is one of the tables it includes."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

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
    ],
)
def test_a_published_table_is_what_the_report_step_makes_of_its_data(name):
    benchmark = load_benchmark(name)
    tables = load_benchmark("result_tables")
    page = benchmark.DOCS.read_text()
    for data, table in published(benchmark):
        text = benchmark.report(data)
        assert table.read_text() == text, f"rewrite it: python benchmarks/{name}.py --report-only"
        include = tables.docs_include(table)
        assert include == f'--8<-- "{table.relative_to(ROOT).as_posix()}"'
        assert include.startswith('--8<-- "benchmarks/results/')
        assert page.count(include) == 1, f"{benchmark.DOCS} does not include {table}"
        rows = [line for line in text.splitlines() if line.startswith("| ")]
        assert not any(row in page for row in rows), f"{benchmark.DOCS} holds a copy of {table}"


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
