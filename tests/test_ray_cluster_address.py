"""Which Ray cluster a simulation joins (``flowerbed.ray_cluster``) and the one-line error when
nothing answers there; no Ray is started (tests/e2e/test_ray_cluster.py runs a real cluster)."""

from __future__ import annotations

import socket
import time

import pytest

from flowerbed import ray_cluster
from flowerbed.ray_cluster import (
    RayCluster,
    check_ray_cluster,
    cluster_to_join,
    host_and_port,
    in_flower_simulation,
)
from flowerbed.settings import ConfigError
from flowerbed.simulation import free_port, simulate


@pytest.fixture
def recorded(tmp_path):
    """An environment whose Ray temp folder records the cluster 10.0.0.5:6379 (``ray start``)."""
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("10.0.0.5:6379\n")
    return {"RAY_TMPDIR": str(tmp_path)}


def test_ray_address_comes_first_then_the_recorded_cluster_then_a_private_instance(
    recorded, tmp_path
):
    assert cluster_to_join({**recorded, "RAY_ADDRESS": "head:6380"}) == RayCluster(
        "head:6380", "RAY_ADDRESS"
    )
    file = str(tmp_path / "ray" / "ray_current_cluster")
    assert cluster_to_join(recorded) == RayCluster("10.0.0.5:6379", file)
    assert cluster_to_join({**recorded, "RAY_ADDRESS": "auto"}) == RayCluster("10.0.0.5:6379", file)
    assert cluster_to_join({**recorded, "RAY_ADDRESS": "local"}) is None
    assert cluster_to_join({"RAY_TMPDIR": str(tmp_path / "none")}) is None
    # without RAY_TMPDIR, TMPDIR is Ray's temp folder
    assert cluster_to_join({"TMPDIR": recorded["RAY_TMPDIR"]}) == RayCluster("10.0.0.5:6379", file)


@pytest.mark.parametrize(
    "address, expected",
    [
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("head.example.org:6380", ("head.example.org", 6380)),
        ("[fd00::5]:6379", ("fd00::5", 6379)),
        ("ray://head:10002", ("head", 10002)),
        ("ray://head", ("head", 10001)),  # Ray Client's default port
    ],
)
def test_host_and_port_of_a_ray_address(address, expected):
    assert host_and_port(RayCluster(address, "RAY_ADDRESS")) == expected


@pytest.mark.parametrize("address", ["10.0.0.5", "head:abc", "head:70000", ":6379", "[fd00::5]"])
def test_a_malformed_ray_address_is_named_with_the_forms_ray_accepts(address):
    with pytest.raises(ConfigError) as error:
        check_ray_cluster({"RAY_ADDRESS": address})
    assert str(error.value) == (
        f"RAY_ADDRESS={address!r} is not a Ray address: expected host:port of the cluster's "
        "head (e.g. 10.0.0.5:6379), ray://host:port (Ray Client) or local"
    )


def test_a_listening_head_passes_and_a_closed_port_fails_in_one_line():
    with socket.create_server(("127.0.0.1", 0)) as server:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        assert check_ray_cluster({"RAY_ADDRESS": address}) == RayCluster(address, "RAY_ADDRESS")
    port = free_port()  # bound and released: nothing listens
    started = time.perf_counter()
    with pytest.raises(ConfigError) as error:
        check_ray_cluster({"RAY_ADDRESS": f"127.0.0.1:{port}"})
    assert time.perf_counter() - started < 1.0  # refused at once, no waiting
    assert str(error.value) == (
        f"RAY_ADDRESS='127.0.0.1:{port}': no Ray cluster answers at 127.0.0.1:{port} "
        "(Connection refused within 5 s); start the cluster (ray start --head on that host), "
        "correct RAY_ADDRESS, or set RAY_ADDRESS=local for a private Ray instance"
    )
    assert "\n" not in str(error.value)


def test_a_head_that_does_not_accept_in_time_and_a_stale_recorded_cluster(
    recorded, tmp_path, monkeypatch
):
    def never_accepts(address, timeout):
        raise TimeoutError("timed out")

    monkeypatch.setattr(ray_cluster.socket, "create_connection", never_accepts)
    with pytest.raises(ConfigError) as error:
        check_ray_cluster(recorded, timeout=0.5)
    file = tmp_path / "ray" / "ray_current_cluster"
    assert str(error.value) == (
        f"the Ray cluster '10.0.0.5:6379' recorded by `ray start` in {file}: no Ray cluster "
        "answers at 10.0.0.5:6379 (timed out within 0.5 s); that cluster is gone: delete the "
        "file, or set RAY_ADDRESS to a running cluster or to local for a private Ray instance"
    )


def test_no_cluster_no_check_and_the_check_belongs_to_the_simulation_process(tmp_path):
    assert check_ray_cluster({"RAY_ADDRESS": "local"}) is None
    assert check_ray_cluster({"RAY_TMPDIR": str(tmp_path)}) is None
    assert not in_flower_simulation()  # pytest; flwr-simulation runs the ServerApp beside Ray


def test_simulate_checks_its_ray_address_before_starting_anything(tmp_path):
    port = free_port()
    home = tmp_path / "flwr-home"
    with pytest.raises(ConfigError, match=f"RAY_ADDRESS='127.0.0.1:{port}': no Ray cluster"):
        simulate({}, num_supernodes=2, flwr_home=home, ray_address=f"127.0.0.1:{port}")
    assert not home.exists()  # no Flower home, no SuperLink
