import pytest

from flowerbed.config import ConfigError, RunConfig
from flowerbed.simulation import default_run_config, resolve_run_config


def test_pyproject_defaults_parse_and_match_the_dataclass_defaults():
    defaults = default_run_config()
    config = RunConfig.from_run_config(defaults)
    for key, value in defaults.items():
        name = key.replace("-", "_")
        if hasattr(RunConfig, name):
            assert getattr(RunConfig(), name) == value, f"{key}: pyproject and RunConfig disagree"
    assert config.strategy == "fedavg" and config.dataset == "digits" and config.partitioner == "dirichlet"


def test_every_run_config_key_is_documented_in_the_readme():
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    missing = [key for key in default_run_config() if f"`{key}`" not in readme]
    assert not missing, f"run-config keys without a README row: {missing}"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"strategy": "fedbogus"}, "unknown strategy 'fedbogus'; valid choices: fedavg, fedprox"),
        ({"dataset": "imagenet"}, "unknown dataset 'imagenet'; valid choices: digits, breast-cancer"),
        ({"model": "vit"}, "unknown model 'vit'; valid choices: mlp, cnn, resnet18"),
        ({"partitioner": "zipf"}, "unknown partitioner 'zipf'; valid choices: iid, dirichlet"),
        ({"optimizer": "lbfgs"}, "unknown optimizer 'lbfgs'; valid choices: sgd, adam"),
        ({"fraction-train": 0.0}, r"fraction-train must be in \(0, 1\], got 0.0"),
        ({"fraction-train": 1.5}, r"fraction-train must be in \(0, 1\], got 1.5"),
        ({"dirichlet-alpha": -0.5}, "dirichlet-alpha must be > 0, got -0.5"),
        ({"num-server-rounds": 0}, "num-server-rounds must be at least 1, got 0"),
        ({"learning-rate": 0.0}, "learning-rate must be > 0"),
        ({"batch-size": "many"}, "batch-size='many' is not a valid int"),
        ({"failing-partitions": "1,x"}, "failing-partitions must be partition ids"),
    ],
)
def test_bad_values_are_rejected_with_name_and_choices(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_run_config(resolve_run_config(overrides))


def test_unknown_keys_are_rejected_like_flwr_run_does():
    with pytest.raises(KeyError, match="unknown run-config keys \\['learning_rate'\\]"):
        resolve_run_config({"learning_rate": 0.1})


def test_paths_are_absolute_and_strings_coerce():
    config = RunConfig.from_run_config({"output-dir": "~/x", "download": "true", "failing-partitions": "1, 3"})
    assert config.output_path.is_absolute() and "~" not in str(config.output_path)
    assert config.download is True
    assert config.failing_partition_ids == {1, 3}
