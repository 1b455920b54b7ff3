"""CTL's rules, shared by the Flower protocol and the NumPy reference simulator. The protocol is
``ctl.protocol`` and ``ctl.node``, the simulator ``ctl.reference``; the rules: who predicts
which tasks, which guests a node listens to, how much (lambda), and the energy-coefficient row a
node shares.

"Distributed Collaborative Learning with Representative Knowledge Sharing" (Casey et al.,
Mathematics 2025). The paper's extracted text lost its equation numbers; (C1)-(C13) are the
numbering of flowerbed's design notes, in order of appearance in the paper.

* Tasks: node k predicts its own test data and that of ``ctl-tasks`` other nodes, drawn once
  per run (seeded), tau_k = 1 + ctl-tasks sub-distributions Z_i (Sec. 4.1.1).
* Coefficient row (C10-C12): node k compares its class-wise moments with every node i's
  (the task distribution Z_i is represented by node i's training moments, as in the authors'
  code), weights features by its own model's importance (C11), averages the two classes by
  its own class counts: H[k, i] = H-hat_k(i).
* Guest weights (C13): lambda_{j,k} = sum_{i in tasks(k)} H[k, i] (1 - H[j, i]); node k's own
  task contributes nothing (H[k, k] = 0). Unnormalised, as in the code.
* Guest selection (Sec. 4.1.2): ``best``: for each non-local task in turn, the other node with
  the lowest H to it (the paper's rule; it picks the task owners, whose H is 0, which is what
  the authors' code hard-codes); ``worst``: the highest; ``random``: fixed per node for the
  run; ``random-redraw``: drawn afresh every round; ``all``: every other node, lambda scaled
  by num-guests / (K - 1) (the code's 2 / (K - 1): without it All would distil 4.5 times more
  strongly than the two-guest rules); ``local``: no guests.

Missing class (not in the paper, whose simulations discard a draw where a node lacks a class;
real sites often hold no case of some class). Node k with no training sample of class c:

* Representatives (C4-C5, C7): x~_k(c) does not exist. Node k shares n_{k,c} = 0 for it, with
  zeros as a placeholder centroid and zero moments (fixed array shapes). Its weight in (C7) is
  n_h / n = 0, so it drops out of every node's distillation loss:
  L(p_j, p_k) = (1/n) sum_{h: n_h > 0} n_h KL(p_j(h) || p_k(h)). Nodes still predict on the
  placeholder; those predictions enter nothing.
* Energy coefficients (C12): the class-c term compares data of class c at both sides; it is
  left out wherever one side lacks class c, and the home node's class weights are
  renormalised over the classes C(k, i) = {c: n_{k,c} > 0 and n_{i,c} > 0} both hold:
  H[k, i] = sum_{c in C(k, i)} n_{k,c} H^(c)[k, i] / sum_{c in C(k, i)} n_{k,c}, and
  H[k, i] = 1 (the coefficient's maximum) when C(k, i) is empty. In (C13) a guest with no
  class in common with task i then brings nothing for it (1 - H[j, i] = 0) and a home node
  with none counts task i as fully in need of help. H[k, k] stays 0.
* The local loss (C2) and the feature importance (C11) use the node's data and model as they
  are. With every class at every node all of this is the paper's equations unchanged.
"""

from __future__ import annotations

import numpy as np

from ...core.seeding import seed_for
from ...kd.energy import feature_coefficients, feature_importance, feature_moments

GUEST_RULES = ("best", "all", "random", "random-redraw", "worst", "local")
_TASK_TAG, _GUEST_TAG = 0xC71, 0xC72
NUM_CLASSES = 2  # CTL's node model is a binary logistic regression


def task_assignment(num_nodes: int, extra_tasks: int, seed: int) -> np.ndarray:
    """(K, 1 + extra_tasks): row k = [k, the other nodes whose test data node k predicts]."""
    rng = np.random.default_rng(seed_for(seed, _TASK_TAG))
    rows = []
    for k in range(num_nodes):
        others = np.array([j for j in range(num_nodes) if j != k])
        rows.append([k, *rng.choice(others, size=extra_tasks, replace=False).tolist()])
    return np.array(rows, dtype=np.int64).reshape(num_nodes, 1 + extra_tasks)


def select_guests(
    rule: str,
    home: int,
    coefficients: np.ndarray,
    tasks: np.ndarray,
    num_guests: int,
    seed: int,
    server_round: int,
) -> list[int]:
    """The guests of node ``home`` this round (module docstring); ``coefficients`` is the
    (K, K) matrix H[j, i] of the previous round, ``tasks`` the home node's task row."""
    num_nodes = len(coefficients)
    others = [j for j in range(num_nodes) if j != home]
    if rule == "local":
        return []
    if rule == "all":
        return others
    if rule in ("random", "random-redraw"):
        parts = (seed, home) if rule == "random" else (seed, home, server_round)
        rng = np.random.default_rng(seed_for(*parts, _GUEST_TAG))
        return sorted(rng.choice(others, size=num_guests, replace=False).tolist())
    if rule not in ("best", "worst"):
        raise ValueError(f"unknown guest rule {rule!r}; valid choices: {', '.join(GUEST_RULES)}")
    targets = [int(t) for t in tasks[1:]] or [home]  # no non-local task: the own one
    sign = 1.0 if rule == "best" else -1.0
    guests: list[int] = []
    while len(guests) < num_guests:
        task = targets[len(guests) % len(targets)]
        candidates = [j for j in others if j not in guests]
        # lowest (best) or highest (worst) H to the task; ties go to the lower node id
        guests.append(min(candidates, key=lambda j: (sign * coefficients[j, task], j)))
    return guests


