"""The catalog: every run-config key declared once and agreeing with pyproject (the
documentation's generated tables are checked in tests/test_docs.py); bad values rejected with
their key and the valid range or choices; every registered protocol runs (two rounds, 4 clients, digits, through the real ServerApp job and ClientApp handlers, in
process).

Strategies that cannot run on the classical default get their settings from the explicit
tables below (never skipped): the quantum ones train the variational quantum classifier; the
one-shot knowledge-transfer ones train locally with early stopping, then transfer once. The
stateful strategies whose client state must survive between rounds inside Ray actors also run
through the real ``flwr run`` (``tests/test_simulation_e2e.py``).
"""

from __future__ import annotations

import json
import math
import tomllib

import pytest

from flowerbed.catalog import PROTOCOLS, SETTINGS, parse_run_config
from flowerbed.inprocess import APP_DIR, default_run_config, resolve_run_config, run_in_process
from flowerbed.settings import ConfigError
from flowerbed.strategies import STRATEGIES


def test_pyproject_defaults_are_the_declared_defaults_in_the_declared_order():
    with open(APP_DIR / "pyproject.toml", "rb") as f:
        defaults = tomllib.load(f)["tool"]["flwr"]["app"]["config"]
    assert list(defaults) == list(SETTINGS), "regenerate with python -m flowerbed.catalog --write"
    assert defaults == default_run_config()  # what a run without pyproject.toml uses
    for key, value in defaults.items():
        assert SETTINGS[key].default == value and type(SETTINGS[key].default) is type(value), key
    config = parse_run_config(defaults)
    assert config.strategy == "fedavg" and config.dataset == "digits"
    assert config.partitioner == "dirichlet"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"strategy": "fedbogus"}, "unknown strategy 'fedbogus'; valid choices: fedavg, fedprox"),
        (
            {"dataset": "imagenet"},
            "unknown dataset 'imagenet'; valid choices: digits, breast-cancer",
        ),
        (
            {"model": "vit"},
            "unknown model 'vit'; valid choices: mlp, cnn, mlp-small, cnn-small, cnn-bn, resnet18",
        ),
        ({"partitioner": "zipf"}, "unknown partitioner 'zipf'; valid choices: iid, dirichlet"),
        ({"optimizer": "lbfgs"}, "unknown optimizer 'lbfgs'; valid choices: sgd, adam"),
        ({"fraction-train": 0.0}, r"fraction-train must be in \(0, 1\], got 0.0"),
        ({"fraction-train": 1.5}, r"fraction-train must be in \(0, 1\], got 1.5"),
        ({"dirichlet-alpha": -0.5}, "dirichlet-alpha must be > 0, got -0.5"),
        ({"num-server-rounds": 0}, "num-server-rounds must be at least 1, got 0"),
        ({"learning-rate": 0.0}, "learning-rate must be > 0"),
        ({"batch-size": "many"}, "batch-size='many' is not a valid int"),
        ({"failing-partitions": "1,x"}, "failing-partitions must be partition ids"),
        (
            {"local-epochs": 3, "local-epochs-max": 2},
            "local-epochs-max must be 0 .off. or at least",
        ),
        ({"kt-client-models": "cnn,lstm"}, "unknown model 'lstm' in kt-client-models"),
        ({"proximal-mu": -1.0}, "proximal-mu must be >= 0"),
        ({"round-timeout": 0.0}, "round-timeout must be > 0"),
    ],
)
def test_bad_values_are_rejected_with_name_and_choices(overrides, message):
    with pytest.raises(ConfigError, match=message):
        parse_run_config(resolve_run_config(overrides))


def test_unknown_keys_are_rejected_like_flwr_run_does():
    message = "unknown run-config key 'learning_rate'; did you mean 'learning-rate'"
    with pytest.raises(KeyError, match=message):
        resolve_run_config({"learning_rate": 0.1})
    with pytest.raises(ConfigError, match=message):
        parse_run_config({"learning_rate": 0.1})


