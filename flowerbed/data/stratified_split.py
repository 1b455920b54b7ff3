"""A stratified random train/test split, index for index the one scikit-learn draws.

``stratified_split(labels, test_fraction, seed)`` returns the ``(train, test)`` indices that
``sklearn.model_selection.train_test_split(range(n), test_size=test_fraction, stratify=labels,
random_state=seed)`` returns: its ``StratifiedShuffleSplit`` (one split) and the
``_approximate_mode`` it calls, ported to numpy line by line, drawing from the same legacy
``np.random.RandomState`` in the same order. Written by hand, not called: importing
``sklearn.model_selection`` costs about 2.3 CPU seconds (it imports SciPy), and every Ray actor
of a default run would pay it just to find the held-out test split of ``digits``. NumPy keeps
``RandomState``'s stream fixed across releases, so the split depends on nothing but the labels,
the fraction and the seed; ``tests/test_stratified_split.py`` compares it with scikit-learn's
and pins the held-out splits of ``digits`` and ``breast-cancer`` to fixed digests.
"""

from __future__ import annotations

import math

import numpy as np


def stratified_split(
    labels: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(train, test)`` int64 indices into ``labels``: ``ceil(test_fraction * n)`` samples in
    test, every class in proportion (ties in the rounding broken at random), each side in a
    seeded random order. A ``ValueError`` when ``test_fraction`` is not in (0, 1), a class has
    a single sample, or either side would hold fewer samples than there are classes."""
    labels = np.asarray(labels).reshape(-1)
    n_samples = len(labels)
    if not 0 < test_fraction < 1:
        raise ValueError(f"the test fraction must be in (0, 1), got {test_fraction}")
    n_test = math.ceil(test_fraction * n_samples)
    n_train = n_samples - n_test
    classes, class_of, class_counts = np.unique(labels, return_inverse=True, return_counts=True)
    if class_counts.min() < 2:
        single = classes[class_counts < 2].tolist()
        raise ValueError(f"classes {single} have a single sample; a stratified split needs two")
    for side, size in (("train", n_train), ("test", n_test)):
        if size < len(classes):
            raise ValueError(
                f"a {test_fraction} test share of {n_samples} samples leaves {size} in {side},"
                f" fewer than the {len(classes)} classes"
            )
    members = np.split(np.argsort(class_of, kind="stable"), np.cumsum(class_counts)[:-1])
    rng = np.random.RandomState(seed)
    train_counts = _approximate_mode(class_counts, n_train, rng)
    test_counts = _approximate_mode(class_counts - train_counts, n_test, rng)
    train, test = [], []
    for indices, n_train_class, n_test_class in zip(
        members, train_counts, test_counts, strict=True
    ):
        shuffled = indices[rng.permutation(len(indices))]
        train.append(shuffled[:n_train_class])
        test.append(shuffled[n_train_class : n_train_class + n_test_class])
    train_order = rng.permutation(np.concatenate(train))
    test_order = rng.permutation(np.concatenate(test))
    return train_order.astype(np.int64), test_order.astype(np.int64)


def _approximate_mode(class_counts: np.ndarray, n_draws: int, rng: np.random.RandomState):
    """Samples per class when drawing ``n_draws`` from ``class_counts`` (scikit-learn's
    approximate mode of the multivariate hypergeometric): the floored proportional shares, then
    one more for the classes with the largest remainders, ties drawn at random from ``rng``."""
    continuous = class_counts / class_counts.sum() * n_draws
    floored = np.floor(continuous)
    need_to_add = int(n_draws - floored.sum())
    if need_to_add > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (tied,) = np.where(remainder == value)
            add_now = min(len(tied), need_to_add)
            floored[rng.choice(tied, size=add_now, replace=False)] += 1
            need_to_add -= add_now
            if need_to_add == 0:
                break
    return floored.astype(int)
