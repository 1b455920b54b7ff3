import numpy as np
import pytest

from flowerbed.data.partition import (
    PARTITIONERS,
    format_label_table,
    label_counts,
    members,
    partition_data,
    partition_indices,
    split_train_test,
)

LABELS = np.repeat(np.arange(10), 50)  # 500 samples, 10 balanced classes
np.random.default_rng(0).shuffle(LABELS)
FEATURES = np.random.default_rng(1).normal(size=(len(LABELS), 4))  # read by kmeans-pca


def inputs(num_partitions: int) -> dict:
    """What kmeans-pca (features) and dataset-nodes (nodes) read; label schemes ignore it."""
    return {"features": FEATURES, "nodes": np.arange(len(LABELS)) % num_partitions}


@pytest.mark.parametrize("scheme", [s for s in PARTITIONERS if s != "dirichlet-sized"])
def test_partitions_are_disjoint_and_cover_the_data(scheme):
    parts = partition_indices(
        LABELS, 8, scheme, seed=3, alpha=0.5, min_partition_size=5, **inputs(8)
    )
    assert len(parts) == 8
    joined = np.concatenate(parts)
    assert len(joined) == len(np.unique(joined)), "a sample is in two partitions"
    assert set(joined.tolist()) == set(range(len(LABELS))), "some samples are in no partition"


@pytest.mark.parametrize("scheme", PARTITIONERS)
def test_same_seed_same_partition_other_seed_other_partition(scheme):
    options = {"min_partition_size": 5, "samples_per_client": 40, **inputs(5)}
    a = partition_indices(LABELS, 5, scheme, seed=1, **options)
    b = partition_indices(LABELS, 5, scheme, seed=1, **options)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    if scheme not in ("label-sorted", "dataset-nodes"):  # the deterministic schemes
        c = partition_indices(LABELS, 5, scheme, seed=2, **options)
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


# --- iid and dirichlet against flwr-datasets ----------------------------------------------------
def flwr_datasets_partition(labels, num_partitions, scheme, seed, alpha, min_partition_size):
    """The partitions flwr-datasets gives (flowerbed's implementation before it was written out
    in numpy): the reference the numpy one must match index for index."""
    from datasets import Dataset
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner

    table = Dataset.from_dict({"index": np.arange(len(labels)), "label": labels})
    if scheme == "iid":
        table = table.shuffle(seed=seed)  # IidPartitioner shards contiguously
        partitioner = IidPartitioner(num_partitions=num_partitions)
    else:
        partitioner = DirichletPartitioner(
            num_partitions=num_partitions,
            partition_by="label",
            alpha=alpha,
            min_partition_size=min_partition_size,
            self_balancing=False,
            shuffle=True,
            seed=seed,
        )
    partitioner.dataset = table
    return [
        np.asarray(partitioner.load_partition(pid)["index"], dtype=np.int64)
        for pid in range(num_partitions)
    ]


def digits_labels():
    from sklearn.datasets import load_digits

    return load_digits().target.astype(np.int64)


@pytest.mark.filterwarnings("ignore:The specified min_partition_size")  # flwr-datasets' retries
@pytest.mark.parametrize("scheme", ["iid", "dirichlet"])
@pytest.mark.parametrize(
    "labels_name, num_partitions, alpha, min_partition_size",
    [
        ("balanced", 10, 0.5, 10),  # flowerbed's defaults on a 500-sample pool
        ("balanced", 7, 0.1, 0),  # sizes that do not divide, very skewed
        ("balanced", 3, 100.0, 2),  # nearly uniform
        ("balanced", 10, 0.3, 25),  # 1 to 5 redraws before every client has 25
        ("gaps", 4, 1.0, 1),  # classes 1 and 4 absent, one class with a single sample
        ("digits", 10, 0.5, 10),  # the default run's pool
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 42, 2**40 + 7])
def test_iid_and_dirichlet_equal_flwr_datasets(
    scheme, labels_name, num_partitions, alpha, min_partition_size, seed
):
    labels = {
        "balanced": LABELS,
        "gaps": np.array([0, 0, 2, 2, 2, 3, 5, 5, 5, 5, 5, 5, 0, 2, 3, 3, 6, 5, 0, 2]),
        "digits": digits_labels() if labels_name == "digits" else None,
    }[labels_name]
    options = {"seed": seed, "alpha": alpha, "min_partition_size": min_partition_size}
    ours = partition_indices(labels, num_partitions, scheme, **options)
    theirs = flwr_datasets_partition(labels, num_partitions, scheme, **options)
    assert [part.tolist() for part in ours] == [part.tolist() for part in theirs]
    assert all(part.dtype == np.int64 for part in ours)


