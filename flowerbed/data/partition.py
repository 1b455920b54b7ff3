"""Partition a training pool among clients, by label, by feature clusters or by the data's nodes.

``partition_data`` returns, for every partition id, the indices of its training samples (and,
for the schemes that split it, of its held-out test samples). It is a pure function of (labels,
features or nodes where the scheme reads them, scheme, parameters, seed): the ServerApp and
every ClientApp call it with the same arguments and so agree on every client's data without
exchanging it. ``partition_indices`` is its training part.

Schemes:

* ``iid``: a seeded shuffle cut into equal parts.
* ``dirichlet``: class proportions per client drawn from Dir(alpha), resampled until every
  client holds at least ``min_partition_size`` samples.
* ``dirichlet-sized``: every client holds exactly ``samples_per_client`` samples with class
  proportions p ~ Dir(alpha) (class counts ~ Multinomial(samples_per_client, p)), the QFedFisher
  paper's partition ("Dirichlet distribution, each client receiving 500 samples"). Hand-written:
  no library partitioner fixes the size. Clients take disjoint samples while a class lasts;
  once a class is used up, its further samples are drawn again from the whole class, so on a
  small data set clients share samples (like sites that sample one population).
* ``pathological``: each client holds ``classes_per_client`` (M) distinct classes with a random
  number of samples per class (QKT paper, Sec. 5). Hand-written: flwr-datasets'
  ``PathologicalPartitioner`` splits a class *equally* among its holders.
* ``label-sorted``: samples sorted by label, cut into equal contiguous slices (Algorithm A1 of
  the point-cloud FL/KD benchmark). Hand-written: two lines of numpy, no seed involved.
* ``kmeans-pca``: features standardised, projected on their first two principal components,
  then ONE iteration of k-means with k = clients; client k holds cluster k (CTL paper,
  "Distributed Collaborative Learning with Representative Knowledge Sharing", Sec. 4.1.1).
  Held-out test samples go through the training pool's scaler and PCA and to the nearest
  centre. Reads the features (images flattened), not the labels.
* ``dataset-nodes``: client k holds node k of a data set that has its own nodes
  (``ctl-gaussian``, ``synthetic``, ``synthetic-iid``), training and test samples; clients = the
  data set's nodes.

The last two also split the held-out test split (``TEST_PARTITIONERS``); every client must get
at least one training and one test sample, else a ``ValueError`` names the client.

``iid`` and ``dirichlet`` are written out in numpy, draw for draw what flwr-datasets gives
(``IidPartitioner`` on a table shuffled by Hugging Face ``Dataset.shuffle(seed)``;
``DirichletPartitioner(shuffle=True, self_balancing=False, seed)``): ``tests/test_partition.py``
checks them index for index against flwr-datasets. Importing flwr-datasets and Hugging Face
``datasets`` costs seconds in the ServerApp and in every Ray actor, for twenty lines of numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .stratified_split import stratified_split

LABEL_PARTITIONERS = ("iid", "dirichlet", "dirichlet-sized", "pathological", "label-sorted")
TEST_PARTITIONERS = ("kmeans-pca", "dataset-nodes")  # they split the held-out test split too
PARTITIONERS = LABEL_PARTITIONERS + TEST_PARTITIONERS


@dataclass(frozen=True)
class Partition:
    """Per client: indices into the training pool and, for ``TEST_PARTITIONERS``, into the
    held-out test split (None for the other schemes, and when no test data was given)."""

    train: list[np.ndarray]
    test: list[np.ndarray] | None = None


def partition_indices(
    labels: np.ndarray, num_partitions: int, scheme: str, **options
) -> list[np.ndarray]:
    """Indices into ``labels`` for each of ``num_partitions`` clients (disjoint, except where
    ``dirichlet-sized`` runs out of a class): the training part of ``partition_data`` (same
    keyword arguments)."""
    return partition_data(labels, num_partitions, scheme, **options).train


def partition_data(
    labels: np.ndarray,
    num_partitions: int,
    scheme: str,
    *,
    seed: int = 0,
    alpha: float = 0.5,
    min_partition_size: int = 2,
    classes_per_client: int = 3,
    samples_per_client: int = 500,
    features: np.ndarray | None = None,
    test_features: np.ndarray | None = None,
    nodes: np.ndarray | None = None,
    test_nodes: np.ndarray | None = None,
) -> Partition:
    """The partition of the training pool (and of the test split, for ``TEST_PARTITIONERS``).

    ``features``/``test_features``: the training pool's and test split's features, read by
    ``kmeans-pca`` (``features`` required). ``nodes``/``test_nodes``: the node of every training
    and test sample, read by ``dataset-nodes`` (``nodes`` required). Other schemes ignore them.
    """
    labels = np.asarray(labels).reshape(-1)
    validate_partitioning(
        num_samples=len(labels),
        num_classes=int(labels.max()) + 1,
        num_partitions=num_partitions,
        scheme=scheme,
        alpha=alpha,
        min_partition_size=min_partition_size,
        classes_per_client=classes_per_client,
    )
    if scheme == "kmeans-pca":
        return _nonempty(_kmeans_pca(labels, features, test_features, num_partitions, seed), scheme)
    if scheme == "dataset-nodes":
        return _nonempty(_dataset_nodes(labels, nodes, test_nodes, num_partitions), scheme)
    if scheme == "label-sorted":
        return Partition(np.array_split(np.argsort(labels, kind="stable"), num_partitions))
    if scheme == "pathological":
        return Partition(_pathological(labels, num_partitions, classes_per_client, seed))
    if scheme == "iid":
        return Partition(_iid(len(labels), num_partitions, seed))
    if scheme == "dirichlet-sized":
        return Partition(_dirichlet_sized(labels, num_partitions, seed, alpha, samples_per_client))
    return Partition(_dirichlet(labels, num_partitions, seed, alpha, min_partition_size))


def validate_partitioning(
    *,
    num_samples: int,
    num_classes: int,
    num_partitions: int,
    scheme: str,
    alpha: float,
    min_partition_size: int,
    classes_per_client: int,
) -> None:
    """Raise ``ValueError`` naming the bad value and the valid range."""
    if scheme not in PARTITIONERS:
        raise ValueError(
            f"unknown partitioner {scheme!r}; valid choices: {', '.join(PARTITIONERS)}"
        )
    if num_partitions < 1:
        raise ValueError(f"number of clients must be at least 1, got {num_partitions}")
    if num_partitions > num_samples:
        raise ValueError(
            f"{num_partitions} clients but only {num_samples} training samples: every client needs"
            f" at least one sample; use at most {num_samples} clients (num-supernodes)"
        )
    if scheme in ("dirichlet", "dirichlet-sized") and not alpha > 0:
        raise ValueError(f"dirichlet-alpha must be > 0, got {alpha}")
    too_large = min_partition_size < 0 or min_partition_size * num_partitions > num_samples
    if scheme == "dirichlet" and too_large:
        raise ValueError(
            f"min-partition-size={min_partition_size} is impossible for {num_partitions} clients"
            f" and {num_samples} samples; valid range: 0 to {num_samples // num_partitions}"
        )
    if scheme == "pathological" and not 1 <= classes_per_client <= num_classes:
        raise ValueError(
            f"classes-per-client must be between 1 and {num_classes} (the number of classes),"
            f" got {classes_per_client}"
        )


def _dirichlet_sized(
    labels: np.ndarray, num_partitions: int, seed: int, alpha: float, size: int
) -> list[np.ndarray]:
    """``dirichlet-sized`` (module docstring): client by client, counts ~ Multinomial(size,
    Dir(alpha)) over the classes present, each class's samples taken from its shuffled queue,
    refilled with a fresh shuffle of the whole class when it runs dry."""
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    members = [np.flatnonzero(labels == k) for k in classes]
    queues = [rng.permutation(m) for m in members]
    parts = []
    for _ in range(num_partitions):
        counts = rng.multinomial(size, rng.dirichlet(np.full(len(classes), float(alpha))))
        part = []
        for c, count in enumerate(counts):
            while count > 0:
                if len(queues[c]) == 0:
                    queues[c] = rng.permutation(members[c])
                taken, queues[c] = queues[c][:count], queues[c][count:]
                part.append(taken)
                count -= len(taken)
        parts.append(rng.permutation(np.concatenate(part)).astype(np.int64))
    return parts


def _iid(num_samples: int, num_partitions: int, seed: int) -> list[np.ndarray]:
    """A seeded permutation cut into contiguous parts whose sizes differ by at most one (the
    first ``num_samples % num_partitions`` parts one longer)."""
    return np.array_split(np.random.default_rng(seed).permutation(num_samples), num_partitions)


DIRICHLET_ATTEMPTS = 11  # flwr-datasets' DirichletPartitioner: a first draw and 10 retries


def _dirichlet(
    labels: np.ndarray, num_partitions: int, seed: int, alpha: float, min_partition_size: int
) -> list[np.ndarray]:
    """For every class present (in increasing order), proportions p ~ Dir(alpha, ..., alpha)
    over the clients; the class's samples (in index order) are cut at floor(cumsum(p) * n).
    The whole draw is repeated while a client holds fewer than ``min_partition_size`` samples;
    each client's indices are then shuffled. One generator, seeded once, serves every draw."""
    rng = np.random.default_rng(seed)
    alphas = np.full(num_partitions, float(alpha))
    classes = [np.flatnonzero(labels == k) for k in np.unique(labels)]
    for _ in range(DIRICHLET_ATTEMPTS):
        parts: list[list[int]] = [[] for _ in range(num_partitions)]
        for members in classes:
            cuts = (np.cumsum(rng.dirichlet(alphas)) * len(members)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(members, cuts)):
                part.extend(chunk.tolist())
        if min(len(part) for part in parts) >= min_partition_size:
            break
    else:
        raise ValueError(
            f"dirichlet: {DIRICHLET_ATTEMPTS} draws with dirichlet-alpha={alpha} all left a"
            f" client with fewer than min-partition-size={min_partition_size} samples; raise"
            " dirichlet-alpha or lower min-partition-size"
        )
    for part in parts:
        rng.shuffle(part)
    return [np.asarray(part, dtype=np.int64) for part in parts]


