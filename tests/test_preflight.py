"""The up-front estimate of a run's memory and cache disk: the model's activations as its own
meta-device pass gives them, the data sets' real sizes, an oversized run refused in one line
with its numbers (the machine's memory and disk monkeypatched, nothing allocated), a default
run unchanged."""

from __future__ import annotations

import inspect
import math
import re

import pytest

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.data.federation import load_splits
from flowerbed.data.registry import family
from flowerbed.inprocess import InProcessGrid, resolve_run_config, run_in_process
from flowerbed.models import MODELS, vqc
from flowerbed.runtime import needs, preflight
from flowerbed.runtime.needs import GIB, estimate
from flowerbed.runtime.preflight import check_resources
from flowerbed.server_app import run_protocol
from flowerbed.settings import ConfigError
from flowerbed.training.loops import predict


def config(**overrides):
    return parse_run_config(resolve_run_config(overrides))


def test_the_activations_are_the_models_own(monkeypatch):
    """cnn on digits: what it keeps for backward and its peak (``tests/test_footprint.py``),
    times the batch sizes; the larger part is the one counted."""
    monkeypatch.setattr(needs, "trains_on_cpu", lambda config: True)
    found = estimate(config(model="cnn", dataset="digits", **{"batch-size": 2048}))
    (training,) = [need for need in found.memory if need.what.startswith("training")]
    assert training.bytes == int(needs.TRAINING_PEAK * 8970 * 2048 * 4)
    found = estimate(config(model="cnn", dataset="digits", **{"batch-size": 32}))
    (evaluation,) = [need for need in found.memory if need.what.startswith("evaluation")]
    assert evaluation.bytes == (256 + 2 * 32 * 64 * 4) * needs.EVALUATION_BATCH


def test_the_data_sets_sizes_are_the_real_ones():
    for name in ("digits", "breast-cancer"):
        data = load_splits(config(dataset=name))
        size = needs.data_size(config(dataset=name))
        assert (len(data.y_train), len(data.y_test), data.input_shape, data.num_classes) == (
            size.train,
            size.test,
            size.shape,
            size.num_classes,
        )
    size = needs.data_size(config(dataset="ctl-gaussian", **{"sim-nodes": 7}))
    data = load_splits(config(dataset="ctl-gaussian", **{"sim-nodes": 7}))
    assert (size.train, size.test) == (len(data.y_train), len(data.y_test))
    medmnist = pytest.importorskip("medmnist")
    flags = family("medmnist")
    assert flags and set(flags) <= set(medmnist.INFO)
    for flag in flags:
        info = medmnist.INFO[flag]
        size = needs.data_size(config(dataset=flag, **{"image-size": 64}))
        assert (size.train, size.test) == (info["n_samples"]["train"], info["n_samples"]["test"])
        assert size.shape == (info["n_channels"], 64, 64)
        assert size.num_classes == len(info["label"])
    assert needs.EVALUATION_BATCH == inspect.signature(predict).parameters["batch_size"].default


def test_a_default_run_is_estimated_small_and_runs_unchanged(fast_run, monkeypatch, one_thread):
    found = estimate(config(**fast_run), num_clients=10)
    assert found.memory_bytes < 0.6 * GIB and found.disk == ()
    assert [need.what for need in found.memory][:2] == [
        "Python, torch and Flower",
        "the data set (digits)",
    ]
    # a 1 GiB machine still takes it, and the run's results are what they were
    monkeypatch.setattr(preflight, "available_memory", lambda: GIB)
    run_dir = run_in_process({**fast_run, "num-server-rounds": 1}, num_clients=2)
    assert (run_dir / "history.json").is_file()


def test_a_synthetic_set_too_large_for_the_cache_disk_stops_before_the_handshake(
    fast_run, tmp_path, monkeypatch
):
    calls = []

    def spying_app(message, context):
        calls.append(message.metadata.message_type)
        return client_app(message, context)

    monkeypatch.setattr(preflight, "free_disk", lambda folder: GIB)
    overrides = {
        **fast_run,
        "dataset": "synthetic",
        "sim-nodes": 100_000,
        "partitioner": "dataset-nodes",
        "model": "logreg",
        "cache-dir": str(tmp_path / "cache"),
    }
    run_config = resolve_run_config(overrides)
    with pytest.raises(ConfigError) as caught:
        run_protocol(InProcessGrid(spying_app, run_config, 3), parse_run_config(run_config))
    message = str(caught.value)
    # 100,000 clients x E[n_k] = 452.9 samples x 256 bytes = 11.6e9 bytes
    assert "needs about 10.8 GiB of disk in cache-dir=" in message
    assert "more than the 1 GiB free there" in message and "change dataset, sim-nodes" in message
    assert "\n" not in message and calls == [] and not (tmp_path / "cache").exists()


