"""QKT's pieces against hand-computed values (Eqs. 2-4, Phase 2, Appendix A.5), and the one-shot
protocol of QKT and its baselines through the real ServerApp/ClientApp handlers, in process."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, Context, RecordDict

from flowerbed.client import LocalClient
from flowerbed.config import ConfigError, RunConfig
from flowerbed.data import DatasetSplits
from flowerbed.models import build_model
from flowerbed.simulation import resolve_run_config, run_in_process
from flowerbed.strategies.one_shot import KTSettings, Transfer
from flowerbed.strategies.qkt import (
    class_mask,
    distillation_term,
    filter_teachers,
    head_importance,
    qkt_transfer,
    refine_head,
    teacher_probabilities,
    transfer_loss,
)
from flowerbed.training import predict, train_local

LN2 = math.log(2.0)


@pytest.fixture(autouse=True)
def one_thread():
    """Two busy cores: one torch thread is many times faster than two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- Eqs. (1), (3), (4) on tiny tensors -------------------------------------------------------------


def test_class_mask_is_lambda_on_queries_one_on_local_classes_zero_elsewhere():
    assert class_mask(5, [3], [0, 1], 1.5).tolist() == [1.0, 1.0, 0.0, 1.5, 0.0]
    # a query class the student holds a few samples of gets lambda, not 1
    assert class_mask(4, [2, 3], [0, 2], 2.0).tolist() == [1.0, 0.0, 2.0, 2.0]


def test_masked_distillation_term_by_hand():
    # student p_s = (1/2, 1/4, 1/4); teacher 1 p_t = (1/4, 1/4, 1/2); teacher 2 equals the student.
    student_logits = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    teachers = torch.tensor([[[0.25, 0.25, 0.5]], [[0.5, 0.25, 0.25]]])  # (T=2, B=1, C=3)
    # element-wise KL of teacher 1: p_t log(p_t / p_s) = (-ln2 / 4, 0, ln2 / 2); teacher 2: 0
    assert distillation_term(student_logits, teachers).item() == pytest.approx(LN2 / 4)  # Eq. (1)
    mask = torch.tensor([1.0, 0.0, 1.5])
    assert distillation_term(student_logits, teachers, mask).item() == pytest.approx(
        -LN2 / 4 + 1.5 * LN2 / 2
    )
    only_first = torch.tensor([1.0, 0.0, 0.0])
    assert distillation_term(student_logits, teachers, only_first).item() == pytest.approx(-LN2 / 4)
    # the batch mean: a second sample where the student equals teacher 1 adds 0
    logits2 = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]]))
    teachers2 = torch.tensor([[[0.25, 0.25, 0.5], [0.25, 0.25, 0.5]]])
    assert distillation_term(logits2, teachers2, mask).item() == pytest.approx(
        (-LN2 / 4 + 0.75 * LN2) / 2
    )
    # no teacher kept: no distillation term
    assert distillation_term(student_logits, torch.zeros(0, 1, 3)).item() == 0.0


def test_transfer_loss_is_cross_entropy_plus_alpha_times_the_masked_term():
    torch.manual_seed(0)
    head = torch.nn.Linear(2, 3)
    inputs = torch.randn(4, 2)
    probs = torch.softmax(torch.randn(2, 4, 3), dim=2)
    y = torch.tensor([0, 2, 1, 0])
    mask = torch.tensor([1.0, 1.5, 0.0])
    idx = torch.tensor([3, 1])  # the loss receives sample indices and looks inputs up
    loss = transfer_loss(inputs, probs, 0.7, mask, 1.0)(head, idx, y[idx])
    logits = head(inputs[idx])
    log_ps = F.log_softmax(logits, dim=1)
    by_hand = F.cross_entropy(logits, y[idx]) + 0.7 * sum(
        (mask * probs[t, idx] * (probs[t, idx].log() - log_ps)).sum(dim=1).mean() for t in range(2)
    )
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-6)


# --- teacher filtering (Eq. 2) with tiny trained models ---------------------------------------------