@pytest.mark.filterwarnings("ignore:The specified min_partition_size")
def test_dirichlet_gives_up_after_flwr_datasets_number_of_draws():
    # 10 clients, 100 samples, at least 10 each: only a perfectly even draw would do
    labels = np.repeat(np.arange(10), 10)
    options = {"seed": 0, "alpha": 0.5, "min_partition_size": 10}
    with pytest.raises(ValueError, match="max number of attempts"):
        flwr_datasets_partition(labels, 10, "dirichlet", **options)
    with pytest.raises(
        ValueError,
        match="11 draws with dirichlet-alpha=0.5 all left a client with fewer than"
        " min-partition-size=10 samples; raise dirichlet-alpha or lower min-partition-size",
    ):
        partition_indices(labels, 10, "dirichlet", **options)


def test_local_split_is_seeded_disjoint_and_keeps_both_sides_nonempty():
    idx = np.arange(10, 20)
    train, test = split_train_test(idx, 0.2, seed=5)
    assert len(test) == 2 and len(train) == 8
    assert set(train) | set(test) == set(idx) and not set(train) & set(test)
    train2, test2 = split_train_test(idx, 0.2, seed=5)
    assert np.array_equal(train, train2) and np.array_equal(test, test2)
    tiny_train, tiny_test = split_train_test(np.array([3, 4]), 0.01, seed=0)
    assert len(tiny_train) == 1 and len(tiny_test) == 1


# --- kmeans-pca and dataset-nodes --------------------------------------------------------------
CENTRES = np.array([[10.0, 10.0], [10.0, -10.0], [-10.0, 10.0], [-10.0, -10.0]])


def blobs(n: int, seed: int, centres: np.ndarray = CENTRES):
    """``n`` points around random ones of ``centres`` (sd 1) and the blob of each."""
    rng = np.random.default_rng(seed)
    blob = rng.integers(0, len(centres), n)
    return centres[blob] + rng.normal(size=(n, centres.shape[1])), blob


@pytest.mark.parametrize("seed", [0, 5])
def test_kmeans_pca_recovers_well_separated_blobs_in_train_and_test(seed):
    x, blob = blobs(400, seed=10 + seed)
    x_test, blob_test = blobs(100, seed=20 + seed)
    parts = partition_data(
        np.zeros(400, dtype=np.int64),
        4,
        "kmeans-pca",
        seed=seed,
        features=x,
        test_features=x_test,
    )
    train_blob = [set(blob[p].tolist()) for p in parts.train]
    assert all(len(b) == 1 for b in train_blob), "a client holds points of two blobs"
    assert sorted(b.pop() for b in [set(s) for s in train_blob]) == [0, 1, 2, 3]
    for client, part in enumerate(parts.test):  # test points join their blob's client
        assert set(blob_test[part].tolist()) == train_blob[client]
    for side, n in ((parts.train, 400), (parts.test, 100)):
        joined = np.concatenate(side)
        assert sorted(joined.tolist()) == list(range(n))


def test_kmeans_pca_flattens_images():
    x, blob = blobs(200, seed=3)
    images = x.reshape(200, 1, 1, 2)
    parts = partition_data(np.zeros(200, dtype=np.int64), 4, "kmeans-pca", features=images)
    assert all(len(set(blob[p].tolist())) == 1 for p in parts.train)
    assert parts.test is None  # no test features given