def test_point_clouds_too_large_for_this_machine_are_refused_with_the_keys(monkeypatch):
    monkeypatch.setattr(preflight, "available_memory", lambda: 2 * GIB)
    big = config(dataset="modelnet40", model="logreg", **{"num-points": 10_000})
    # 12,311 clouds x 10,000 points x 3 x 4 bytes = 1.48e9 bytes in every process
    data = next(need for need in estimate(big).memory if need.what.startswith("the data set"))
    assert math.isclose(data.bytes, 12_311 * 10_000 * 3 * 4, rel_tol=0.01)
    with pytest.raises(ConfigError, match=r"needs about [0-9.]+ GiB of memory per process") as err:
        check_resources(big)
    assert "the data set (modelnet40): 1.38 GiB" in str(err.value)
    assert "more than the 2 GiB available" in str(err.value)
    assert "change dataset, num-points" in str(err.value)
    check_resources(config(dataset="modelnet40", model="logreg", **{"num-points": 1024}))


def test_the_clients_parts_are_checked_after_the_handshake(fast_run, monkeypatch):
    sized = {**fast_run, "partitioner": "dirichlet-sized", "samples-per-client": 100_000}
    before = estimate(config(**sized)).memory_bytes
    monkeypatch.setattr(preflight, "available_memory", lambda: before + 1)
    with pytest.raises(ConfigError, match="this run with 40 clients needs .* samples-per-client"):
        run_in_process(sized, num_clients=40)


def test_an_image_cache_already_built_needs_no_disk(tmp_path):
    pathmnist = config(dataset="pathmnist", **{"image-size": 224, "cache-dir": str(tmp_path)})
    (disk,) = estimate(pathmnist).disk
    assert math.isclose(disk.bytes, (89_996 + 7_180) * (3 * 224 * 224 + 8))  # 13.6 GiB
    built = tmp_path / "pathmnist_224-0123456789abcdef"
    built.mkdir()
    (built / "meta.json").write_text("{}")
    assert estimate(pathmnist).disk == ()


def test_a_vqc_too_deep_is_refused_before_anything_is_built(fast_run, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the VQC was built")

    monkeypatch.setitem(MODELS, "vqc", refuse)
    monkeypatch.setattr(vqc, "QuantumCircuit", refuse)
    monkeypatch.setattr(preflight, "available_memory", lambda: 16 * GIB)
    deep = {**fast_run, "model": "vqc", "vqc-layers": 100_000_000}
    with pytest.raises(ConfigError) as caught:
        run_in_process(deep, num_clients=2)
    message = str(caught.value)
    assert "\n" not in message and "more than the 16 GiB available" in message
    # digits: 6 qubits, 17 gates a layer
    assert "a training step of the VQC (100,000,000 layers, 1,700,000,000 gates" in message
    most = re.search(r"change vqc-layers=100000000 \(at most ([0-9,]+) fit\)", message)[1]
    assert message.endswith(f"(at most {most} fit), vqc-qubits, batch-size, model")
    # the most layers that fit: one more does not
    most = int(most.replace(",", ""))
    fits = [estimate(config(**{**deep, "vqc-layers": n}), 2).memory_bytes for n in (most, most + 1)]
    assert fits[0] <= 16 * GIB < fits[1]


def test_the_vqc_parameters_are_the_built_models():
    for overrides, shape, classes in [
        ({"vqc-layers": 7}, (1, 8, 8), 10),
        ({"vqc-layers": 3, "vqc-qubits": 4, "vqc-reduction": "linear"}, (30,), 2),
        ({"vqc-readout": "linear", "vqc-scale-trainable": False}, (16,), 3),
    ]:
        run_config = config(model="vqc", **overrides)
        built = MODELS["vqc"](shape, classes, config=run_config)
        expected = sum(parameter.numel() for parameter in built.parameters())
        assert needs.parameter_count("vqc", shape, classes, run_config) == expected


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # the defaults: digits, 6 qubits, 4 layers
        # the paper's regime as docs/studies-quantum-fl.md scales it, and the paper's own (MNIST)
        {"vqc-layers": 20, "partitioner": "dirichlet-sized", "samples-per-client": 160},
        {"vqc-layers": 60, "dataset": "mnist", "partitioner": "dirichlet-sized"},
    ],
)
def test_the_vqcs_usual_settings_pass_with_room(overrides, monkeypatch):
    monkeypatch.setattr(preflight, "available_memory", lambda: 4 * GIB)
    found = check_resources(config(model="vqc", **{"batch-size": 32, **overrides}), 100)
    assert found.memory_bytes < 2 * GIB
    assert any(need.what.startswith("a training step of the VQC") for need in found.memory)