def _pathological(labels: np.ndarray, num_partitions: int, classes_per_client: int, seed: int):
    """M distinct classes per client; each class split among its holders in random proportions.

    Classes are laid out on a seeded random cycle and client k takes the M classes starting at
    position k*M, so every class has a holder whenever clients * M >= classes. A class's samples
    are shuffled and cut at random points (proportions ~ Dir(1), each holder gets >= 1 sample).
    """
    rng = np.random.default_rng(seed)
    num_classes = int(labels.max()) + 1
    class_cycle = rng.permutation(num_classes)
    holders: dict[int, list[int]] = {c: [] for c in range(num_classes)}
    for client in range(num_partitions):
        for j in range(classes_per_client):
            holders[int(class_cycle[(client * classes_per_client + j) % num_classes])].append(
                client
            )

    parts: list[list[np.ndarray]] = [[] for _ in range(num_partitions)]
    for cls, clients in holders.items():
        samples = rng.permutation(np.flatnonzero(labels == cls))
        if not clients or len(samples) == 0:
            continue
        extra = len(samples) - len(clients)
        if extra < 0:  # fewer samples than holders: the first holders get one each
            counts = np.array([1] * len(samples) + [0] * -extra)
        else:
            counts = 1 + rng.multinomial(extra, rng.dirichlet(np.ones(len(clients))))
        for client, chunk in zip(clients, np.split(samples, np.cumsum(counts)[:-1])):
            parts[client].append(chunk)
    return [
        np.sort(np.concatenate(chunks)) if chunks else np.array([], dtype=np.int64)
        for chunks in parts
    ]