def test_kmeans_pca_projects_test_points_with_the_training_scaler():
    """A test split that is a shifted subset: mostly points of the right-hand blob. With the
    training pool's scaler they stay in that blob's cluster; a scaler re-fitted on the test
    split (the authors' code) centres them and sends them to the middle blob's cluster."""
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import StandardScaler

    line = np.array([[-10.0, -10.0], [0.0, 0.0], [10.0, 10.0]])  # both features carry the blobs
    x, blob = blobs(600, seed=1, centres=line)
    rng = np.random.default_rng(2)
    x_test = np.concatenate([line[[0, 1]], line[2] + rng.normal(size=(50, 2))])
    parts = partition_data(
        np.zeros(600, dtype=np.int64), 3, "kmeans-pca", seed=0, features=x, test_features=x_test
    )
    right = next(k for k, p in enumerate(parts.train) if set(blob[p].tolist()) == {2})
    middle = next(k for k, p in enumerate(parts.train) if set(blob[p].tolist()) == {1})
    assert parts.test[right].tolist() == list(range(2, 52))
    assert len(parts.test[middle]) == 1

    # the bug, computed independently: the same clusters, a scaler re-fitted on the test split
    scaler = StandardScaler().fit(x)
    pca = PCA(n_components=2, random_state=0).fit(scaler.transform(x))
    kmeans = KMeans(n_clusters=3, max_iter=1, n_init=1, random_state=0)
    assert np.array_equal(
        kmeans.fit_predict(pca.transform(scaler.transform(x))) == right, blob == 2
    )
    refitted = kmeans.predict(pca.transform(StandardScaler().fit_transform(x_test)))
    assert (refitted[2:] == middle).mean() > 0.8, "the re-fitted scaler should move them"


def test_kmeans_pca_bad_inputs_are_named():
    labels = np.zeros(10, dtype=np.int64)
    with pytest.raises(ValueError, match="kmeans-pca' clusters the training pool's features"):
        partition_data(labels, 2, "kmeans-pca")
    with pytest.raises(ValueError, match="kmeans-pca: 9 feature rows for 10 labels"):
        partition_data(labels, 2, "kmeans-pca", features=np.ones((9, 2)))
    with pytest.raises(ValueError, match="test features have 3 values per sample"):
        partition_data(
            labels,
            2,
            "kmeans-pca",
            features=np.arange(20.0).reshape(10, 2),
            test_features=np.ones((4, 3)),
        )
    duplicates = np.repeat([[0.0, 0.0], [5.0, 1.0]], 5, axis=0)  # two distinct points, 3 clusters
    with (
        pytest.warns(UserWarning),
        pytest.raises(  # sklearn: fewer distinct clusters
            ValueError,
            match="kmeans-pca leaves client 2 without training samples .*another seed or fewer",
        ),
    ):
        partition_data(labels, 3, "kmeans-pca", features=duplicates)
    x, _ = blobs(100, seed=0)
    far_away = np.full((3, 2), 10.0)  # every test point in the (10, 10) blob's cluster
    with pytest.raises(ValueError, match="without held-out test samples"):
        partition_data(
            np.zeros(100, dtype=np.int64), 4, "kmeans-pca", features=x, test_features=far_away
        )


def test_dataset_nodes_gives_each_client_its_node():
    nodes = np.array([2, 0, 1, 0, 2, 1, 1])
    test_nodes = np.array([1, 0, 2, 2])
    parts = partition_data(
        np.zeros(7, dtype=np.int64), 3, "dataset-nodes", nodes=nodes, test_nodes=test_nodes
    )
    assert [p.tolist() for p in parts.train] == [[1, 3], [2, 5, 6], [0, 4]]
    assert [p.tolist() for p in parts.test] == [[1], [0], [2, 3]]


