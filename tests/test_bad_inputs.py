"""Bad input, as a new user would type it: every value is refused before any training, in one
line that names the key, the bad value and what is valid. Most are refused when the run config
is parsed (before data is loaded); the rest when the data or the federation is known, still
before the first round."""

import math
from pathlib import Path

import numpy as np
import pytest

from flowerbed.catalog import parse_run_config
from flowerbed.data.datasets import load_dataset
from flowerbed.data.splits import DataFileError
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.settings import ConfigError

INF, NAN = math.inf, math.nan

# (key, bad value, what the one-line message must say)
AT_PARSE = [
    ("strategy", "fedbest", "unknown strategy 'fedbest'; valid choices: fedavg"),
    ("dataset", "svhn", "unknown dataset 'svhn'; valid choices: digits"),
    ("model", "vit", "unknown model 'vit'; valid choices: mlp, cnn"),
    ("partitioner", "zipf", "unknown partitioner 'zipf'; valid choices: iid"),
    ("optimizer", "rmsprop", "unknown optimizer 'rmsprop'; valid choices: sgd, adam"),
    ("image-size", 32, "image-size must be one of 28, 64, 128, 224, got 32"),
    ("dirichlet-alpha", 0.0, "dirichlet-alpha must be > 0, got 0.0"),
    ("dirichlet-alpha", NAN, "dirichlet-alpha must be a finite number > 0, got nan"),
    ("min-partition-size", -1, "min-partition-size must be at least 0, got -1"),
    ("classes-per-client", 0, "classes-per-client must be at least 1, got 0"),
    ("local-test-fraction", 1.0, r"local-test-fraction must be in \[0, 1\), got 1.0"),
    ("num-server-rounds", 0, "num-server-rounds must be at least 1, got 0"),
    ("fraction-train", 0.0, r"fraction-train must be in \(0, 1\], got 0.0"),
    ("fraction-evaluate", -0.1, r"fraction-evaluate must be in \[0, 1\], got -0.1"),
    ("min-available-clients", 0, "min-available-clients must be at least 1, got 0"),
    ("seed", -5, "seed must be at least 0, got -5"),
    ("round-timeout", 0.0, "round-timeout must be > 0, got 0.0"),
    ("wait-timeout", -1.0, "wait-timeout must be > 0, got -1.0"),
    ("max-failed-rounds", -1, "max-failed-rounds must be at least 0, got -1"),
    ("local-epochs", 0, "local-epochs must be at least 1, got 0"),
    ("local-epochs-max", -2, "local-epochs-max must be at least 0, got -2"),
    ("batch-size", 0, "batch-size must be at least 1, got 0"),
    ("batch-size", "many", "run-config batch-size='many' is not a valid int"),
    ("learning-rate", -0.1, "learning-rate must be > 0, got -0.1"),
    ("learning-rate", INF, "learning-rate must be a finite number > 0, got inf"),
    ("momentum", 1.0, r"momentum must be in \[0, 1\), got 1.0"),
    ("momentum", -0.5, r"momentum must be in \[0, 1\), got -0.5"),
    ("weight-decay", -1.0, "weight-decay must be >= 0, got -1.0"),
    ("weight-decay", NAN, "weight-decay must be a finite number >= 0, got nan"),
    ("failing-partitions", "1,x", "failing-partitions must be partition ids separated by commas"),
    ("failure-mode", "crash", "unknown failure-mode 'crash'; valid choices: raise, nonfinite"),
    ("attack", "backdoor", "unknown attack 'backdoor'; valid choices: none, sign-flip, scale"),
    ("attack", "sign-flip", "attack='sign-flip' needs attackers: .*attackers is empty"),
    ("attackers", "0;3", "attackers must be partition ids separated by commas, got '0;3'"),
    ("attack-scale", NAN, "attack-scale must be a finite number, got nan"),
    ("attack-noise-std", 0.0, "attack-noise-std must be > 0, got 0.0"),
    ("attack-inflation", 1, "attack-inflation must be > 1, got 1"),
    ("dp", "gaussian", "unknown dp 'gaussian'; valid choices: none, central-server-fixed"),
    ("dp-noise-multiplier", -1.0, "dp-noise-multiplier must be >= 0, got -1.0"),
    ("dp-clipping-norm", 0.0, "dp-clipping-norm must be > 0, got 0.0"),
    ("dp-clipped-quantile", 1.5, r"dp-clipped-quantile must be in \[0, 1\], got 1.5"),
    ("dp-delta", 1.0, r"dp-delta must be in \(0, 1\), got 1.0"),
    ("dp-delta", 0.0, r"dp-delta must be in \(0, 1\), got 0.0"),
    ("dp-epsilon-budget", -1.0, "dp-epsilon-budget must be >= 0, got -1.0"),
    ("proximal-mu", -1.0, "proximal-mu must be >= 0, got -1.0"),
    ("proximal-mu", NAN, "proximal-mu must be a finite number >= 0, got nan"),
    ("server-learning-rate", 0.0, "server-learning-rate must be > 0, got 0.0"),
    ("server-momentum", -1.0, r"server-momentum must be in \[0, 1\), got -1.0"),
    ("adaptive-eta", -1.0, "adaptive-eta must be > 0, got -1.0"),
    ("adaptive-beta-1", 1.0, r"adaptive-beta-1 must be in \[0, 1\), got 1.0"),
    ("adaptive-beta-2", -0.1, r"adaptive-beta-2 must be in \[0, 1\), got -0.1"),
    ("adaptive-tau", 0.0, "adaptive-tau must be > 0, got 0.0"),
    ("fednova-proximal-mu", -0.1, "fednova-proximal-mu must be >= 0, got -0.1"),
    ("scaffold-server-learning-rate", 0.0, "scaffold-server-learning-rate must be > 0"),
    ("feddyn-alpha", 0.0, "feddyn-alpha must be > 0, got 0.0"),
    ("moon-mu", -1.0, "moon-mu must be >= 0, got -1.0"),
    ("moon-temperature", 0.0, "moon-temperature must be > 0, got 0.0"),
    ("moon-projection-dim", 0, "moon-projection-dim must be at least 1, got 0"),
    ("ditto-lambda", -0.1, "ditto-lambda must be >= 0, got -0.1"),
    ("vqc-qubits", -1, "vqc-qubits must be at least 0, got -1"),
    ("vqc-qubits", 40, "vqc-qubits=40 needs .* GiB .* use at most [0-9]+ qubits"),
    ("vqc-layers", 0, "vqc-layers must be at least 1, got 0"),
    ("vqc-readout", "softmax", "unknown vqc-readout 'softmax'; valid choices: auto"),
    ("vqc-device", "qiskit.aer", "unknown vqc-device 'qiskit.aer'; valid choices"),
    ("vqc-scale", INF, "vqc-scale must be a finite number, got inf"),
    ("vqc-reduction", "pca", "unknown vqc-reduction 'pca'; valid choices: none, linear"),
    ("qfedfisher-delta", 0.0, "qfedfisher-delta must be > 0, got 0.0"),
    ("qfedfisher-normalization", "global", "unknown qfedfisher-normalization 'global'"),
    ("qfedfisher-fisher-pass", "never", "unknown qfedfisher-fisher-pass 'never'"),
    ("kt-query", "some", "unknown kt-query 'some'; valid choices: single, multi"),
    ("kt-query-threshold", 0, "kt-query-threshold must be at least 1, got 0"),
    ("kt-max-query-classes", 1, "kt-max-query-classes must be at least 2, got 1"),
    ("kt-local-max-epochs", 0, "kt-local-max-epochs must be at least 1, got 0"),
    ("kt-local-patience", 0, "kt-local-patience must be at least 1, got 0"),
    ("kt-client-models", "cnn,lstm", "unknown model 'lstm' in kt-client-models; valid choices"),
    ("kt-epochs", -1, "kt-epochs must be at least 0, got -1"),
    ("kt-alpha", -1.0, "kt-alpha must be >= 0, got -1.0"),
    ("kt-temperature", 0.0, "kt-temperature must be > 0, got 0.0"),
    ("qkt-lambda", -1.0, "qkt-lambda must be >= 0, got -1.0"),
    ("qkt-tau", 2.0, r"qkt-tau must be in \[0, 1\], got 2.0"),
    ("qkt-noise-samples", 0, "qkt-noise-samples must be at least 1, got 0"),
    ("qkt-weight-mask-percent", 100.0, r"qkt-weight-mask-percent must be in \[0, 100\), got 100.0"),
    ("kt-metrics", "maybe", "run-config kt-metrics='maybe' is not a valid bool"),
    ("ctl-alpha", 1.5, r"ctl-alpha must be in \[0, 1\], got 1.5"),
    ("ctl-alpha", -0.1, r"ctl-alpha must be in \[0, 1\], got -0.1"),
    ("ctl-guests", "nearest", "unknown ctl-guests 'nearest'; valid choices: best, all, random"),
    ("ctl-num-guests", 0, "ctl-num-guests must be at least 1, got 0"),
    ("ctl-tasks", -1, "ctl-tasks must be at least 0, got -1"),
    ("ctl-steps", 0, "ctl-steps must be at least 1, got 0"),
    ("ctl-learning-rate", 0.0, "ctl-learning-rate must be > 0, got 0.0"),
    ("ctl-local-ce", "half", "unknown ctl-local-ce 'half'; valid choices: full, scaled"),
    ("server-fraction", 1.0, r"server-fraction must be in \[0, 1\), got 1.0"),
    ("fedsa-selection", "best", "unknown fedsa-selection 'best'; valid choices: saliency, random"),
    ("fedsa-num-selected", 0, "fedsa-num-selected must be at least 1, got 0"),
    ("fedsa-temperature", 0.0, "fedsa-temperature must be > 0, got 0.0"),
    ("fedsa-saliency", "lime", "unknown fedsa-saliency 'lime'; valid choices: input-grad, gradcam"),
    ("fedsa-labels-per-class", 0, "fedsa-labels-per-class must be at least 1, got 0"),
    ("fedsa-foreign-teachers", -1, "fedsa-foreign-teachers must be at least 0, got -1"),
    ("sim-shifts", 0, "sim-shifts must be"),
    ("sim-spread", -1.0, "sim-spread must be >= 0, got -1.0"),
    ("partitioner", "dataset-nodes", "partitioner='dataset-nodes' needs a data set with its own"),
    ("samples-per-client", 10**12, r"samples-per-client must be in \[1, 1000000\], got 10{12}"),
    ("run-name", "x/../../../escaped", r"run-name='x/../../../escaped' holds a path separator"),
    ("run-name", "a\\b", r"run-name='a\\\\b' holds a path separator; valid: one folder name"),
    ("run-name", "..", r"run-name='..' is a relative folder reference"),
    ("run-name", "a\x00b", r"run-name='a\\x00b' holds a control character"),
    ("run-name", "x" * 300, r"run-name='x{300}' is 300 bytes long; valid: .* at most 235 bytes"),
]


