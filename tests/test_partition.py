import numpy as np
import pytest

from flowerbed.data.partition import (
    PARTITIONERS,
    label_counts,
    partition_indices,
    split_train_test,
)

LABELS = np.repeat(np.arange(10), 50)  # 500 samples, 10 balanced classes
np.random.default_rng(0).shuffle(LABELS)


@pytest.mark.parametrize("scheme", PARTITIONERS)
def test_partitions_are_disjoint_and_cover_the_data(scheme):
    parts = partition_indices(LABELS, 8, scheme, seed=3, alpha=0.5, min_partition_size=5)
    assert len(parts) == 8
    joined = np.concatenate(parts)
    assert len(joined) == len(np.unique(joined)), "a sample is in two partitions"
    assert set(joined.tolist()) == set(range(len(LABELS))), "some samples are in no partition"


@pytest.mark.parametrize("scheme", PARTITIONERS)
def test_same_seed_same_partition_other_seed_other_partition(scheme):
    a = partition_indices(LABELS, 5, scheme, seed=1, min_partition_size=5)
    b = partition_indices(LABELS, 5, scheme, seed=1, min_partition_size=5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    if scheme != "label-sorted":  # the only deterministic scheme
        c = partition_indices(LABELS, 5, scheme, seed=2, min_partition_size=5)
        assert not all(np.array_equal(np.sort(x), np.sort(y)) for x, y in zip(a, c))


def test_iid_is_balanced_and_mixed():
    parts = partition_indices(LABELS, 5, "iid", seed=0)
    assert sorted(len(p) for p in parts) == [100] * 5
    counts = label_counts(LABELS, parts, 10)
    assert (counts > 0).all(), "an iid client of 100 samples should see all 10 classes"


def test_smaller_alpha_gives_more_skewed_partitions():
    def mean_classes_held(alpha):
        held = []
        for seed in range(5):
            parts = partition_indices(
                LABELS, 10, "dirichlet", seed=seed, alpha=alpha, min_partition_size=1
            )
            counts = label_counts(LABELS, parts, 10)
            held.append((counts / counts.sum(1, keepdims=True) > 0.05).sum(1).mean())
        return np.mean(held)

    assert mean_classes_held(0.05) < mean_classes_held(1.0) < mean_classes_held(100.0)


def test_dirichlet_respects_minimum_size():
    parts = partition_indices(LABELS, 10, "dirichlet", seed=0, alpha=0.1, min_partition_size=20)
    assert min(len(p) for p in parts) >= 20


@pytest.mark.parametrize("m", [1, 2, 3])
def test_pathological_gives_each_client_exactly_m_classes(m):
    parts = partition_indices(LABELS, 10, "pathological", seed=0, classes_per_client=m)
    counts = label_counts(LABELS, parts, 10)
    assert ((counts > 0).sum(axis=1) == m).all()


def test_pathological_sample_counts_are_random_not_equal():
    parts = partition_indices(LABELS, 10, "pathological", seed=0, classes_per_client=3)
    counts = label_counts(LABELS, parts, 10)
    nonzero = counts[counts > 0]
    assert len(np.unique(nonzero)) > 3, "counts per class should vary between holders"


def test_label_sorted_gives_contiguous_label_blocks():
    parts = partition_indices(LABELS, 5, "label-sorted")
    assert [len(p) for p in parts] == [100] * 5
    for k, part in enumerate(parts):  # 10 balanced classes over 5 clients: 2 classes each
        assert sorted(set(LABELS[part].tolist())) == [2 * k, 2 * k + 1]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scheme": "zipf"}, "unknown partitioner 'zipf'; valid choices: iid, dirichlet"),
        ({"scheme": "dirichlet", "alpha": 0.0}, "dirichlet-alpha must be > 0, got 0.0"),
        ({"scheme": "dirichlet", "alpha": -1.0}, "dirichlet-alpha must be > 0"),
        ({"scheme": "iid", "num_partitions": 501}, "501 clients but only 500 training samples"),
        (
            {"scheme": "pathological", "classes_per_client": 11},
            "classes-per-client must be between 1 and 10",
        ),
        ({"scheme": "dirichlet", "min_partition_size": 60}, "min-partition-size=60 is impossible"),
    ],
)
def test_bad_partition_arguments_are_named(kwargs, message):
    args = {"num_partitions": 10, "alpha": 0.5, "min_partition_size": 0, **kwargs}
    scheme = args.pop("scheme")
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        partition_indices(LABELS, args.pop("num_partitions"), scheme, **args)


def test_local_split_is_seeded_disjoint_and_keeps_both_sides_nonempty():
    idx = np.arange(10, 20)
    train, test = split_train_test(idx, 0.2, seed=5)
    assert len(test) == 2 and len(train) == 8
    assert set(train) | set(test) == set(idx) and not set(train) & set(test)
    train2, test2 = split_train_test(idx, 0.2, seed=5)
    assert np.array_equal(train, train2) and np.array_equal(test, test2)
    tiny_train, tiny_test = split_train_test(np.array([3, 4]), 0.01, seed=0)
    assert len(tiny_train) == 1 and len(tiny_test) == 1
