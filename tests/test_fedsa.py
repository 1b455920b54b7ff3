"""FedSA end to end in process and its parts: the server's split, the owners' steps (foreign
teachers, the translator that stays home), Eq. 5's average with multiplicities against the
messages themselves, task adaptation's scope, the baselines, and bad settings."""

import json

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.data.federation import load_splits, partition_for, server_split
from flowerbed.data.partition import partition_data
from flowerbed.inprocess import resolve_run_config, run_in_process, use_server_identity
from flowerbed.methods.fedsa import AMALGAMATE, SALIENCY
from flowerbed.methods.fedsa.owner import (
    TRANSLATOR_KEY,
    amalgamate_step,
    private_client,
    teacher_model,
)
from flowerbed.methods.fedsa.target import adapt, target_set
from flowerbed.settings import ConfigError

FAST = {
    "strategy": "fedsa",
    "server-fraction": 0.4,
    "partitioner": "iid",
    "kt-local-max-epochs": 2,
    "fedsa-labels-per-class": 2,
    "fedsa-weak-epochs": 2,
    "fedsa-adapt-epochs": 2,
    "fedsa-local-epochs": 1,
    "fedsa-selection-gap": 10,
    "num-server-rounds": 2,
}


def config_of(overrides: dict):
    return parse_run_config(resolve_run_config({**FAST, **overrides}))


# --- the server's split ------------------------------------------------------------------------


def test_the_server_split_is_stratified_and_in_no_clients_partition():
    config = config_of({"partitioner": "dirichlet"})
    y_pool = load_splits(config).y_train.numpy()
    x, y = server_split(config)
    counts, pool_counts = np.bincount(y.numpy()), np.bincount(y_pool)
    np.testing.assert_allclose(counts / pool_counts, 0.4, atol=0.02)  # every class in proportion
    clients = np.concatenate(partition_for(config, 10))
    assert len(clients) == len(set(clients)) == len(y_pool) - len(y)
    # the server's images are not among the clients' (compared by content)
    client_images = {bytes(row) for row in load_splits(config).x_train[clients].numpy()}
    assert not any(bytes(row) in client_images for row in x.numpy())


def test_no_server_split_leaves_the_partition_as_it_was():
    # not strategy='fedsa', whose own default would put 0.2 in place of the global 0.0
    config = config_of({"strategy": "fedavg", "server-fraction": 0.0, "partitioner": "dirichlet"})
    assert len(server_split(config)[1]) == 0
    direct = partition_data(
        load_splits(config).y_train.numpy(),
        5,
        "dirichlet",
        seed=config.seed,
        alpha=config.dirichlet_alpha,
        min_partition_size=config.min_partition_size,
    ).train
    for ours, theirs in zip(partition_for(config, 5), direct, strict=True):
        assert np.array_equal(ours, theirs)


def test_the_target_set_holds_k_images_per_class_from_the_server_split():
    config = config_of({"fedsa-labels-per-class": 3})
    x, y = target_set(config)
    assert np.bincount(y.numpy()).tolist() == [3] * 10
    server_x = server_split(config)[0].numpy().reshape(len(server_split(config)[0]), -1)
    assert all((server_x == row.reshape(-1)).all(axis=1).any() for row in x.numpy())


# --- the owners ----------------------------------------------------------------------------------


def test_foreign_teachers_see_a_fixed_pixel_permutation_of_their_own_data(fl):
    overrides = {**FAST, "fedsa-foreign-teachers": 1}
    clean = fl.local_client(overrides, partition_id=0, num_partitions=2)
    foreign = fl.local_client(overrides, partition_id=1, num_partitions=2)
    assert private_client(clean) is clean
    permuted = private_client(foreign)
    flat, flat_p = foreign.x_train.flatten(1), permuted.x_train.flatten(1)
    assert not torch.equal(flat, flat_p)
    # one permutation for every image: each permuted pixel column is some original column
    for j in range(flat_p.shape[1]):
        assert (flat == flat_p[:, j : j + 1]).all(dim=0).any(), j
    again = private_client(fl.local_client(overrides, partition_id=1, num_partitions=2))
    assert torch.equal(again.x_train, permuted.x_train)  # seeded
    assert torch.equal(permuted.y_train, foreign.y_train)


def amalgamate_message(client, state_dict, server_round=1):
    use_server_identity()
    content = RecordDict(
        {
            "arrays": ArrayRecord(state_dict),
            "config": ConfigRecord({"server-round": server_round}),
        }
    )
    return Message(content=content, message_type=AMALGAMATE, dst_node_id=1)


