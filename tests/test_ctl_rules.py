"""CTL's rules (``flowerbed.methods.ctl_rules``) and the reference simulator's gradient, by hand."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from flowerbed.methods.ctl.node import Node
from flowerbed.methods.ctl.reference import CTLParams, NodeData, simulate
from flowerbed.methods.ctl.rules import (
    coefficient_rows,
    guest_weights,
    logistic_importance,
    missing_classes,
    moment_coefficients,
    node_share,
    select_guests,
    task_assignment,
)


def test_tasks_are_the_own_node_first_then_distinct_others_seeded():
    tasks = task_assignment(10, 2, seed=7)
    assert tasks.shape == (10, 3)
    for k, row in enumerate(tasks):
        assert row[0] == k and k not in row[1:] and len(set(row)) == 3
    assert np.array_equal(tasks, task_assignment(10, 2, seed=7))
    assert not np.array_equal(tasks, task_assignment(10, 2, seed=8))
    assert task_assignment(4, 0, seed=1).tolist() == [[0], [1], [2], [3]]


# H[j, i]: node j's coefficient to task i (rows: nodes, columns: tasks)
H = np.array(
    [
        [0.0, 0.6, 0.8, 0.5],
        [0.6, 0.0, 0.7, 0.9],
        [0.8, 0.3, 0.0, 0.4],
        [0.5, 0.9, 0.2, 0.0],
    ]
)


def test_lambda_by_hand():
    # home 0 predicts tasks 0 and 2: lambda_j = H[0,0](1 - H[j,0]) + H[0,2](1 - H[j,2])
    tasks = np.array([0, 2])
    weights = guest_weights(0, [1, 3], H, tasks)
    assert weights[1] == pytest.approx(0.0 + 0.8 * (1 - 0.7))
    assert weights[3] == pytest.approx(0.0 + 0.8 * (1 - 0.2))
    assert weights[0] == weights[2] == 0.0
    assert guest_weights(0, [1], H, tasks, scale=0.5)[1] == pytest.approx(0.5 * 0.8 * 0.3)


def test_best_and_worst_pick_by_the_coefficient_to_each_other_task():
    tasks = np.array([0, 2, 1])  # node 0 also predicts the tasks of nodes 2 and 1
    # best for task 2: lowest H[j, 2] over j != 0 -> node 2 (0.0); for task 1: node 1 (0.0)
    assert select_guests("best", 0, H, tasks, 2, seed=0, server_round=1) == [2, 1]
    # worst for task 2: highest H[j, 2] -> node 1 (0.7); for task 1, node 1 taken: node 3 (0.9)
    assert select_guests("worst", 0, H, tasks, 2, seed=0, server_round=1) == [1, 3]
    # more guests than tasks: round robin over the tasks
    assert select_guests("best", 0, H, tasks, 3, seed=0, server_round=1) == [2, 1, 3]


def test_random_guests_are_fixed_per_node_or_redrawn_every_round():
    h = np.zeros((10, 10))
    tasks = np.array([0, 1, 2])
    fixed = {tuple(select_guests("random", 4, h, tasks, 2, 3, r)) for r in range(1, 30)}
    redrawn = {tuple(select_guests("random-redraw", 4, h, tasks, 2, 3, r)) for r in range(1, 30)}
    assert len(fixed) == 1 and len(redrawn) > 5
    assert all(4 not in guests and len(set(guests)) == 2 for guests in redrawn | fixed)
    assert select_guests("all", 4, h, tasks, 2, 3, 1) == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert select_guests("local", 4, h, tasks, 2, 3, 1) == []


def test_coefficient_rows_weight_features_and_classes_by_hand():
    per_feature = np.zeros((1, 2, 2, 2))  # one home node, two tasks, two classes, two features
    per_feature[0, 1, 0] = [0.2, 0.6]  # class 0 vs task 1
    per_feature[0, 1, 1] = [1.0, 0.0]  # class 1 vs task 1
    rows, clipped = coefficient_rows(
        per_feature,
        np.array([[1.0, 3.0]]),
        np.ones((2, 2)),
        np.array([[0.25, 0.75]]),
        clip=False,
    )
    class0, class1 = 0.25 * 0.2 + 0.75 * 0.6, 0.25 * 1.0
    assert rows[0].tolist() == pytest.approx([0.0, (1 * class0 + 3 * class1) / 4])
    assert clipped == 0
    per_feature[0, 0, :] = -0.1
    rows, clipped = coefficient_rows(
        per_feature, np.array([[1.0, 3.0]]), np.ones((2, 2)), np.array([[0.25, 0.75]]), clip=True
    )
    assert rows[0, 0] == 0.0 and clipped == 1


def test_logistic_importance_probes_the_model_at_zero_and_unit_vectors():
    weight, bias = np.array([1.0, -2.0, 0.0]), 0.3
    mean, std = np.array([0.5, -1.0, 2.0]), np.array([2.0, 1.0, 4.0])

    def model(z):
        return 1 / (1 + np.exp(-(((z - mean) / std) @ weight + bias)))

    q0 = model(np.zeros(3))
    q = np.array([model(np.eye(3)[i]) for i in range(3)])
    expected = np.abs(q - q0) / np.abs(q - q0).sum()
    np.testing.assert_allclose(logistic_importance(weight, bias, mean, std), expected)


def test_node_share_centroids_counts_and_identical_nodes_have_zero_coefficient():
    x = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 4.0], [1.0, 0.0], [3.0, 5.0]])
    y = np.array([0, 0, 1, 1, 1])
    centroids, counts, moments = node_share(x, y)
    np.testing.assert_allclose(centroids, [[1.0, 2.0], [8 / 3, 3.0]])
    assert counts.tolist() == [2.0, 3.0]
    assert moments.shape == (2, 4, 2)
    same = moment_coefficients(moments[None], moments[None])
    assert same.shape == (1, 1, 2, 2) and np.array_equal(same, np.zeros_like(same))


def _two_nodes(rng):
    def node(shift):
        x = rng.normal(shift, 1.0, size=(60, 3))
        y = (x[:, 0] + rng.normal(0, 0.5, 60) > shift).astype(np.float64)
        return NodeData(x[:48], y[:48], x[48:], y[48:])

    return [node(0.0), node(2.0), node(-1.0)]


def test_one_reference_step_is_the_gradient_of_the_objective():
    # one round, one step, node 0 distils from every node: its update must equal
    # -lr * the numerical gradient of (1 - alpha) CE + alpha sum_j lambda_j KL_j
    rng = np.random.default_rng(0)
    nodes = _two_nodes(rng)
    params = CTLParams(rounds=1, steps=1, guests="all", all_scale=False, tasks=1, seed=3)
    out = simulate(nodes, params)
    lam = out["lambdas"][1, 0]
    assert lam[0] == 0 and (lam[1:] > 0).all()

    # rebuild node 0's objective independently: zero model, teachers predict 0.5 at round 0
    x, y = nodes[0].x_train, nodes[0].y_train
    mean, std = x.mean(axis=0), x.std(axis=0)
    shares = [node_share(n.x_train, n.y_train) for n in nodes]
    reps = (np.concatenate([s[0] for s in shares]) - mean) / std
    share = np.concatenate([s[1] for s in shares])
    share = share / share.sum()

    def objective(theta):
        w, b = theta[:-1], theta[-1]
        p = 1 / (1 + np.exp(-(((x - mean) / std) @ w + b)))
        ce = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
        q = 1 / (1 + np.exp(-(reps @ w + b)))
        kl = 0.5 * np.log(0.5 / q) + 0.5 * np.log(0.5 / (1 - q))
        return (1 - params.alpha) * ce + params.alpha * lam.sum() * np.sum(share * kl)

    theta, eps = np.zeros(4), 1e-6
    grad = np.array(
        [(objective(theta + eps * e) - objective(theta - eps * e)) / (2 * eps) for e in np.eye(4)]
    )
    np.testing.assert_allclose(out["weights"][0], -params.learning_rate * grad[:-1], atol=1e-7)
    assert out["biases"][0] == pytest.approx(-params.learning_rate * grad[-1], abs=1e-7)
    assert np.abs(grad).max() > 1e-3


# --- a node lacking a class (rules' "Missing class") -----------------------------------------


def test_a_node_lacking_a_class_shares_count_zero_and_zero_placeholders():
    x = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
    centroids, counts, moments = node_share(x, np.array([0, 0, 0]))
    assert counts.tolist() == [3.0, 0.0]
    np.testing.assert_allclose(centroids, [[2.0, 3.0], [0.0, 0.0]])
    assert moments.shape == (2, 4, 2) and not moments[1].any() and moments[0, 1].all()
    assert missing_classes(np.array([[1.0, 3.0], [2.0, 0.0], [0.0, 4.0]])) == {1: [1], 2: [0]}
    assert missing_classes(np.ones((3, 2))) == {}


# three nodes: A holds both classes (1 and 3 samples), B only class 0 (2), C only class 1 (4)
A, B, C = 0, 1, 2
TOY_COUNTS = np.array([[1.0, 3.0], [2.0, 0.0], [0.0, 4.0]])


def _toy_per_feature() -> np.ndarray:
    """(3 homes, 3 tasks, 2 classes, 1 feature): hand-picked class-wise coefficients, 0 on
    the diagonal, NaN wherever one side lacks the class (they must not be used)."""
    pf = np.full((3, 3, 2, 1), np.nan)
    pf[A, A] = [[0.0], [0.0]]
    pf[A, B, 0], pf[A, C, 1] = 0.3, 0.6
    pf[B, A, 0], pf[B, B, 0] = 0.2, 0.0
    pf[C, A, 1], pf[C, C, 1] = 0.5, 0.0
    return pf


def test_coefficients_compare_only_the_classes_both_sides_hold_by_hand():
    rows, clipped = coefficient_rows(
        _toy_per_feature(), TOY_COUNTS, TOY_COUNTS, np.ones((3, 1)), clip=False
    )
    # H[k, i] = sum_{c in C(k,i)} n_kc H^c / sum_{c in C(k,i)} n_kc; 1 when C(k, i) is empty
    expected = np.array(
        [
            [0.0, 0.3, 0.6],  # A vs B: class 0 only; A vs C: class 1 only
            [0.2, 0.0, 1.0],  # B vs C: no class in common
            [0.5, 1.0, 0.0],  # C vs B: no class in common
        ]
    )
    np.testing.assert_allclose(rows, expected)
    assert clipped == 0
    # with every class everywhere it is the paper's n_k-weighted mean of both classes
    full = np.zeros((1, 2, 2, 1))
    full[0, 1] = [[0.2], [0.4]]
    both, _ = coefficient_rows(
        full, np.array([[1.0, 3.0]]), np.ones((2, 2)), np.ones((1, 1)), False
    )
    assert both[0].tolist() == pytest.approx([0.0, (1 * 0.2 + 3 * 0.4) / 4])


def test_lambda_of_the_toy_skips_what_a_guest_cannot_help_with():
    rows, _ = coefficient_rows(_toy_per_feature(), TOY_COUNTS, TOY_COUNTS, np.ones((3, 1)), False)
    tasks = np.array([A, B, C])  # home A predicts every node's test data
    weights = guest_weights(A, [B, C], rows, tasks)
    # lambda_{B,A} = H[A,A](1 - H[B,A]) + H[A,B](1 - H[B,B]) + H[A,C](1 - H[B,C])
    #             = 0 + 0.3 * 1 + 0.6 * (1 - 1) = 0.3
    # lambda_{C,A} = 0 + H[A,B](1 - H[C,B]) + H[A,C](1 - H[C,C]) = 0.3 * 0 + 0.6 * 1 = 0.6
    assert weights.tolist() == pytest.approx([0.0, 0.3, 0.6])
    # best guest for task B is B itself (H = 0), for task C it is C
    assert select_guests("best", A, rows, tasks, 2, seed=0, server_round=1) == [B, C]


def test_a_missing_representative_carries_no_weight_in_the_distillation_loss():
    # the toy's six representatives (two per node) weigh n_h / n: B's class 1 and C's class 0
    # weigh 0, so what anyone predicts on them changes nothing
    share = TOY_COUNTS.reshape(-1) / TOY_COUNTS.sum()
    assert share.tolist() == pytest.approx([0.1, 0.3, 0.2, 0.0, 0.0, 0.4])
    rng = np.random.default_rng(1)
    x = torch.tensor(rng.normal(size=(6, 2)))
    reps = rng.normal(size=(6, 2))
    guests = np.full((3, 6), 0.7)
    changed = guests.copy()
    changed[:, [3, 4]] = [0.01, 0.99]  # other predictions on the two placeholders

    def descended(predictions):
        client = SimpleNamespace(
            config=SimpleNamespace(ctl_steps=2, ctl_learning_rate=0.5),
            context=SimpleNamespace(state={}),
            x_train=x,
            y_train=torch.tensor([0, 1, 0, 1, 1, 0]),
        )
        node = Node(client)
        node.descend(reps, share, predictions, np.array([0.0, 0.3, 0.6]), 0.85, 0.15)
        return node.weight, node.bias

    (w1, b1), (w2, b2) = descended(guests), descended(changed)
    np.testing.assert_array_equal(w1, w2)
    assert b1 == b2


def test_the_reference_simulator_runs_with_a_node_lacking_a_class():
    rng = np.random.default_rng(2)
    nodes = _two_nodes(rng)
    one_class = NodeData(
        nodes[1].x_train, np.zeros_like(nodes[1].y_train), nodes[1].x_test, nodes[1].y_test
    )
    nodes[1] = one_class
    for energy in ("moments", "exact"):
        params = CTLParams(rounds=3, tasks=2, seed=3, energy=energy, exact_samples=40)
        out = simulate(nodes, params)
        assert np.isfinite(out["accuracy"]).all() and np.isfinite(out["coefficients"]).all()
        assert np.isfinite(out["weights"]).all()
    # by moments every node's own coefficient is exactly 0, node 1's (class 0 alone) too
    moments = simulate(nodes, CTLParams(rounds=3, tasks=2, seed=3))
    assert np.diagonal(moments["coefficients"][-1]).tolist() == [0.0, 0.0, 0.0]