def _kmeans_pca(labels, features, test_features, num_partitions: int, seed: int) -> Partition:
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import StandardScaler

    if features is None:
        raise ValueError(
            "partitioner 'kmeans-pca' clusters the training pool's features: pass features"
        )
    x = np.asarray(features).reshape(len(features), -1)
    if len(x) != len(labels):
        raise ValueError(f"kmeans-pca: {len(x)} feature rows for {len(labels)} labels")
    scaler = StandardScaler().fit(x)
    pca = PCA(n_components=min(2, x.shape[1]), random_state=seed).fit(scaler.transform(x))
    kmeans = KMeans(n_clusters=num_partitions, max_iter=1, n_init=1, random_state=seed)
    clusters = kmeans.fit_predict(pca.transform(scaler.transform(x)))
    test_parts = None
    if test_features is not None:
        x_test = np.asarray(test_features).reshape(len(test_features), -1)
        if x_test.shape[1] != x.shape[1]:
            raise ValueError(
                f"kmeans-pca: test features have {x_test.shape[1]} values per sample, the"
                f" training pool {x.shape[1]}"
            )
        # The training pool's scaler and PCA: the authors' code re-fitted a scaler on the test
        # data (data_scaler.fit_transform(val_data)), a bug that moves the test points relative
        # to the training clusters; fixed here.
        test_clusters = kmeans.predict(pca.transform(scaler.transform(x_test)))
        test_parts = members(test_clusters, num_partitions)
    return Partition(members(clusters, num_partitions), test_parts)