def test_the_reply_holds_the_student_only_and_the_translator_stays_home(fl):
    client = fl.local_client(FAST, partition_id=0, num_partitions=4)
    torch.manual_seed(0)
    target = {key: value.cpu() for key, value in client.new_model().state_dict().items()}
    reply = amalgamate_step(client, amalgamate_message(client, target))
    assert set(reply.content.array_records) == {"arrays"}
    assert list(reply.content.array_records["arrays"].keys()) == list(target.keys())
    assert TRANSLATOR_KEY in client.context.state
    first = client.context.state[TRANSLATOR_KEY].to_torch_state_dict()
    # the hint loss does not reach the head: the student's head comes back as it was sent
    student = reply.content.array_records["arrays"].to_torch_state_dict()
    assert torch.equal(student["head.weight"], target["head.weight"])
    assert not torch.equal(student["features.0.weight"], target["features.0.weight"])
    # the next round starts from the kept translator, not a fresh one
    amalgamate_step(client, amalgamate_message(client, target, server_round=2))
    second = client.context.state[TRANSLATOR_KEY].to_torch_state_dict()
    fresh = fl.local_client(FAST, partition_id=0, num_partitions=4)
    amalgamate_step(fresh, amalgamate_message(fresh, target, server_round=2))
    from_fresh = fresh.context.state[TRANSLATOR_KEY].to_torch_state_dict()
    assert not torch.equal(first["linears.0.weight"], second["linears.0.weight"])
    assert not torch.equal(second["linears.0.weight"], from_fresh["linears.0.weight"])


def test_the_teacher_is_kept_in_the_node_state(fl):
    client = fl.local_client(FAST, partition_id=1, num_partitions=4)
    teacher = teacher_model(client)
    again = teacher_model(client)
    for key, value in teacher.state_dict().items():
        assert torch.equal(value, again.state_dict()[key])
    assert "fedsa-teacher" in client.context.state


# --- task adaptation ---------------------------------------------------------------------------


@pytest.mark.parametrize("scope", ["head", "all"])
def test_adaptation_trains_a_new_head_and_the_features_only_with_all(scope, fl):
    config = config_of({})
    client = fl.local_client(FAST, partition_id=0, num_partitions=4)
    torch.manual_seed(0)
    model = client.new_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    adapted = adapt(model, *target_set(config), config, scope, 1)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])  # the target model itself is left alone
    after = adapted.state_dict()
    features_changed = [
        not torch.equal(after[k], before[k]) for k in before if k.startswith("features.")
    ]
    assert not torch.equal(after["head.weight"], before["head.weight"])
    assert all(features_changed) if scope == "all" else not any(features_changed)


# --- the protocol ------------------------------------------------------------------------------


class Recorder:
    """A ClientApp wrapper that keeps every message and reply of FedSA's own types."""

    def __init__(self) -> None:
        self.seen: list[tuple[Message, Message]] = []

    def __call__(self, msg: Message, context):
        reply = client_app(msg, context)
        if msg.metadata.message_type in (SALIENCY, AMALGAMATE):
            self.seen.append((msg, reply))
        return reply


def test_a_fedsa_run_averages_the_students_with_their_multiplicities(tmp_path):
    recorder = Recorder()
    overrides = {
        **FAST,
        "fedsa-num-selected": 4,
        "fedsa-weighting": "positive",
        "seed": 3,
        "output-dir": str(tmp_path),
    }
    run_dir = run_in_process(overrides, num_clients=4, app=recorder)
    log = json.loads((run_dir / "fedsa_selection.json").read_text())
    (selection,) = log["selections"]  # one selection: the gap is longer than the run
    chosen = {int(pid): m for pid, m in selection["selected"].items()}
    assert sum(chosen.values()) == 4 and max(chosen.values()) >= 2  # drawn with replacement
    p = dict(zip(selection["candidates"], selection["probabilities"], strict=True))
    raw = {pid: m * p[pid] for pid, m in chosen.items()}
    weights = {pid: w / sum(raw.values()) for pid, w in raw.items()}
    np.testing.assert_allclose(selection["weights"], list(weights.values()))

    saliency = [(m, r) for m, r in recorder.seen if m.metadata.message_type == SALIENCY]
    amalgamate = [(m, r) for m, r in recorder.seen if m.metadata.message_type == AMALGAMATE]
    assert len(saliency) == 4  # every teacher is asked once
    for msg, _ in saliency:  # the probes' inputs, never their labels
        assert set(msg.content.array_records) == {"probes"}
        assert list(msg.content.array_records["probes"].keys()) == ["inputs"]
    first = [
        (m, r) for m, r in amalgamate if m.content.config_records["config"]["server-round"] == 1
    ]
    second = [m for m, _ in amalgamate if m.content.config_records["config"]["server-round"] == 2]
    assert len(first) == len(second) == len(chosen)  # one message per distinct teacher

    def partition(reply) -> int:
        return int(reply.content.metric_records["metrics"]["partition-id"])

    students = {partition(r): r.content.array_records["arrays"] for _, r in first}
    expected = {
        key: sum(weights[pid] * students[pid][key].numpy().astype(np.float64) for pid in weights)
        for key in students[next(iter(students))]
    }
    sent = second[0].content.array_records["arrays"]  # theta_2, as round 2 sends it
    for key, value in expected.items():
        np.testing.assert_allclose(sent[key].numpy(), value, rtol=1e-5, atol=1e-6)

    history = json.loads((run_dir / "history.json").read_text())
    assert [row["round"] for row in history] == [0, 1, 2]
    assert all(0 <= row["central_accuracy"] <= 1 for row in history)
    assert (run_dir / "model.pt").exists()
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"


