"""QKT and QKT Light (``flowerbed.methods.qkt``) against hand-computed values: the class mask
(Eq. 3), Phase 2's head replacement and refinement, the selective weight masking of Appendix
A.5, and a student learning its query class from the filtered teacher."""

import pytest
import torch
from flwr.app import Context, RecordDict

from flowerbed.catalog import parse_run_config
from flowerbed.data import DatasetSplits
from flowerbed.inprocess import resolve_run_config
from flowerbed.kd.objectives import KDParams
from flowerbed.kd.teachers import teacher_probabilities
from flowerbed.methods.qkt import (
    class_mask,
    head_importance,
    qkd_params,
    qkt_transfer,
    refine_head,
)
from flowerbed.protocols.exchange import Transfer
from flowerbed.training.local_client import LocalClient
from flowerbed.training.loops import predict

pytestmark = pytest.mark.usefixtures("one_thread")


# --- Eq. (3) -------------------------------------------------------------


def test_class_mask_is_lambda_on_queries_one_on_local_classes_zero_elsewhere():
    assert class_mask(5, [3], [0, 1], 1.5).tolist() == [1.0, 1.0, 0.0, 1.5, 0.0]
    # a query class the student holds a few samples of gets lambda, not 1
    assert class_mask(4, [2, 3], [0, 2], 2.0).tolist() == [1.0, 0.0, 2.0, 2.0]


def test_qkd_weight_sums_the_kept_teachers_as_eq_4_or_averages_them_on_request():
    mask = class_mask(4, [1], [2, 3], 1.5)
    summed = qkd_params(qkt_config(**{"kt-alpha": 2.0}), mask, kept=[0, 3, 5, 7])
    averaged = qkd_params(
        qkt_config(**{"kt-alpha": 2.0, "qkt-teacher-weight": "mean"}), mask, kept=[0, 3, 5, 7]
    )
    assert (summed.alpha, averaged.alpha) == (2.0, 0.5)
    assert torch.equal(averaged.mask, mask)
    # no teacher kept: the term is empty, alpha is left as it is rather than divided by 0
    none_kept = qkd_params(qkt_config(**{"kt-alpha": 2.0, "qkt-teacher-weight": "mean"}), mask, [])
    assert none_kept.alpha == 2.0


def qkt_config(**overrides):
    return parse_run_config(resolve_run_config({"strategy": "qkt", **overrides}))


# --- teacher filtering (Eq. 2) with tiny trained models ---------------------------------------------


# --- Phase 2 and selective weight masking -----------------------------------------------------------


def make_job(fl, student, teachers, query, local_classes, mask_percent=0.0, epochs=2):
    raw = resolve_run_config(
        {
            "batch-size": 16,
            "optimizer": "adam",
            "learning-rate": 0.01,
            "kt-epochs": epochs,
            "qkt-weight-mask-percent": mask_percent,
        }
    )
    config = parse_run_config(raw)
    x, y = fl.clusters(local_classes, per_class=20, seed=5)
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
        student=student,
        query=query,
        local_classes=local_classes,
        teachers=teachers,
    )


def state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_phase_2_restores_the_old_head_and_leaves_the_feature_extractor_bit_identical(fl):
    student = fl.trained_mlp([2, 3], seed=1)
    teacher = fl.trained_mlp([0, 1])
    job = make_job(fl, student, [teacher], query=[1], local_classes=[2, 3])
    old_head = state(student.head)
    with torch.no_grad():  # stands for Phase 1: the whole model moved
        for p in student.parameters():
            p.add_(0.1 * torch.randn_like(p))
    features_after_phase_1 = state(student.features)
    probs = teacher_probabilities([teacher], job.client.x_train, 4)
    params = KDParams(1.0, 1.0, class_mask(4, [1], [2, 3], 1.5))

    refine_head(job, old_head, probs, params, epochs=0)  # head replacement only
    for k, v in state(student.head).items():
        assert torch.equal(v, old_head[k])
    refine_head(job, old_head, probs, params, epochs=3)
    for k, v in state(student.features).items():
        assert torch.equal(v, features_after_phase_1[k]), k
    assert not torch.equal(student.head.weight, old_head["weight"])  # the head was refined


def test_selective_weight_masking_freezes_the_top_head_weights(fl):
    teacher = fl.trained_mlp([0, 1])
    refined = {}
    for percent in (0.0, 25.0):
        student = fl.trained_mlp([2, 3], seed=1)
        job = make_job(
            fl, student, [teacher], query=[1], local_classes=[2, 3], mask_percent=percent
        )
        old_head = state(student.head)
        features = predict(student.features, job.client.x_train)
        importance = head_importance(student.head, features, job.client.y_train, 16)
        probs = teacher_probabilities([teacher], job.client.x_train, 4)
        params = KDParams(1.0, 1.0, class_mask(4, [1], [2, 3], 1.5))
        refine_head(job, old_head, probs, params, epochs=3)
        assert set(student.head.state_dict()) == {"weight", "bias"}  # parametrizations removed
        refined[percent] = torch.cat([v.flatten() for v in state(student.head).values()])
    scores = torch.cat([importance[k].flatten() for k in ("weight", "bias")])
    before = torch.cat([v.flatten() for v in old_head.values()])
    top = torch.zeros_like(scores, dtype=torch.bool)
    top[torch.topk(scores, round(0.25 * scores.numel())).indices] = True
    assert torch.equal(refined[25.0][top], before[top])  # the top 25 % stayed frozen
    assert not torch.equal(refined[0.0][top], before[top])  # (they move without the mask)
    assert not torch.equal(refined[25.0][~top], before[~top])  # the others are refined


def test_qkt_learns_the_query_class_from_the_filtered_teacher(fl):
    student = fl.trained_mlp([2, 3], seed=1)
    teachers = [
        fl.trained_mlp([0, 1]),
        fl.trained_mlp([0, 3], seed=2),
    ]  # only the first knows class 1
    job = make_job(fl, student, teachers, query=[1], local_classes=[2, 3], epochs=5)
    x_test, y_test = fl.clusters([1, 2, 3], seed=9)
    before = (student(x_test).argmax(1) == y_test).float()
    scores, extra = qkt_transfer(job)
    after = (scores(x_test).argmax(1) == y_test).float()
    assert extra["teachers-kept"] == 1
    assert before[:40].mean() == 0 and after[:40].mean() > 0.5  # query class 1 learnt
