"""Real sites on loopback, as separate processes over TLS: a SuperLink, three SuperNodes each
serving its own folder in one of the three site formats (images by class, CSV, npz), and a
ServerApp with no data folder at all (``partitioner='site'``, ``dataset='site'``).

Run 1: two rounds of FedAvg on the three sites. Run 2: a fourth SuperNode joins whose CSV has
no label column; two rounds of SCAFFOLD: the run's log names the node and the file, and the
three good sites train as before. The in-process version of these checks (and of the other
bad site data) is tests/test_site_federation.py.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_deployment import (
    FlwrRun,
    free_port,
    make_certs,
    tls_superlink,
    tls_supernode,
)

from flowerbed.data.site_data import load_site_data

pytestmark = pytest.mark.e2e


def label_table(run_dir: Path) -> np.ndarray:
    with open(run_dir / "partitions.csv") as f:
        return np.array(
            [
                [int(v) for k, v in row.items() if k.startswith("class_")]
                for row in csv.DictReader(f)
            ]
        )


def test_three_sites_own_data_over_tls_fedavg_then_scaffold_with_a_bad_fourth_site(
    federation, tmp_path, fl
):
    folders = fl.write_digit_sites(tmp_path / "sites")
    bad = fl.write_digit_sites(tmp_path / "bad-site")[1]  # a CSV site ...
    train_csv = bad / "train.csv"  # ... whose training file lost its label column
    lines = train_csv.read_text().splitlines()
    train_csv.write_text("\n".join(",".join(line.split(",")[:-1]) for line in lines) + "\n")

    certs = make_certs(tmp_path / "certificates")
    port = free_port()
    federation.start("superlink", tls_superlink(certs, port))
    federation.wait_for_port(port, "superlink")
    connection = federation.connect("sites", f"127.0.0.1:{port}", certs / "ca.crt")

    def supernode(partition: int, folder: Path) -> list[str]:
        node_config = f"partition-id={partition} num-partitions=4 data-dir='{folder}'"
        return tls_supernode(certs, port, node_config)

    for partition, folder in enumerate(folders):
        federation.start(f"site-{partition}", supernode(partition, folder))
    federation.wait_for_nodes(connection, 3)

    no_data = tmp_path / "the-server-has-no-data"  # never created: the server reads nothing
    common = {
        "dataset": "site",
        "partitioner": "site",
        "input-shape": "1,8,8",
        "model": "mlp",
        "num-server-rounds": 2,
        "local-epochs": 2,
        "data-dir": str(no_data),
        "output-dir": str(tmp_path / "runs"),
        "round-timeout": 300.0,
    }
    local = [load_site_data(f, input_shape=(1, 8, 8)) for f in folders]
    expected = np.stack([np.bincount(s.y_train.numpy(), minlength=10) for s in local])

    def check(run: FlwrRun, strategy: str) -> Path:
        assert run.finish(timeout=600) == 0, run.log[-4000:]
        history = run.history()
        assert [row["round"] for row in history] == [0, 1, 2]
        for row in history[1:]:
            assert row["clients_trained"] == 3 and row["clients_failed"] == 0, row
            assert "central_accuracy" not in row
        assert history[2]["federated_accuracy"] > 0.3, history  # ten classes: chance is 0.1
        run_dir = Path(run.log.split("flowerbed: results go to ")[-1].split()[0])
        assert (label_table(run_dir)[:3] == expected).all()
        assert label_table(run_dir)[3].sum() == 0
        assert "label counts per client" in run.log
        state = torch.load(run_dir / "model.pt", weights_only=True)
        matrices = [tuple(v.shape) for v in state.values() if v.ndim == 2]
        assert matrices[0][1] == 64 and matrices[-1][0] == 10, matrices
        assert json.loads((run_dir / "config.json").read_text())["strategy"] == strategy
        return run_dir

    check(FlwrRun(federation, connection, {**common, "min-available-clients": 3}), "fedavg")
    assert not no_data.exists()

    federation.start("site-3", supernode(3, bad))
    federation.wait_for_nodes(connection, 4)
    run = FlwrRun(
        federation, connection, {**common, "strategy": "scaffold", "min-available-clients": 4}
    )
    check(run, "scaffold")
    left_out = [line for line in run.lines if "left out of the run" in line]
    assert len(left_out) == 1, run.log[-4000:]
    assert "partition-id 3" in left_out[0] and str(train_csv) in left_out[0], left_out
    assert "label" in left_out[0]
    assert not no_data.exists()