def clusters(classes, per_class=40, dim=6, seed=0):
    """Gaussian blobs, class c centred at 3 * e_c (standardised-looking inputs)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.cat(
        [
            torch.randn(per_class, dim, generator=g) * 0.7 + 3 * F.one_hot(torch.tensor(c), dim)
            for c in classes
        ]
    )
    y = torch.tensor([c for c in classes for _ in range(per_class)])
    return x, y


def trained_mlp(classes, num_classes=4, epochs=30, seed=0):
    torch.manual_seed(seed)
    model = build_model("mlp", (6,), num_classes)
    x, y = clusters(classes, seed=seed)
    train_local(
        model,
        x,
        y,
        epochs=epochs,
        batch_size=16,
        optimizer=torch.optim.Adam(model.parameters(), lr=0.01),
        generator=torch.Generator().manual_seed(seed),
    )
    return model.eval()


def test_filtering_keeps_the_teacher_that_knows_the_query_class_and_drops_the_other():
    knows, never_saw = trained_mlp([0, 1]), trained_mlp([2, 3])
    kept, mean = filter_teachers(
        [never_saw, knows],
        [1],
        (6,),
        num_noise=20,
        tau=0.01,
        generator=torch.Generator().manual_seed(0),
    )
    assert kept == [1]
    assert mean.shape == (2, 4) and mean[1, 1] >= 0.01 > mean[0, 1]
    assert torch.allclose(mean.sum(dim=1), torch.ones(2))
    # a query with a class each knows keeps both; a threshold above every mean keeps none
    both, _ = filter_teachers(
        [never_saw, knows], [1, 3], (6,), 20, 0.01, torch.Generator().manual_seed(0)
    )
    assert both == [0, 1]
    none, _ = filter_teachers(
        [never_saw, knows], [1], (6,), 20, 1.01, torch.Generator().manual_seed(0)
    )
    assert none == []


def test_filtering_puts_teachers_in_eval_mode():
    teacher = trained_mlp([0, 1]).train()
    filter_teachers([teacher], [1], (6,), 20, 0.01, torch.Generator().manual_seed(0))
    assert not teacher.training


# --- Phase 2 and selective weight masking -----------------------------------------------------------


def make_job(student, teachers, query, local_classes, mask_percent=0.0, epochs=2):
    raw = resolve_run_config(
        {
            "batch-size": 16,
            "optimizer": "adam",
            "learning-rate": 0.01,
            "kt-epochs": epochs,
            "qkt-weight-mask-percent": mask_percent,
        }
    )
    config = RunConfig.from_run_config(raw)
    x, y = clusters(local_classes, per_class=20, seed=5)
    data = DatasetSplits("blobs", x, y, x, y, num_classes=4)
    context = Context(
        run_id=0,
        node_id=0,
        node_config={"partition-id": 0, "num-partitions": 3},
        state=RecordDict(),
        run_config=raw,
    )
    client = LocalClient(config, context, 0, 3, data, x, y, x[:0], y[:0])
    return Transfer(
        client=client,
        settings=KTSettings.from_config(config),
        student=student,
        query=query,
        local_classes=local_classes,
        teachers=teachers,
    )


def state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_phase_2_restores_the_old_head_and_leaves_the_feature_extractor_bit_identical():
    student = trained_mlp([2, 3], seed=1)
    teacher = trained_mlp([0, 1])
    job = make_job(student, [teacher], query=[1], local_classes=[2, 3])
    old_head = state(student.head)
    with torch.no_grad():  # stands for Phase 1: the whole model moved
        for p in student.parameters():
            p.add_(0.1 * torch.randn_like(p))
    features_after_phase_1 = state(student.features)
    probs = teacher_probabilities([teacher], job.client.x_train, 4)
    mask = class_mask(4, [1], [2, 3], 1.5)

    refine_head(job, old_head, probs, mask, epochs=0)  # head replacement only
    for k, v in state(student.head).items():
        assert torch.equal(v, old_head[k])
    refine_head(job, old_head, probs, mask, epochs=3)
    for k, v in state(student.features).items():
        assert torch.equal(v, features_after_phase_1[k]), k
    assert not torch.equal(student.head.weight, old_head["weight"])  # the head was refined


def test_selective_weight_masking_freezes_the_top_head_weights():
    teacher = trained_mlp([0, 1])
    refined = {}
    for percent in (0.0, 25.0):
        student = trained_mlp([2, 3], seed=1)
        job = make_job(student, [teacher], query=[1], local_classes=[2, 3], mask_percent=percent)
        old_head = state(student.head)
        features = predict(student.features, job.client.x_train)
        importance = head_importance(student.head, features, job.client.y_train, 16)
        probs = teacher_probabilities([teacher], job.client.x_train, 4)
        refine_head(job, old_head, probs, class_mask(4, [1], [2, 3], 1.5), epochs=3)
        assert set(student.head.state_dict()) == {"weight", "bias"}  # parametrizations removed
        refined[percent] = torch.cat([v.flatten() for v in state(student.head).values()])
    scores = torch.cat([importance[k].flatten() for k in ("weight", "bias")])
    before = torch.cat([v.flatten() for v in old_head.values()])
    top = torch.zeros_like(scores, dtype=torch.bool)
    top[torch.topk(scores, round(0.25 * scores.numel())).indices] = True
    assert torch.equal(refined[25.0][top], before[top])  # the top 25 % stayed frozen
    assert not torch.equal(refined[0.0][top], before[top])  # (they move without the mask)
    assert not torch.equal(refined[25.0][~top], before[~top])  # the others are refined


def test_qkt_learns_the_query_class_from_the_filtered_teacher():
    student = trained_mlp([2, 3], seed=1)
    teachers = [trained_mlp([0, 1]), trained_mlp([0, 3], seed=2)]  # only the first knows class 1
    job = make_job(student, teachers, query=[1], local_classes=[2, 3], epochs=5)
    x_test, y_test = clusters([1, 2, 3], seed=9)
    before = (student(x_test).argmax(1) == y_test).float()
    scores, extra = qkt_transfer(job)
    after = (scores(x_test).argmax(1) == y_test).float()
    assert extra["teachers-kept"] == 1
    assert before[:40].mean() == 0 and after[:40].mean() > 0.5  # query class 1 learnt


# --- the protocol, in process ----------------------------------------------------------------------


@pytest.fixture
def kt_run(tmp_path):
    return {
        "output-dir": str(tmp_path / "runs"),
        "partitioner": "pathological",
        "optimizer": "adam",
        "learning-rate": 0.003,
        "kt-local-max-epochs": 4,
        "kt-local-patience": 2,
        "kt-epochs": 1,
        "kt-light-head-epochs": 1,
        "kt-query-threshold": 10,
    }


def kt_metrics(run_dir):
    return json.loads((run_dir / "kt_metrics.json").read_text())


def test_one_shot_protocol_messages_bytes_and_shared_queries(kt_run):
    results = {
        s: run_in_process({**kt_run, "strategy": s}, num_clients=4)
        for s in ("local", "qkt", "qkt-light", "kd", "ensemble", "fedavg1")
    }
    local, qkt = kt_metrics(results["local"]), kt_metrics(results["qkt"])
    assert local["communication_rounds"] == 0 and qkt["communication_rounds"] == 1
    history = {s: json.loads((d / "history.json").read_text()) for s, d in results.items()}
    for s, rows in history.items():
        assert [r["round"] for r in rows] == [1, 2] and all(
            r["clients_trained"] == 4 for r in rows
        ), s
    model_bytes = ArrayRecord(build_model("cnn", (1, 8, 8), 10).state_dict()).count_bytes()
    small = 4 * 1000  # configs and metrics, per round
    assert (
        4 * model_bytes <= history["qkt"][0]["bytes_received"] < 4 * model_bytes + small
    )  # uploads
    assert history["local"][0]["bytes_received"] < small  # local only uploads nothing
    assert (
        12 * model_bytes <= history["qkt"][1]["bytes_sent"] < 12 * model_bytes + small
    )  # 3 teachers each
    assert (
        4 * model_bytes <= history["fedavg1"][1]["bytes_sent"] < 4 * model_bytes + small
    )  # the average
    for s in results:  # same partitions, local models and queries in every strategy
        rows = kt_metrics(results[s])["clients"]
        assert [r["query"] for r in rows] == [r["query"] for r in local["clients"]], s
        assert [r["pre_per_class"] for r in rows] == [
            r["pre_per_class"] for r in local["clients"]
        ], s
        assert all(len(r["query"]) == 1 for r in rows)
    assert all(r["query_gain"] == 0 and r["forgetting"] == 0 for r in local["clients"])
    assert all(0 <= r["teachers_kept"] <= 3 for r in qkt["clients"])
    assert (results["qkt"] / "kt_metrics.csv").exists() and (
        results["qkt"] / "accuracy.png"
    ).exists()


def test_multi_class_queries_heterogeneous_teachers_and_fedavg_reference(kt_run):
    run = run_in_process(
        {**kt_run, "strategy": "qkt", "kt-query": "multi", "kt-client-models": "cnn,mlp"},
        num_clients=3,
    )
    rows = kt_metrics(run)["clients"]
    assert all(len(r["query"]) >= 2 for r in rows) and kt_metrics(run)["query_mode"] == "multi"
    # a multi-round strategy gets the same metrics; its "pre" is the same local model
    fedavg = run_in_process(
        {
            **kt_run,
            "strategy": "fedavg",
            "kt-metrics": True,
            "kt-query": "multi",
            "kt-client-models": "cnn,mlp",
            "num-server-rounds": 1,
            "local-epochs": 1,
        },
        num_clients=3,
    )
    reference = kt_metrics(fedavg)
    assert reference["communication_rounds"] == 1
    assert [r["query"] for r in reference["clients"]] == [r["query"] for r in rows]
    assert [r["pre_per_class"] for r in reference["clients"]] == [r["pre_per_class"] for r in rows]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"strategy": "qkt", "kt-query": "some"}, "kt-query 'some'; valid choices: single, multi"),
        ({"strategy": "qkt", "qkt-tau": 2.0}, "qkt-tau must be in"),
        ({"strategy": "kd", "kt-client-models": "cnn,lstm"}, "unknown model 'lstm'"),
        ({"strategy": "fedavg1", "kt-client-models": "cnn,mlp"}, "needs one architecture"),
        ({"strategy": "fedavg", "kt-metrics": True, "kt-query": "x"}, "kt-query 'x'; valid choices"),
    ],
)
def test_bad_settings_stop_before_training(kt_run, overrides, message):
    with pytest.raises(ConfigError, match=message):
        run_in_process({**kt_run, **overrides}, num_clients=2)
