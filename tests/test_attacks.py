"""Declared attacks: each rule exactly, on hand-built messages through the client mod; the
honest partitions untouched; the noise seeded; label flip on the attacker's training labels
only; the refusals; and in-process runs whose global model the attack changes."""

import logging

import numpy as np
import pytest
import torch
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)

from flowerbed.catalog import parse_run_config
from flowerbed.core.seeding import seed_for
from flowerbed.data.federation import node_split
from flowerbed.inprocess import resolve_run_config, run_in_process, use_server_identity
from flowerbed.settings import ConfigError
from flowerbed.training.local_client import LocalClient
from flowerbed.trust.attacks import (
    ATTACKS,
    MODEL_POISONING,
    NOISE_TAG,
    attack_update,
    flip_labels,
)

SEED, ROUND, NUM_EXAMPLES = 7, 3, 40
G = {  # the global arrays sent: two float dtypes and an integer buffer
    "w": np.array([[1.0, -2.0], [0.5, 4.0]], dtype=np.float32),
    "b": np.array([0.25, -1.5, 3.0], dtype=np.float64),
    "bn.num_batches_tracked": np.array(5, dtype=np.int64),
}
W = {  # the honest reply's arrays
    "w": np.array([[1.5, -2.5], [0.0, 4.25]], dtype=np.float32),
    "b": np.array([0.75, -1.0, 2.0], dtype=np.float64),
    "bn.num_batches_tracked": np.array(9, dtype=np.int64),
}


def record(arrays: dict) -> ArrayRecord:
    return ArrayRecord({key: Array(np.array(value)) for key, value in arrays.items()})


def train_message(server_round: int = ROUND) -> Message:
    use_server_identity()
    content = RecordDict(
        {"arrays": record(G), "config": ConfigRecord({"server-round": server_round})}
    )
    return Message(content, message_type=MessageType.TRAIN, dst_node_id=1)


def honest_reply(msg: Message, context: Context) -> Message:
    metrics = MetricRecord({"num-examples": NUM_EXAMPLES, "train-loss": 0.5, "partition-id": 0})
    return Message(RecordDict({"arrays": record(W), "metrics": metrics}), reply_to=msg)


def context(partition_id: int, attack: str, attackers: str = "0,2", **keys) -> Context:
    return Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": partition_id, "num-partitions": 4},
        state=RecordDict(),
        run_config={"seed": SEED, "attack": attack, "attackers": attackers, **keys},
    )


def attacked(attack: str, partition_id: int = 0, server_round: int = ROUND, **keys):
    """(arrays, metrics) of the reply that ``partition_id`` sends under ``attack``."""
    reply = attack_update(
        train_message(server_round), context(partition_id, attack, **keys), honest_reply
    )
    arrays = {key: value.numpy() for key, value in reply.content["arrays"].items()}
    return arrays, dict(reply.content["metrics"])


def float64(arrays: dict) -> dict:
    return {key: value.astype(np.float64) for key, value in arrays.items()}


def expect_floats(arrays: dict, expected: dict) -> None:
    """Float entries equal ``expected`` (float64, cast to each entry's dtype); the integer
    entry is the honest one; keys, shapes and dtypes are the honest reply's."""
    assert list(arrays) == list(W)
    for key, honest in W.items():
        assert arrays[key].dtype == honest.dtype and arrays[key].shape == honest.shape
    for key in ("w", "b"):
        np.testing.assert_array_equal(arrays[key], expected[key].astype(W[key].dtype))
    np.testing.assert_array_equal(arrays["bn.num_batches_tracked"], W["bn.num_batches_tracked"])


HONEST_METRICS = {"num-examples": NUM_EXAMPLES, "train-loss": 0.5, "partition-id": 0}


def test_sign_flip_negates_the_update():
    arrays, metrics = attacked("sign-flip")
    g, w = float64(G), float64(W)
    expect_floats(arrays, {k: g[k] - (w[k] - g[k]) for k in ("w", "b")})
    np.testing.assert_array_equal(arrays["w"], [[0.5, -1.5], [1.0, 3.75]])  # by hand
    assert metrics == HONEST_METRICS


def test_scale_multiplies_the_update_by_attack_scale():
    arrays, metrics = attacked("scale", **{"attack-scale": 4.0})
    g, w = float64(G), float64(W)
    expect_floats(arrays, {k: g[k] + 4.0 * (w[k] - g[k]) for k in ("w", "b")})
    np.testing.assert_array_equal(arrays["b"], [2.25, 0.5, -1.0])  # by hand
    assert metrics == HONEST_METRICS


def test_scale_defaults_to_the_boosting_factor_ten():
    arrays, _ = attacked("scale")
    g, w = float64(G), float64(W)
    expect_floats(arrays, {k: g[k] + 10.0 * (w[k] - g[k]) for k in ("w", "b")})


def test_free_rider_sends_back_the_global_model_claiming_its_real_examples():
    arrays, metrics = attacked("free-rider")
    expect_floats(arrays, float64(G))
    assert metrics == HONEST_METRICS


def test_inflate_examples_multiplies_num_examples_and_nothing_else():
    arrays, metrics = attacked("inflate-examples", **{"attack-inflation": 7})
    expect_floats(arrays, float64(W))
    assert metrics == {**HONEST_METRICS, "num-examples": 7 * NUM_EXAMPLES}
    assert isinstance(metrics["num-examples"], int)
    _, metrics = attacked("inflate-examples")  # default factor 10
    assert metrics["num-examples"] == 10 * NUM_EXAMPLES


