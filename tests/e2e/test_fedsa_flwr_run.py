"""FedSA end to end through `flwr run .` (Flower's Ray backend): teachers and translators live
in the Ray actors' context state, probes go out and saliency maps and students come back, and
the run repeats the in-process run of the same config."""

import json

import pytest

from flowerbed.core.processes import local_superlink_pids
from flowerbed.inprocess import run_in_process
from flowerbed.simulation import simulate as flwr_run

pytestmark = pytest.mark.e2e


def test_fedsa_with_flwr_run(tmp_path, one_thread):
    overrides = {
        "strategy": "fedsa",
        "server-fraction": 0.4,
        "partitioner": "iid",
        "fedsa-foreign-teachers": 1,
        "fedsa-num-selected": 2,
        "fedsa-selection-gap": 1,
        "fedsa-labels-per-class": 2,
        "fedsa-weak-epochs": 2,
        "fedsa-adapt-epochs": 3,
        "fedsa-local-epochs": 1,
        "kt-local-max-epochs": 3,
        "num-server-rounds": 2,
        "output-dir": str(tmp_path / "runs"),
    }
    home = tmp_path / "flwr-home"
    result = flwr_run(overrides, num_supernodes=4, flwr_home=home)
    assert result.returncode == 0, result.log[-3000:]
    assert local_superlink_pids(home) == [], "the local SuperLink was not stopped"
    assert "FedSA (saliency) adapted target model" in result.log
    history = result.history
    assert [row["round"] for row in history] == [0, 1, 2]
    log = json.loads((result.run_dir / "fedsa_selection.json").read_text())
    assert [s["round"] for s in log["selections"]] == [1, 2]
    assert [t["foreign"] for t in log["teachers"]] == [False, False, False, True]

    # the same computation in this process, with one math thread as Ray gives each actor
    in_process = run_in_process({**overrides, "output-dir": str(tmp_path / "same")}, 4)
    same_log = json.loads((in_process / "fedsa_selection.json").read_text())
    assert [s["selected"] for s in same_log["selections"]] == [
        s["selected"] for s in log["selections"]
    ]
    same = json.loads((in_process / "history.json").read_text())
    assert [r["central_accuracy"] for r in same] == pytest.approx(
        [r["central_accuracy"] for r in history], abs=0.01
    )
