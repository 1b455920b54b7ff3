"""flowerbed's stratified split is scikit-learn's ``train_test_split(..., stratify=y)``, index for
index, and the held-out splits of the bundled sets are the ones they have always been."""

import hashlib

import numpy as np
import pytest
from sklearn.model_selection import train_test_split

from flowerbed.data.bundled import load_bundled
from flowerbed.data.partition import stratified_take
from flowerbed.data.stratified_split import stratified_split


def sklearn_split(labels, fraction, seed):
    return train_test_split(
        np.arange(len(labels)), test_size=fraction, stratify=labels, random_state=seed
    )


def label_cases():
    """(labels, fraction, seed): random class sizes and label values, and equal-sized classes
    whose shares tie, so that the tie-breaking draws are exercised."""
    rng = np.random.default_rng(7)
    for case in range(60):
        num_classes = int(rng.integers(2, 12))
        sizes = rng.integers(2, 40, size=num_classes)
        values = rng.choice(1000, size=num_classes, replace=False) - 500  # any label values
        labels = rng.permutation(np.repeat(values, sizes))
        yield labels, float(rng.uniform(0.15, 0.6)), case
    for size, num_classes, fraction in ((5, 3, 0.5), (7, 4, 0.3), (9, 6, 0.25), (3, 10, 0.5)):
        yield np.tile(np.arange(num_classes), size), fraction, 3


def test_equals_scikit_learns_split_index_for_index():
    ties = 0
    for labels, fraction, seed in label_cases():
        ours = stratified_split(labels, fraction, seed)
        theirs = sklearn_split(labels, fraction, seed)
        assert np.array_equal(ours[0], theirs[0]) and np.array_equal(ours[1], theirs[1])
        assert ours[0].dtype == ours[1].dtype == np.int64
        counts = np.unique(labels, return_counts=True)[1]
        shares = counts / counts.sum() * (len(labels) - len(ours[1]))
        ties += len(set(shares - np.floor(shares))) < len(counts)
    assert ties >= 4  # the tie-breaking path ran


def test_the_split_is_a_disjoint_cover_in_proportion_and_seeded():
    labels = np.repeat([0, 1, 2], [50, 30, 20])
    train, test = stratified_split(labels, 0.2, 0)
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(100))
    assert np.bincount(labels[test]).tolist() == [10, 6, 4]
    assert np.array_equal(stratified_split(labels, 0.2, 0)[1], test)
    assert not np.array_equal(stratified_split(labels, 0.2, 1)[1], test)


def test_server_take_is_scikit_learns_with_the_seed_folded_into_32_bits():
    labels = np.tile(np.arange(5), 40)
    seed = 2**40 + 123
    assert np.array_equal(stratified_take(labels, 0.3, seed), sklearn_split(labels, 0.3, 123)[1])


# sha256 of the held-out (and training) indices as little-endian int64, taken with
# scikit-learn 1.9.1's train_test_split(test_size=0.2, stratify=y, random_state=0): these
# splits must never change, whatever scikit-learn does in a later release
PINNED = {
    "digits": (
        "d96def73c7daab649ddd680a3bb17f55bdb068fb4336710c16bb74437c52a7f0",
        "d9101e2e97e19974905f1336a8ef53c03166d6af2c53833be35ff03a33e7e0cd",
    ),
    "breast-cancer": (
        "bc3b916b1fa249098bd119b3e9a96682ecfd02a72827b19b91234bba5d40ba60",
        "f528c7a33e10cf46f134b9efa0a54517bee21910b59077d5198fe419506221fd",
    ),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_bundled_sets_held_out_splits_are_pinned(name):
    _, labels = load_bundled(name)
    digests = tuple(
        hashlib.sha256(indices.astype("<i8").tobytes()).hexdigest()
        for indices in stratified_split(labels, 0.2, 0)
    )
    assert digests == PINNED[name]


@pytest.mark.parametrize(
    "labels, fraction, message",
    [
        ([0, 0, 1, 1, 2], 0.4, r"classes \[2\] have a single sample"),
        ([0, 1] * 10, 0.0, r"must be in \(0, 1\), got 0.0"),
        ([0, 1] * 10, 1.0, r"must be in \(0, 1\), got 1.0"),
        ([0, 1, 2] * 5, 0.1, r"leaves 2 in test, fewer than the 3 classes"),
        ([0, 1, 2] * 5, 0.9, r"leaves 1 in train, fewer than the 3 classes"),
    ],
)
def test_impossible_splits_are_refused_as_scikit_learn_refuses_them(labels, fraction, message):
    with pytest.raises(ValueError, match=message):
        stratified_split(np.array(labels), fraction, 0)
    with pytest.raises(ValueError):
        sklearn_split(np.array(labels), fraction, 0)
