"""CTL's rules (``flowerbed.methods.ctl_rules``) and the reference simulator's gradient, by hand."""

import numpy as np
import pytest

from flowerbed.methods.ctl.reference import CTLParams, NodeData, simulate
from flowerbed.methods.ctl.rules import (
    coefficient_rows,
    guest_weights,
    logistic_importance,
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
        per_feature, np.array([[1.0, 3.0]]), np.array([[0.25, 0.75]]), clip=False
    )
    class0, class1 = 0.25 * 0.2 + 0.75 * 0.6, 0.25 * 1.0
    assert rows[0].tolist() == pytest.approx([0.0, (1 * class0 + 3 * class1) / 4])
    assert clipped == 0
    per_feature[0, 0, :] = -0.1
    rows, clipped = coefficient_rows(
        per_feature, np.array([[1.0, 3.0]]), np.array([[0.25, 0.75]]), clip=True
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