def guest_weights(
    home: int,
    guests: list[int],
    coefficients: np.ndarray,
    tasks: np.ndarray,
    scale: float = 1.0,
) -> np.ndarray:
    """(K,) lambda_{j,home} (C13) for the guests, 0 elsewhere, times ``scale``."""
    weights = np.zeros(len(coefficients))
    task_ids = np.asarray(tasks, dtype=np.int64)
    for j in guests:
        weights[j] = scale * float(
            np.sum(coefficients[home, task_ids] * (1.0 - coefficients[j, task_ids]))
        )
    return weights


def moment_coefficients(home_moments: np.ndarray, task_moments: np.ndarray) -> np.ndarray:
    """(m, K, 2, d) per-feature, per-class coefficients (C10) of m home nodes' class-wise
    moments (m, 2, 4, d) against K task distributions' (K, 2, 4, d)."""
    return feature_coefficients(home_moments[:, None], task_moments[None])


def coefficient_rows(
    per_feature: np.ndarray,
    home_counts: np.ndarray,
    task_counts: np.ndarray,
    importance: np.ndarray,
    clip: bool,
) -> tuple[np.ndarray, int]:
    """Rows H[k, :] (C12, class-wise) of m home nodes against K task distributions.

    ``per_feature`` (m, K, 2, d): per-feature coefficients per class (``moment_coefficients``,
    or exact ones from samples); ``home_counts`` (m, 2): the home nodes' class counts;
    ``task_counts`` (K, 2): the task nodes' class counts; ``importance`` (m, d): each home
    node's feature weights (C11). H^(c)[k, i] = sum_f w[k, f] H_f^(c)[k, i], and over the
    classes C(k, i) that both node k and task i hold (the missing-class rule, module
    docstring):

        H[k, i] = sum_{c in C(k, i)} n_{k,c} H^(c)[k, i] / sum_{c in C(k, i)} n_{k,c},
        H[k, i] = 1 when C(k, i) is empty.

    With every class everywhere this is the paper's sum_c n_{k,c} H^(c)[k, i] / n_k. Returns
    the (m, K) rows and how many entries were clipped to [0, 1] (0 unless ``clip``).
    """
    home = np.asarray(home_counts, dtype=np.float64)
    task = np.asarray(task_counts, dtype=np.float64)
    both = (home[:, None, :] > 0) & (task[None, :, :] > 0)  # (m, K, 2): C(k, i)
    weights = np.where(both, home[:, None, :], 0.0)
    total = weights.sum(axis=2)
    with np.errstate(invalid="ignore"):  # a placeholder class's coefficients are not used
        per_class = np.einsum("mkcd,md->mkc", per_feature, importance)
    per_class = np.where(both, per_class, 0.0)
    weighted = np.sum(per_class * weights, axis=2)
    rows = np.where(total > 0, weighted / np.where(total > 0, total, 1.0), 1.0)
    if not clip:
        return rows, 0
    clipped = int(np.sum((rows < 0) | (rows > 1)))
    return np.clip(rows, 0.0, 1.0), clipped


def node_share(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a node shares once (C4-C5 and the moments behind C10): its class centroids (2, d),
    class counts (2,) and class-wise moments (2, 4, d) of its training data. A class the node
    does not hold is shared as count 0 with zeros in its centroid and moments: placeholders
    that keep the arrays' shapes and carry no weight anywhere (module docstring)."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    y = np.asarray(y).reshape(-1)
    parts = [x[y == c] for c in range(NUM_CLASSES)]
    d = x.shape[1]
    centroids = np.stack([p.mean(axis=0) if len(p) else np.zeros(d) for p in parts])
    counts = np.array([len(part) for part in parts], dtype=np.float64)
    moments = np.stack([feature_moments(p) if len(p) else np.zeros((4, d)) for p in parts])
    return centroids, counts, moments


def missing_classes(counts: np.ndarray) -> dict[int, list[int]]:
    """``{node: [classes it holds no training sample of]}`` from (K, 2) class counts."""
    counts = np.asarray(counts).reshape(len(counts), -1)
    return {
        k: [c for c in range(counts.shape[1]) if counts[k, c] == 0]
        for k in range(len(counts))
        if (counts[k] == 0).any()
    }


def logistic_importance(weight: np.ndarray, bias: float, mean: np.ndarray, std: np.ndarray):
    """(C11) for a logistic model on node-standardised inputs, sigmoid(w . (z - m) / s + b):
    predictions at z_0 = 0 and at each unit vector e_i of the data set's feature space."""
    base = bias - float(np.dot(weight, mean / std))
    q0 = 1.0 / (1.0 + np.exp(-base))
    q = 1.0 / (1.0 + np.exp(-(base + weight / std)))
    return feature_importance(q0, q)


def node_scaler(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A node's own standardisation of its training features: mean and std (ddof 0; a
    constant feature gets std 1), as scikit-learn's ``StandardScaler`` in the authors' code."""
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    return mean, np.where(std > 0, std, 1.0)