def test_noise_adds_gaussian_noise_seeded_by_seed_partition_and_round():
    arrays, metrics = attacked("noise", partition_id=2, **{"attack-noise-std": 0.5})
    rng = np.random.default_rng(seed_for(SEED, 2, ROUND, NOISE_TAG))
    w = float64(W)
    expected = {k: w[k] + rng.normal(0.0, 0.5, size=w[k].shape) for k in ("w", "b")}  # in order
    expect_floats(arrays, expected)
    assert metrics == HONEST_METRICS


def test_noise_repeats_exactly_and_differs_across_rounds_and_partitions():
    first, _ = attacked("noise")
    again, _ = attacked("noise")
    other_round, _ = attacked("noise", server_round=ROUND + 1)
    other_partition, _ = attacked("noise", partition_id=2)
    for key in ("w", "b"):
        np.testing.assert_array_equal(first[key], again[key])
        assert not np.array_equal(first[key], other_round[key])
        assert not np.array_equal(first[key], other_partition[key])
    noise = first["b"] - W["b"]  # std 1 by default: noise of that size, not zero
    assert 0 < np.abs(noise).max() < 10


@pytest.mark.parametrize("attack", ATTACKS)
def test_honest_partitions_are_untouched(attack):
    """Partitions 1 and 3 are not attackers: their reply is the honest one, unchanged."""
    for partition_id in (1, 3):
        reply = attack_update(train_message(), context(partition_id, attack), honest_reply)
        assert {k: v.numpy().tolist() for k, v in reply.content["arrays"].items()} == {
            k: v.tolist() for k, v in W.items()
        }
        assert dict(reply.content["metrics"]) == HONEST_METRICS


def test_no_attack_and_label_flip_leave_the_reply_alone():
    for attack in ("none", "label-flip"):
        arrays, metrics = attacked(attack)
        expect_floats(arrays, float64(W))
        assert metrics == HONEST_METRICS


@pytest.mark.parametrize("attack", MODEL_POISONING)
def test_an_error_reply_passes_through_untouched(attack):
    def failing(msg, ctx):
        return Message(Error(code=0, reason="boom"), reply_to=msg)

    reply = attack_update(train_message(), context(0, attack), failing)
    assert reply.has_error() and reply.error.reason == "boom"


# --- label flip (data poisoning) ---------------------------------------------------------------


def test_flip_labels_maps_y_to_c_minus_one_minus_y():
    labels = torch.tensor([0, 1, 2, 9, 4])
    assert flip_labels(labels, 10).tolist() == [9, 8, 7, 0, 5]
    assert labels.tolist() == [0, 1, 2, 9, 4]  # a new tensor
    assert flip_labels(torch.tensor([0, 1, 1]), 2).tolist() == [1, 0, 0]


def test_label_flip_changes_only_the_attackers_training_labels():
    raw = resolve_run_config({"attack": "label-flip", "attackers": "1"})
    config = parse_run_config(raw)
    for partition_id in range(3):
        ctx = Context(
            run_id=1,
            node_id=1,
            node_config={"partition-id": partition_id, "num-partitions": 3},
            state=RecordDict(),
            run_config=raw,
        )
        client = LocalClient.from_context(ctx, config)
        _, y_train, _, y_test = node_split(config, 3, partition_id)
        assert torch.equal(client.y_test, y_test)  # the local test split stays clean
        flipped = 9 - y_train if partition_id == 1 else y_train
        assert torch.equal(client.y_train, flipped)
    assert not torch.equal(9 - y_train, y_train)


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "strategy, attack, message",
    [
        ("fednova", "sign-flip", "strategy='fednova' replies something else .* normalised"),
        ("scaffold", "noise", "strategy='scaffold' replies something else"),
        ("local", "scale", "strategy='local' sends none"),
        ("ctl", "free-rider", "strategy='ctl' sends none"),
        ("fedsa", "inflate-examples", "strategy='fedsa' sends none"),
    ],
)
def test_model_poisoning_needs_fl_rounds_replying_a_model(strategy, attack, message):
    overrides = {"strategy": strategy, "attack": attack, "attackers": "0"}
    with pytest.raises(ConfigError, match=message) as caught:
        parse_run_config(resolve_run_config(overrides))
    text = str(caught.value)
    assert "\n" not in text and f"attack={attack!r}" in text and "valid strategies: fedavg" in text


@pytest.mark.parametrize("strategy", ["fedavg", "fednova", "local", "ctl", "fedsa"])
def test_label_flip_is_allowed_everywhere(strategy):
    overrides = {"strategy": strategy, "attack": "label-flip", "attackers": "0"}
    assert parse_run_config(resolve_run_config(overrides)).attack == "label-flip"


# --- in-process runs ----------------------------------------------------------------------------


def final_model(attack: str, tmp_path) -> dict[str, torch.Tensor]:
    overrides = {
        "strategy": "fedavg",
        "model": "mlp",
        "num-server-rounds": 1,
        "local-epochs": 1,
        "attack": attack,
        "attackers": "0",
        "output-dir": str(tmp_path / attack),
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two busy cores: one thread is many times faster
    try:
        return torch.load(run_in_process(overrides, 4) / "model.pt")
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def clean_model(tmp_path_factory):
    return final_model("none", tmp_path_factory.mktemp("clean"))


@pytest.mark.parametrize("attack", ["sign-flip", "label-flip"])
def test_an_attack_changes_the_global_model_of_a_run(attack, clean_model, tmp_path, caplog):
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(caplog.handler)
    try:
        model = final_model(attack, tmp_path)
    finally:
        flwr_logger.removeHandler(caplog.handler)
    assert model.keys() == clean_model.keys()  # a rerun with the same seed is identical
    # (tests/test_catalog.py), so the difference is the attack's
    assert any(not torch.equal(model[k], clean_model[k]) for k in model)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"attack={attack!r} by partitions [0]" in line for line in warnings), warnings
