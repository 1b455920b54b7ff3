"""What a run imports: every Ray actor imports ``flowerbed.client_app`` and the ServerApp process
``flowerbed.server_app``, so the heavy libraries a run may not need (torchvision, PennyLane,
MedMNIST, scikit-learn, SciPy, Hugging Face ``datasets``, flwr-datasets, matplotlib,
dp-accounting) are imported only by the code that uses them: a model's builder, a data set's
loader, the plot, a run with ``dp`` set.
The default data set, ``digits``, imports none of them.

One fresh interpreter (this one has imported everything) goes through the stages of a run and
reports, after each, which of those libraries are loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WATCHED = (
    "torchvision",
    "pennylane",
    "medmnist",
    "sklearn",
    "scipy",
    "datasets",
    "flwr_datasets",
    "pandas",
    "matplotlib",
    "tensorboard",
    "mlflow",
    "dp_accounting",
)

STAGES = r"""
import json, sys, tempfile

watched = sys.argv[1].split(",")
loaded = {}

def record(stage):
    loaded[stage] = sorted(name for name in watched if name in sys.modules)

import flowerbed.client_app
record("import client_app")
import flowerbed.server_app
record("import server_app")
from flowerbed.catalog import parse_run_config
from flowerbed.inprocess import resolve_run_config, run_in_process
parse_run_config(resolve_run_config({}))
record("check the default run config")
from flowerbed.data import load_dataset
load_dataset("digits")
load_dataset("breast-cancer")
record("load digits and breast-cancer")
overrides = {"num-server-rounds": 1, "local-epochs": 1, "output-dir": tempfile.mkdtemp()}
run_in_process(overrides, num_clients=2)
record("default run")
from flowerbed.models import build_model
build_model("resnet18", (3, 8, 8), 10)
record("build resnet18")
build_model("vqc", (1, 4, 4), 2)
record("build vqc")
print(json.dumps(loaded))
"""


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    """Stage -> the watched libraries in ``sys.modules`` after it (cumulative)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "FLOWERBED_REPORT": "1",  # the default run writes its report.html, as outside the tests
    }
    proc = subprocess.run(
        [sys.executable, "-c", STAGES, ",".join(WATCHED)],
        env=env,
        cwd=ROOT,  # python -c puts its working folder first on the path
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_the_apps_and_checking_a_run_config_imports_none_of_them(loaded):
    assert loaded["import client_app"] == []
    assert loaded["import server_app"] == []
    assert loaded["check the default run config"] == []  # the dataset key's choices included


def test_loading_the_bundled_sets_imports_none_of_them(loaded):
    # digits and breast-cancer are read from scikit-learn's package folder with numpy and
    # split by flowerbed's port of its stratified split: scikit-learn (and SciPy) stay out
    assert loaded["load digits and breast-cancer"] == []


def test_the_default_run_imports_only_matplotlib_for_the_plot(loaded):
    # the ServerApp plots the history; the clients' digits needs no scikit-learn
    assert loaded["default run"] == ["matplotlib"]


def test_models_import_their_library_when_built(loaded):
    assert "torchvision" in loaded["build resnet18"]
    assert "pennylane" not in loaded["build resnet18"]
    assert "pennylane" in loaded["build vqc"]


def test_the_written_out_medmnist_flags_are_medmnists_2d_single_label_ones():
    from medmnist import INFO

    from flowerbed.data.medmnist_files import MEDMNIST_FLAGS

    derived = tuple(
        flag
        for flag, info in INFO.items()
        if not flag.endswith("3d") and not info["task"].startswith("multi-label")
    )
    assert derived == MEDMNIST_FLAGS