def test_fedsa_is_repeatable_with_the_same_seed(tmp_path):
    overrides = {**FAST, "num-server-rounds": 1, "output-dir": str(tmp_path)}
    rows = [
        json.loads((run_in_process(overrides, num_clients=3) / "history.json").read_text())
        for _ in range(2)
    ]
    assert [r["central_accuracy"] for r in rows[0]] == [r["central_accuracy"] for r in rows[1]]
    assert [r["train_loss"] for r in rows[0]] == [r["train_loss"] for r in rows[1]]


def test_scratch_asks_no_teacher_and_fedavg_plus_asks_every_teacher_every_round(tmp_path):
    recorder = Recorder()
    overrides = {**FAST, "fedsa-selection": "scratch", "output-dir": str(tmp_path / "s")}
    run_dir = run_in_process(overrides, num_clients=3, app=recorder)
    assert recorder.seen == []
    history = json.loads((run_dir / "history.json").read_text())
    assert [row["round"] for row in history] == [0] and history[0]["clients_trained"] == 0

    overrides = {**FAST, "fedsa-selection": "all", "output-dir": str(tmp_path / "a")}
    run_dir = run_in_process(overrides, num_clients=3)
    history = json.loads((run_dir / "history.json").read_text())
    assert [row["clients_trained"] for row in history[1:]] == [3, 3]
    log = json.loads((run_dir / "fedsa_selection.json").read_text())
    assert log["selections"][0]["selected"] == {"0": 1, "1": 1, "2": 1}
    np.testing.assert_allclose(log["selections"][0]["weights"], [1 / 3] * 3)


def test_top_k_keeps_the_most_similar_teachers_and_fixed_keeps_its_first_draw(tmp_path):
    overrides = {
        **FAST,
        "fedsa-selection": "top-k",
        "fedsa-num-selected": 2,
        "fedsa-selection-gap": 1,
        "output-dir": str(tmp_path / "t"),
    }
    log = json.loads((run_in_process(overrides, 4) / "fedsa_selection.json").read_text())
    for selection in log["selections"]:
        similarity = np.array(selection["similarity-averaged"])
        top = sorted(int(i) for i in np.argsort(-similarity, kind="stable")[:2])
        assert sorted(int(pid) for pid in selection["selected"]) == top
    overrides.update({"fedsa-selection": "fixed", "output-dir": str(tmp_path / "f")})
    log = json.loads((run_in_process(overrides, 4) / "fedsa_selection.json").read_text())
    assert len(log["selections"]) == 2
    assert log["selections"][0]["selected"] == log["selections"][1]["selected"]


def test_a_failing_or_nonfinite_owner_is_left_out_of_the_average(tmp_path):
    """Partition 1 raises in every training message, or replies NaN: the round averages the
    others (the same model either way) and the run completes."""
    models = []
    for mode in ("raise", "nonfinite"):
        overrides = {
            **FAST,
            "fedsa-selection": "all",
            "failing-partitions": "1",
            "failure-mode": mode,
            "output-dir": str(tmp_path / mode),
        }
        run_dir = run_in_process(overrides, num_clients=4)
        history = json.loads((run_dir / "history.json").read_text())
        assert [(r["clients_trained"], r["clients_failed"]) for r in history[1:]] == [(3, 1)] * 2
        assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"
        models.append(torch.load(run_dir / "model.pt"))
    for key, value in models[0].items():
        assert torch.equal(value, models[1][key]), key


# --- bad settings, before any training ---------------------------------------------------------

BAD = [
    (
        {"fedsa-num-selected": 5},
        r"fedsa-num-selected=5 but there are 4 teachers \(clients\); valid range: 1 to 4",
    ),
    ({"fedsa-foreign-teachers": 5}, "fedsa-foreign-teachers=5 but there are 4 teachers"),
    ({"fedsa-labels-per-class": 100}, "fedsa-labels-per-class=100 but the server split"),
    (
        {"fedsa-saliency": "gradcam", "model": "mlp"},
        "fedsa-saliency='gradcam' needs a convolutional feature map; model.* 'mlp' have none",
    ),
    (
        {"fedsa-saliency": "gradcam", "kt-client-models": "cnn,mlp"},
        "model.* 'mlp' have none",
    ),
]


@pytest.mark.parametrize("overrides, message", BAD)
def test_bad_fedsa_settings_stop_the_run_before_training(overrides, message, tmp_path):
    with pytest.raises(ConfigError, match=message) as caught:
        run_in_process({**FAST, **overrides, "output-dir": str(tmp_path)}, num_clients=4)
    assert "\n" not in str(caught.value)
    assert not list(tmp_path.glob("*/history.json"))


def test_all_ignores_the_number_of_selected_teachers(tmp_path):
    overrides = {**FAST, "fedsa-selection": "all", "fedsa-num-selected": 9, "num-server-rounds": 1}
    run_dir = run_in_process({**overrides, "output-dir": str(tmp_path)}, num_clients=2)
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"


def test_saliency_message_type_is_a_query():
    assert SALIENCY.split(".")[0] == MessageType.QUERY
