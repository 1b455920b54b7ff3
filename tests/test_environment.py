"""``environment.json`` (``runtime.environment``): its keys, facts that never fail, versions
learnt without importing the packages, and a real run writes it beside ``config.json``."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

from flowerbed.inprocess import run_in_process
from flowerbed.runtime import checkpoint
from flowerbed.runtime import environment as env


def test_environment_json_has_the_versions_and_the_machine():
    facts = env.environment()
    assert set(facts) == {"flowerbed", "packages", "python", "machine"}
    assert {"version", "git_commit"} <= set(facts["flowerbed"])
    packages = facts["packages"]
    for name in ("flowerbed", "flwr", "torch", "numpy", "pennylane", "scikit-learn"):
        assert name in packages
    assert packages["flwr"] == importlib.metadata.version("flwr")
    assert {k: packages[k] for k in checkpoint.versions()} == checkpoint.versions()  # one source
    assert facts["python"]["version"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}")
    machine = facts["machine"]
    for key in ("os", "architecture", "cpu_count", "cuda_available", "gpus", "hostname"):
        assert key in machine
    assert isinstance(machine["cpu_count"], int) and isinstance(machine["gpus"], list)
    json.dumps(facts)  # plain JSON


def test_a_missing_package_or_no_git_is_a_fact_not_an_error(monkeypatch, tmp_path):
    assert env.package_version("no-such-distribution-flowerbed") == env.NOT_INSTALLED

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    source = env.flowerbed_source()
    assert source["git_commit"] == env.UNKNOWN or len(source["git_commit"]) == 40


def test_the_versions_are_read_without_importing_the_packages():
    code = (
        "import sys, flowerbed.runtime.environment as e; e.environment();"
        "print(','.join(m for m in ('pennylane', 'sklearn', 'scipy', 'medmnist', 'datasets')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_run_writes_environment_json_when_it_makes_its_folder(fast_run):
    run_in_process({**fast_run, "num-server-rounds": 1}, 2)
    (run_dir,) = Path(fast_run["output-dir"]).iterdir()
    facts = json.loads((run_dir / env.ENVIRONMENT_FILE).read_text())
    assert facts["packages"]["torch"] == importlib.metadata.version("torch")
    assert facts["machine"]["cpu_count"] >= 1
