"""Site-owned data and a server without data, in process (``partitioner='site'``,
``dataset='site'``, ``server-data``): three hospitals with one folder each, in the three formats
of ``flowerbed.data.site_data``; bad site data leaves its node out and the others' run goes on.
The same through separate processes and TLS: tests/e2e/test_site_deployment.py."""

from __future__ import annotations

import csv
import json
import math
from logging import INFO
from pathlib import Path

import numpy as np
import pytest
import torch

from flowerbed.data.site_data import load_site_data
from flowerbed.inprocess import run_in_process
from flowerbed.settings import ConfigError

SITE_RUN = {
    "dataset": "site",
    "partitioner": "site",
    "input-shape": "1,8,8",  # the CSV site's 64 pixel columns, as the other sites' images
    "model": "mlp",
    "num-server-rounds": 2,
    "min-available-clients": 3,
}


def run_sites(tmp_path, folders, caplog=None, **overrides) -> Path:
    config = {**SITE_RUN, "output-dir": str(tmp_path / "runs"), **overrides}
    node_configs = [{"data-dir": str(folder)} for folder in folders]
    if caplog is None:
        return run_in_process(config, num_clients=len(folders), node_configs=node_configs)
    with caplog.at_level(INFO, logger="flwr"):
        return run_in_process(config, num_clients=len(folders), node_configs=node_configs)


def history(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "history.json").read_text())


def label_table(run_dir: Path) -> np.ndarray:
    with open(run_dir / "partitions.csv") as f:
        rows = list(csv.DictReader(f))
    return np.array([[int(row[f"class_{c}"]) for c in range(10)] for row in rows])


@pytest.mark.parametrize("strategy", ["fedavg", "scaffold"])
def test_three_sites_in_three_formats_train_with_a_server_that_holds_no_data(
    tmp_path, fl, strategy, caplog
):
    folders = fl.write_digit_sites(tmp_path / "sites")
    run_dir = run_sites(tmp_path, folders, caplog, strategy=strategy)
    rows = history(run_dir)
    assert [row["round"] for row in rows] == [0, 1, 2]
    assert all("central_accuracy" not in row for row in rows)  # the server evaluates nothing
    # each site's own data, read independently, against what the server learnt from reports
    local = [load_site_data(f, input_shape=(1, 8, 8), seed=42) for f in folders]
    expected = np.stack([np.bincount(site.y_train.numpy(), minlength=10) for site in local])
    assert (label_table(run_dir) == expected).all()
    tests = [len(site.y_test) for site in local]
    for row in rows[1:]:
        assert row["clients_trained"] == 3 and row["clients_failed"] == 0, row
        accuracies = [row["client_accuracies"][str(pid)] for pid in range(3)]
        weighted = sum(n * a for n, a in zip(tests, accuracies)) / sum(tests)
        assert row["federated_accuracy"] == pytest.approx(weighted, rel=1e-12)
        assert row["client_accuracy_std"] == pytest.approx(np.std(accuracies), rel=1e-12)
    assert rows[-1]["federated_accuracy"] > 0.3  # ten classes: chance is 0.1
    assert math.isnan(rows[0]["federated_accuracy"] or math.nan)  # round 0: no evaluation yet
    best = json.loads((run_dir / "model_best.json").read_text())
    assert best["selected_on"] == "clients' local test splits"
    assert best["federated_accuracy"] == max(row["federated_accuracy"] for row in rows[1:])
    # the global model: built from the agreed input shape (1 x 8 x 8) and 10 classes
    state = torch.load(run_dir / "model.pt", weights_only=True)
    shapes = [tuple(v.shape) for v in state.values() if v.ndim == 2]
    assert shapes[0][1] == 64 and shapes[-1][0] == 10, shapes
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert "label counts per client" in log and "left out" not in log


def bad_csv(folder: Path) -> str:
    """The CSV site's training file without its label column."""
    path = folder / "train.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(",".join(line.split(",")[:-1]) for line in lines) + "\n")
    return str(path)


def bad_images(folder: Path) -> str:
    """One image of the image site in another size."""
    from PIL import Image

    path = min((folder / "train" / "3").iterdir())
    Image.new("L", (9, 9)).save(path)
    return str(path)


def bad_npz(folder: Path) -> str:
    """The npz site's arrays as an object array (pickled: refused)."""
    path = folder / "data.npz"
    arrays = dict(np.load(path))
    arrays["x_train"] = np.array([row for row in arrays["x_train"]] + [None], dtype=object)[:-1]
    np.savez(path, **arrays)
    return str(path)


def fewer_classes(folder: Path) -> str:
    """The npz site keeps only labels 0-4: 5 classes against the others' 10."""
    path = folder / "data.npz"
    arrays = dict(np.load(path))
    for split in ("train", "test"):
        keep = arrays[f"y_{split}"] < 5
        arrays[f"x_{split}"], arrays[f"y_{split}"] = (
            arrays[f"x_{split}"][keep],
            arrays[f"y_{split}"][keep],
        )
    np.savez(path, **arrays)
    return str(folder)


