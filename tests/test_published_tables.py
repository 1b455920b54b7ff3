"""Published tables of measured results are generated from committed result files: the
documentation's block equals what the benchmark's report step makes of its ``runs.csv``."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_robustness_table_in_the_docs_is_made_from_runs_csv():
    robustness = load_benchmark("robustness")
    runs = robustness.read_runs(robustness.RESULTS / "runs.csv")
    text = robustness.table(runs) + "\n" + robustness.paired_table(runs)
    assert (robustness.RESULTS / "table.md").read_text() == text
    page = robustness.DOCS.read_text()
    block = page[page.index(robustness.DOCS_START) : page.index(robustness.DOCS_END)]
    assert block.split("\n", 1)[1] == "\n" + text + "\n"
