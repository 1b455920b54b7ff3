"""Published tables of measured results are generated from committed result files: the
documentation's block equals what the benchmark's report step makes of its ``runs.csv``."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def load_benchmark(name: str):
    """A benchmark script as a module (its siblings, such as ``result_tables``, importable)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["robustness", "privacy"])
def test_a_published_table_is_what_the_report_step_makes_of_runs_csv(name):
    benchmark = load_benchmark(name)
    tables = load_benchmark("result_tables")
    text = benchmark.report(benchmark.RESULTS / "runs.csv")
    assert (benchmark.RESULTS / "table.md").read_text() == text
    page = benchmark.DOCS.read_text()
    block = tables.published_block(page, benchmark.DOCS_START, benchmark.DOCS_END)
    assert block == "\n" + text + "\n"