@pytest.mark.parametrize(
    ("spoil", "site", "reason"),
    [
        (bad_csv, 1, "label"),
        (bad_images, 0, "9"),
        (bad_npz, 2, "object"),
        (
            fewer_classes,
            2,
            "5 classes, but the other 3 node(s) have input shape (1, 8, 8), 10 classes",
        ),
    ],
)
def test_a_site_with_bad_data_is_left_out_by_name_and_the_others_train(
    tmp_path, fl, caplog, spoil, site, reason
):
    folders = fl.write_digit_sites(tmp_path / "sites")
    extra = fl.write_digit_sites(tmp_path / "more")[site]  # a fourth, healthy node
    named = spoil(folders[site])
    # min-available-clients=4: lowered to the 3 nodes that take part, or sampling would wait
    overrides = {"num-server-rounds": 1, "min-available-clients": 4}
    run_dir = run_sites(tmp_path, [*folders, extra], caplog, **overrides)
    (line,) = [r.getMessage() for r in caplog.records if "left out of the run" in r.getMessage()]
    assert f"partition-id {site}" in line and named in line and reason in line, line
    row = history(run_dir)[1]
    assert row["clients_trained"] == 3 and row["clients_failed"] == 0, row
    assert str(site) not in row["client_accuracies"]
    assert label_table(run_dir)[site].sum() == 0  # left out: no samples in the table
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"


def test_two_sites_that_disagree_without_a_majority_stop_the_run_naming_both(tmp_path, fl):
    folders = fl.write_digit_sites(tmp_path / "sites")[1:]  # csv and npz
    fewer_classes(folders[1])
    with pytest.raises(ConfigError, match="no group is a majority") as error:
        run_sites(tmp_path, folders, **{"min-available-clients": 2})
    assert str(folders[0]) in str(error.value) and str(folders[1]) in str(error.value)


def test_a_server_without_data_takes_the_label_table_from_the_nodes(tmp_path):
    """server-data='none' on a partitioned data set: the nodes report their partitions, and
    the table equals the one the server computes from the data set itself."""
    common = {
        "strategy": "fedavg",
        "dataset": "digits",
        "model": "mlp",
        "num-server-rounds": 1,
        "output-dir": str(tmp_path / "runs"),
    }
    with_data = run_in_process({**common, "run-name": "with"}, num_clients=4)
    without = run_in_process(
        {**common, "run-name": "without", "server-data": "none"}, num_clients=4
    )
    assert (label_table(with_data) == label_table(without)).all()
    rows = history(without)
    assert "central_accuracy" not in rows[1] and rows[1]["federated_accuracy"] > 0
    # the same clients trained the same model: their local accuracies agree
    assert rows[1]["client_accuracies"] == history(with_data)[1]["client_accuracies"]


def test_a_server_with_its_own_folder_evaluates_centrally(tmp_path, fl):
    folders = fl.write_digit_sites(tmp_path / "sites")
    own = fl.write_digit_sites(tmp_path / "server")[2]  # an npz folder on the server's machine
    run_dir = run_sites(
        tmp_path, folders, **{"server-data": "own", "data-dir": str(own), "num-server-rounds": 1}
    )
    rows = history(run_dir)
    assert rows[1]["central_accuracy"] > 0 and "federated_accuracy" not in rows[1]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"strategy": "fedsa", "server-fraction": 0.3},
            "strategy='fedsa' needs data on the server (its labelled target set",
        ),
        (
            {"strategy": "fedavg", "distill-objective": "vanilla"},
            "needs data on the server (its distillation proxy",
        ),
        ({"strategy": "fedavg", "fraction-evaluate": 0.0}, "fraction-evaluate=0.0"),
        ({"partitioner": "dirichlet"}, "dataset='site' (each node's own folder) needs"),
        (
            {"dataset": "ctl-gaussian", "input-shape": ""},
            "dataset='ctl-gaussian' is generated from the seed",
        ),
        ({"input-shape": "1,x"}, "input-shape must be positive integers"),
    ],
)
def test_what_a_server_without_data_cannot_run_stops_before_any_node_trains(
    tmp_path, fl, overrides, message
):
    folders = fl.write_digit_sites(tmp_path / "sites")
    trained = []

    def app(msg, context):
        trained.append(msg.metadata.message_type)
        from flowerbed.client_app import app as client_app

        return client_app(msg, context)

    config = {**SITE_RUN, "output-dir": str(tmp_path / "runs"), **overrides}
    with pytest.raises(ConfigError) as error:
        run_in_process(
            config, num_clients=3, app=app, node_configs=[{"data-dir": str(f)} for f in folders]
        )
    assert message in str(error.value)
    assert not [t for t in trained if t.startswith("train")]


def test_every_protocol_runs_on_a_server_without_data_or_says_what_it_needs(tmp_path):
    """server-data='none' for each registered protocol: it finishes with accuracies from the
    clients, or stops before any node trains naming what its server half needs."""
    from flowerbed.catalog import PROTOCOLS

    needs_data = {"ctl", "fedsa"}
    quantum = {"qfedavg", "qfedadam", "qfedfisher"}
    for name in PROTOCOLS:
        config = {
            "strategy": name,
            "dataset": "breast-cancer",
            "model": "vqc" if name in quantum else "mlp",
            "vqc-qubits": 5,
            "vqc-layers": 1,
            "num-server-rounds": 1,
            "local-epochs": 1,
            "kt-local-max-epochs": 2,
            "kt-epochs": 1,
            "server-data": "none",
            "output-dir": str(tmp_path / name),
        }
        if name in needs_data:
            with pytest.raises(ConfigError, match="needs data on the server"):
                run_in_process(config, num_clients=3)
            continue
        rows = history(run_in_process(config, num_clients=3))
        assert "central_accuracy" not in rows[-1], name
        accuracy = rows[-1].get(
            "federated_accuracy", rows[-1].get("client_models_test_accuracy_mean")
        )
        assert accuracy is not None and 0 <= accuracy <= 1, (name, rows[-1])