def test_unknown_keys_and_choices_name_the_closest_valid_ones_not_every_one():
    with pytest.raises(ConfigError) as error:
        parse_run_config({"learnin-rate": 0.1, "zzz-qqq": 1})
    message = str(error.value)
    assert message.startswith(
        "unknown run-config keys 'learnin-rate' (did you mean 'learning-rate'"
    )
    assert "'zzz-qqq' (every key is listed by `flowerbed run --help`" in message
    assert "num-server-rounds" not in message and "\n" not in message
    with pytest.raises(ConfigError, match="unknown strategy 'fedavgm2'; did you mean 'fedavgm'"):
        parse_run_config({"strategy": "fedavgm2"})


def test_paths_are_absolute_and_strings_coerce():
    config = parse_run_config(
        {"output-dir": "~/x", "download": "true", "failing-partitions": "1, 3"}
    )
    assert config.output_path.is_absolute() and "~" not in str(config.output_path)
    assert config.download is True


def test_every_protocol_reads_only_declared_keys():
    for name, protocol in PROTOCOLS.items():
        for setting in protocol.settings:
            assert SETTINGS[setting.key] is setting, (name, setting.key)


# --- every registered protocol runs ---------------------------------------------------------

COMMON = {"dataset": "digits", "num-server-rounds": 2, "local-epochs": 1}
# protocols that need non-default settings: name -> run-config overrides
SPECIAL = {
    **{
        name: {"model": "vqc", "vqc-layers": 1, "optimizer": "adam"}
        for name in ("qfedavg", "qfedadam", "qfedfisher")
    },
    # CTL needs binary labels: the paper's first simulation, small
    "ctl": {"dataset": "breast-cancer-shifted", "sim-shifts": 10, "partitioner": "kmeans-pca"},
    # FedSA needs the server's labelled set; every teacher every round (FedAvg+), short
    "fedsa": {
        "server-fraction": 0.4,
        "fedsa-selection": "all",
        "fedsa-labels-per-class": 2,
        "fedsa-weak-epochs": 1,
        "fedsa-adapt-epochs": 1,
        "fedsa-local-epochs": 1,
    },
}
# protocols with one global model besides the strategies: their column is central_accuracy
GLOBAL_MODEL_PROTOCOLS = {"fedsa"}
# one-shot knowledge transfer: short local training and transfer
ONE_SHOT = {
    "kt-local-max-epochs": 1,
    "kt-local-patience": 1,
    "kt-epochs": 1,
    "kt-light-head-epochs": 1,
}


def is_one_shot(name: str) -> bool:
    return name not in STRATEGIES  # a protocol that is not N rounds of one Flower strategy


def overrides_for(name: str, tmp_path) -> dict:
    extra = ONE_SHOT if is_one_shot(name) else {}
    return {
        **COMMON,
        **SPECIAL.get(name, {}),
        **extra,
        "strategy": name,
        "output-dir": str(tmp_path / "runs"),
        "data-dir": str(tmp_path / "data"),
    }


def check_two_rounds(name: str, history: list[dict]) -> None:
    rows = {row["round"]: row for row in history}
    assert {1, 2} <= set(rows)
    for r in (1, 2):
        assert rows[r]["clients_trained"] == 4 and rows[r]["clients_failed"] == 0, rows[r]
    # one-shot methods have no global model: their test-set column is the mean over the
    # clients' own models, from round 1 (local training) on
    own_models = is_one_shot(name) and name not in GLOBAL_MODEL_PROTOCOLS
    column = "client_models_test_accuracy_mean" if own_models else "central_accuracy"
    for r in (1, 2):
        assert math.isfinite(rows[r][column]), rows[r]
        assert 0.0 <= rows[r][column] <= 1.0
    other = "central_accuracy" if own_models else "client_models_test_accuracy_mean"
    assert all(other not in row for row in history), "one column, one meaning"


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_protocol_runs_two_rounds_and_a_rerun_writes_the_same_history(name, tmp_path):
    run_dir = run_in_process(overrides_for(name, tmp_path), num_clients=4)
    check_two_rounds(name, json.loads((run_dir / "history.json").read_text()))
    again = run_in_process(overrides_for(name, tmp_path / "again"), num_clients=4)
    assert (again / "history.json").read_bytes() == (run_dir / "history.json").read_bytes()
