"""The ``device`` key: where models train, and the device path run end to end.

On a machine without a GPU ``auto`` is the CPU, so the run tests compare an explicit
``device='cpu'`` run with the default one bit for bit; on a GPU machine the same tests compare
the CUDA run with the CPU run (same initial weights, same batches; float arithmetic differs).
"""

from __future__ import annotations

import json

import pytest
import torch

from flowerbed.catalog import parse_run_config
from flowerbed.core.device import check_client_gpus, device_of, resolve_device, to_device_of
from flowerbed.core.results import save_model
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.models import build_model
from flowerbed.settings import ConfigError
from flowerbed.simulation import simulate
from flowerbed.training.loops import features_of, predict


def _config(**overrides):
    return parse_run_config(resolve_run_config(overrides))


def test_auto_is_the_cpu_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_cuda_without_a_gpu_is_refused_before_training(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"device='cuda' asks for a GPU but torch sees none"):
        _config(device="cuda")
    with pytest.raises(ValueError, match="device='cuda:0' asks for a GPU"):
        resolve_device("cuda:0")


def test_a_gpu_index_beyond_the_machine_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"device='cuda:3': this machine has 1 CUDA device\(s\)"):
        _config(device="cuda:3")


@pytest.mark.parametrize("value", ["gpu", "cuda:", "cuda:x", "tpu"])
def test_a_value_that_is_no_device_names_the_choices(value):
    with pytest.raises(ConfigError, match="valid choices: auto, cpu, cuda, cuda:<index>"):
        _config(device=value)


def test_models_built_for_a_run_live_on_its_device():
    config = _config()
    model = build_model("cnn", (1, 8, 8), 10, config=config)
    assert device_of(model).type == resolve_device("auto").type
    assert device_of(build_model("cnn", (1, 8, 8), 10)) == torch.device("cpu")  # no config


def test_outputs_and_saved_models_come_back_to_the_host(tmp_path):
    model = build_model("cnn", (1, 8, 8), 10, config=_config())
    x = torch.randn(7, 1, 8, 8)
    assert predict(model, x, batch_size=3).device == torch.device("cpu")
    assert features_of(model, x, batch_size=3).device == torch.device("cpu")
    expected = model(to_device_of(model, x)).cpu()
    torch.testing.assert_close(predict(model, x, batch_size=3), expected)
    save_model(tmp_path / "model.pt", model.state_dict())
    loaded = torch.load(tmp_path / "model.pt", weights_only=True)
    assert {value.device for value in loaded.values()} == {torch.device("cpu")}


def test_an_empty_module_is_on_the_cpu():
    assert device_of(torch.nn.Identity()) == torch.device("cpu")
    assert to_device_of(torch.nn.Identity(), None) is None


def _history(run_dir) -> list[dict]:
    return json.loads((run_dir / "history.json").read_text())


@pytest.mark.parametrize(
    "overrides",
    [
        {"strategy": "fedavg"},
        {"strategy": "scaffold"},
        {"strategy": "moon", "model": "mlp"},
        {"strategy": "fedavg", "distill-objective": "feature", "distill-epochs": 1},
        {"strategy": "qkt", "kt-epochs": 1},
        {
            "strategy": "fedavg",
            "dataset": "breast-cancer",
            "model": "vqc",
            "vqc-layers": 2,
            "num-server-rounds": 1,
        },
    ],
    ids=["fedavg", "scaffold", "moon", "distill", "qkt", "vqc"],
)
def test_the_run_device_gives_the_cpu_run(tmp_path, one_thread, overrides):
    """The whole job on the default device equals the job on the CPU: bit for bit where the
    default is the CPU, within float tolerance on a GPU."""
    base = {"num-server-rounds": 2, "local-epochs": 1, **overrides}
    runs = {}
    for device in ("cpu", "auto"):
        out = tmp_path / device
        runs[device] = _history(
            run_in_process({**base, "device": device, "output-dir": str(out)}, num_clients=4)
        )
    cpu, default = runs["cpu"], runs["auto"]
    assert [sorted(row) for row in cpu] == [sorted(row) for row in default]
    if resolve_device("auto").type == "cpu":
        assert cpu == default
        return
    for row_cpu, row_gpu in zip(cpu, default):
        for key in ("central_accuracy", "accuracy", "kt_acc"):
            if isinstance(row_cpu.get(key), float):
                assert abs(row_cpu[key] - row_gpu[key]) <= 0.05, (key, row_cpu, row_gpu)


def test_more_gpus_per_client_than_the_machine_has_is_refused_before_anything_starts(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_client_gpus(0.25)
    check_client_gpus(1)
    with pytest.raises(ConfigError, match=r"client-resources-num-gpus=2: this machine has 1 GPU"):
        simulate({}, num_gpus_per_client=2, flwr_home=tmp_path / "home")
    assert not (tmp_path / "home").exists()  # refused before any Flower home was made
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"=0.5: this machine has 0 GPU\(s\)"):
        check_client_gpus(0.5)