@pytest.mark.parametrize("key, value, message", AT_PARSE, ids=[f"{k}={v}" for k, v, _ in AT_PARSE])
def test_refused_when_the_run_config_is_parsed(key, value, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse_run_config(resolve_run_config({key: value}))
    assert "\n" not in str(caught.value) and key in str(caught.value)


def test_the_suite_covers_every_key_a_user_can_get_wrong():
    assert len(AT_PARSE) >= 40
    assert len({key for key, _, _ in AT_PARSE}) >= 60


# refused once the data or the federation is known, before the first round
AT_START = [
    ({"failing-partitions": "0,99"}, r"failing-partitions='0,99' names partitions \[99\]"),
    (
        {"attack": "noise", "attackers": "1,2,5"},
        r"attackers='1,2,5' names partitions \[2, 5\] that do not exist; valid ids: 0 to 1",
    ),
    (  # a model that cannot take the data (model=cnn there is the data set's mlp instead)
        {"model": "resnet18", "dataset": "breast-cancer"},
        "model='resnet18' cannot take dataset='breast-cancer': model 'resnet18' needs images",
    ),
    (
        {"partitioner": "pathological", "classes-per-client": 11},
        "partitioner='pathological': classes-per-client must be between 1 and 10",
    ),
    (
        {"min-partition-size": 1000},
        "partitioner='dirichlet': min-partition-size=1000 is impossible",
    ),
    (
        {"output-dir": "/proc/no-runs-here"},
        "output-dir='/proc/no-runs-here': cannot make a run folder",
    ),
    ({"strategy": "fedavg1", "kt-client-models": "cnn,mlp"}, "needs one architecture"),
    (
        {"strategy": "scaffold", "optimizer": "adam"},
        "strategy 'scaffold' normalises SGD steps and needs optimizer='sgd'",
    ),
    ({"strategy": "qfedavg", "model": "mlp"}, "set model='vqc'"),
    (
        {"strategy": "ctl", "dataset": "synthetic-iid", "sim-nodes": 2},
        "strategy='ctl' needs binary labels .* dataset='synthetic-iid' has 10 classes",
    ),
    (
        {"strategy": "ctl", "dataset": "breast-cancer", "ctl-tasks": 1, "ctl-num-guests": 2},
        r"ctl-num-guests=2 but each node has 1 other node\(s\) in a federation of 2",
    ),
    ({"strategy": "fedsa", "fedsa-labels-per-class": 500}, "fedsa-labels-per-class=500 but"),
    ({"dp": "local", "strategy": "ctl"}, "strategy='ctl' is not made of FL rounds"),
    ({"dp": "local", "strategy": "scaffold"}, "strategy='scaffold' replies something else"),
    (
        {"dp": "central-server-fixed", "strategy": "fedmedian"},
        "strategy='fedmedian' aggregates with FedMedian.aggregate_train, not FedAvg's mean",
    ),
    ({"dp": "local", "dp-noise-multiplier": 0.0}, "without noise there is no privacy"),
    ({"dp": "local", "model": "cnn-bn"}, "model='cnn-bn' has integer entries"),
    (
        {"dp": "central-server-adaptive"},
        r"dp-noise-multiplier=1 .* \(dp-clipped-count-stddev, here 0.1 = n/20 for n = 2\)",
    ),
    (
        {"dp": "central-server-fixed", "dp-epsilon-budget": 1.0},
        "dp-epsilon-budget=1 is spent by the first round already",
    ),
]


@pytest.mark.parametrize("overrides, message", AT_START)
def test_refused_before_the_first_round(overrides, message, fast_run):
    with pytest.raises(ConfigError, match=message) as caught:
        run_in_process({**fast_run, **overrides}, num_clients=2)
    assert "\n" not in str(caught.value)
    assert not list(Path(fast_run["output-dir"]).glob("*/history.json"))  # no round ran


def test_a_garbage_medmnist_file_is_named(tmp_path):
    (tmp_path / "bloodmnist.npz").write_bytes(np.random.default_rng(0).bytes(200))
    with pytest.raises(
        DataFileError, match=f"{tmp_path / 'bloodmnist.npz'} is not a readable MedMNIST file"
    ):
        load_dataset("bloodmnist", tmp_path)
