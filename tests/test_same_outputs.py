"""``scripts/same_outputs.py``, without running a job: its jobs cover every protocol and
distillation objective with keys this checkout declares, its comparison sees a changed value,
and its pinned entropy makes the DP noise's ``np.random.seed()`` reproducible."""

import importlib.util
import sys
from pathlib import Path

import numpy as np

from flowerbed.catalog import PROTOCOLS, SETTINGS

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "same_outputs.py"


def load_script():
    spec = importlib.util.spec_from_file_location("same_outputs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


same_outputs = load_script()


def test_every_protocol_and_objective_has_a_job_with_declared_keys():
    jobs = same_outputs.jobs()
    assert set(PROTOCOLS) <= set(jobs)
    objectives = set(SETTINGS["distill-objective"].choices) - {"none"}
    assert {f"distill-{o}" for o in objectives} <= set(jobs)
    # a renamed key or choice would turn its job into "not available": none is, here
    assert {name: same_outputs.unavailable(job.overrides) for name, job in jobs.items()} == {
        name: [] for name in jobs
    }
    assert set(same_outputs.PROTOCOL_OVERRIDES) <= set(PROTOCOLS)
    assert same_outputs.unavailable({"no-such-key": 1, "dp": "no-such-mode"}) == [
        "no-such-key",
        "dp=no-such-mode",
    ]


def test_a_changed_value_or_tensor_or_status_is_a_difference():
    job = {
        "status": "ok",
        "files": {"history.json": [{"round": 1, "central_accuracy": 0.5}]},
        "models": {"model.pt": {"w": "ab"}},
    }
    assert same_outputs.differences(job, job) == []
    changed = {**job, "files": {"history.json": [{"round": 1, "central_accuracy": 0.6}]}}
    assert same_outputs.differences(job, changed) == [
        "history.json round 1 central_accuracy: 0.5 -> 0.6"
    ]
    other_model = {**job, "models": {"model.pt": {"w": "cd"}}}
    assert same_outputs.differences(job, other_model) == ["model.pt: 1 entries differ (w...)"]
    failed = {"status": "failed", "error": "RunFailed: x"}
    assert same_outputs.differences(job, failed) == ["ok -> failed: RunFailed: x"]
    assert same_outputs.differences(failed, dict(failed)) == []


def test_pinned_entropy_makes_an_unseeded_reseed_reproducible():
    def noise():
        np.random.seed()  # what flowerbed.privacy does before drawing DP noise
        return np.random.normal(size=4)

    with same_outputs.pinned_entropy(True):
        first, second = noise(), noise()
    assert np.array_equal(first, second)
    assert not np.array_equal(noise(), noise())  # put back: the OS's entropy again