def _dataset_nodes(labels, nodes, test_nodes, num_partitions: int) -> Partition:
    if nodes is None:
        raise ValueError(
            "partitioner 'dataset-nodes' needs a data set with its own nodes: pass the node of"
            " every training sample"
        )
    nodes = np.asarray(nodes).reshape(-1)
    if len(nodes) != len(labels):
        raise ValueError(f"dataset-nodes: {len(nodes)} node ids for {len(labels)} labels")
    num_nodes = int(max(nodes.max(), -1 if test_nodes is None else np.max(test_nodes))) + 1
    if num_nodes != num_partitions:
        raise ValueError(
            f"the data set has {num_nodes} nodes but the federation has {num_partitions}"
            f" clients; run with {num_nodes} SuperNodes"
        )
    test_parts = None
    if test_nodes is not None:
        test_nodes = np.asarray(test_nodes).reshape(-1)
        test_parts = members(test_nodes, num_partitions)
    return Partition(members(nodes, num_partitions), test_parts)


def members(groups: np.ndarray, num_groups: int) -> list[np.ndarray]:
    """For each group g in [0, ``num_groups``), the ascending indices i with groups[i] == g
    (``np.flatnonzero(groups == g)``), from one stable sort: O(N log N), where a scan per group
    is O(N x groups), minutes for 10,000 nodes and millions of samples."""
    groups = np.asarray(groups).reshape(-1)
    counts = np.bincount(groups, minlength=num_groups)[:num_groups]  # groups must be >= 0
    order = np.argsort(groups, kind="stable")[: counts.sum()]  # groups >= num_groups sort last
    return np.split(order, np.cumsum(counts)[:-1])


def _nonempty(partition: Partition, scheme: str) -> Partition:
    """``partition``, or a ``ValueError`` naming the first client without training or test data."""
    group, hint = (
        ("cluster", "try another seed or fewer clients")
        if scheme == "kmeans-pca"
        else ("node", "every node needs samples in both splits")
    )
    for side, parts in (("training", partition.train), ("held-out test", partition.test)):
        for client, part in enumerate(parts or ()):
            if len(part) == 0:
                raise ValueError(
                    f"{scheme} leaves client {client} without {side} samples (no {side} sample"
                    f" is in {group} {client}); {hint}"
                )
    return partition


def label_counts(labels: np.ndarray, partitions: list[np.ndarray], num_classes: int) -> np.ndarray:
    """(num_partitions, num_classes) matrix of sample counts."""
    labels = np.asarray(labels).reshape(-1)
    return np.stack([np.bincount(labels[idx], minlength=num_classes) for idx in partitions])


def format_label_table(counts: np.ndarray, max_rows: int | None = None) -> str:
    """Compact per-client label-count table for the log; with ``max_rows``, the first
    ``max_rows`` clients and one line saying how many more there are."""
    num_classes = counts.shape[1]
    header = "client " + " ".join(f"{c:>5}" for c in range(num_classes)) + "  total"
    shown = counts if max_rows is None else counts[:max_rows]
    rows = [
        f"{pid:>6} " + " ".join(f"{n:>5}" for n in row) + f" {row.sum():>6}"
        for pid, row in enumerate(shown)
    ]
    if len(shown) < len(counts):
        rows.append(f"... {len(counts) - len(shown)} more clients (partitions.csv has them all)")
    return "\n".join([header, *rows])


def stratified_take(labels: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Indices of a stratified ``fraction`` of ``labels`` (every class in proportion), in a
    seeded random order: scikit-learn's ``train_test_split(..., stratify=labels)``, index for
    index (``stratified_split.py``). A ``ValueError`` when a class has a single sample or the
    share rounds to fewer samples than classes."""
    _, taken = stratified_split(labels, fraction, seed % 2**32)
    return taken


def split_train_test(indices: np.ndarray, test_fraction: float, seed: int):
    """Split one client's indices into local train and local test (seeded).

    At least one sample stays in each side when the client has two or more samples; a client
    with a single sample trains and tests on it.
    """
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(indices)
    if len(shuffled) < 2:
        return shuffled, shuffled
    num_test = min(max(round(test_fraction * len(shuffled)), 1), len(shuffled) - 1)
    return shuffled[num_test:], shuffled[:num_test]