def test_dataset_nodes_bad_uses_are_named():
    labels = np.zeros(6, dtype=np.int64)
    with pytest.raises(ValueError, match="'dataset-nodes' needs a data set with its own nodes"):
        partition_data(labels, 2, "dataset-nodes")
    with pytest.raises(
        ValueError,
        match="the data set has 3 nodes but the federation has 2 clients; run with 3 SuperNodes",
    ):
        partition_data(labels, 2, "dataset-nodes", nodes=np.arange(6) % 3)
    with pytest.raises(ValueError, match="leaves client 1 without held-out test samples"):
        partition_data(
            labels,
            2,
            "dataset-nodes",
            nodes=np.arange(6) % 2,
            test_nodes=np.array([0, 0]),
        )


def test_dirichlet_sized_gives_every_client_its_size_disjoint_while_classes_last():
    labels = np.repeat(np.arange(4), 1000)  # 4 classes of 1,000: 6 x 100 never exhausts one
    parts = partition_indices(
        labels, 6, "dirichlet-sized", seed=0, alpha=0.5, samples_per_client=100
    )
    assert [len(p) for p in parts] == [100] * 6
    joined = np.concatenate(parts)
    assert len(np.unique(joined)) == len(joined)  # disjoint
    # skewed: with alpha 0.5 over 4 classes, most clients are dominated by one or two classes
    shares = [np.bincount(labels[p], minlength=4).max() / 100 for p in parts]
    assert np.mean(shares) > 0.45


def test_dirichlet_sized_follows_alpha():
    labels = np.repeat(np.arange(5), 2000)
    counts = {
        alpha: np.array(
            [
                np.bincount(labels[p], minlength=5)
                for p in partition_indices(
                    labels, 20, "dirichlet-sized", seed=1, alpha=alpha, samples_per_client=200
                )
            ]
        )
        for alpha in (0.01, 1000.0)
    }
    assert (counts[0.01].max(axis=1) >= 190).mean() > 0.8  # nearly one class per client
    assert np.abs(counts[1000.0] - 40).max() <= 25  # nearly uniform: 40 per class


def test_dirichlet_sized_reuses_a_class_once_it_is_used_up():
    labels = np.repeat(np.arange(3), 10)  # 30 samples; 4 clients x 20 = 80 draws
    parts = partition_indices(
        labels, 4, "dirichlet-sized", seed=2, alpha=1.0, samples_per_client=20
    )
    assert [len(p) for p in parts] == [20] * 4
    joined = np.concatenate(parts)
    assert joined.min() >= 0 and joined.max() < 30
    assert len(np.unique(joined)) == 30  # every sample was used before any was drawn again


@pytest.mark.parametrize("num_groups", [1, 3, 50])
def test_members_are_each_group_s_ascending_indices_in_one_sort(num_groups):
    groups = np.random.default_rng(num_groups).integers(0, num_groups + 2, 2000)  # some >= K
    found = members(groups, num_groups)
    assert len(found) == num_groups
    for g, indices in enumerate(found):
        assert indices.tolist() == np.flatnonzero(groups == g).tolist()  # the scan it replaces
    assert members(np.array([], dtype=np.int64), 2)[1].tolist() == []


def test_dataset_nodes_scales_to_ten_thousand_nodes():
    nodes = np.repeat(np.arange(10_000), 3)[::-1].copy()  # 30,000 samples, nodes descending
    parts = partition_data(np.zeros(30_000, dtype=np.int64), 10_000, "dataset-nodes", nodes=nodes)
    assert parts.train[0].tolist() == [29_997, 29_998, 29_999]
    assert parts.train[9_999].tolist() == [0, 1, 2]


def test_the_logged_label_table_can_stop_after_some_clients():
    counts = np.arange(12).reshape(6, 2)
    full = format_label_table(counts).splitlines()
    assert len(full) == 7 and full[1].split() == ["0", "0", "1", "1"]
    short = format_label_table(counts, max_rows=2).splitlines()
    assert short[:3] == full[:3]
    assert short[3] == "... 4 more clients (partitions.csv has them all)" and len(short) == 4
    assert format_label_table(counts, max_rows=6) == format_label_table(counts)
