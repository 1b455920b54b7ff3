"""Partition a training pool among clients by label.

``partition_indices`` returns, for every partition id, the indices of its training samples.
It is a pure function of (labels, scheme, parameters, seed): the ServerApp and every ClientApp
call it with the same arguments and so agree on every client's data without exchanging it.

Schemes:

* ``iid``: a seeded shuffle cut into equal parts (flwr-datasets ``IidPartitioner``).
* ``dirichlet``: class proportions per client drawn from Dir(alpha), resampled until every
  client holds at least ``min_partition_size`` samples (flwr-datasets ``DirichletPartitioner``).
* ``pathological``: each client holds ``classes_per_client`` (M) distinct classes with a random
  number of samples per class (QKT paper, Sec. 5). Hand-written: flwr-datasets'
  ``PathologicalPartitioner`` splits a class *equally* among its holders.
* ``label-sorted``: samples sorted by label, cut into equal contiguous slices (Algorithm A1 of
  the point-cloud FL/KD benchmark). Hand-written: two lines of numpy, no seed involved.
"""

from __future__ import annotations

import numpy as np

PARTITIONERS = ("iid", "dirichlet", "pathological", "label-sorted")


def partition_indices(
    labels: np.ndarray,
    num_partitions: int,
    scheme: str,
    *,
    seed: int = 0,
    alpha: float = 0.5,
    min_partition_size: int = 2,
    classes_per_client: int = 3,
) -> list[np.ndarray]:
    """Indices into ``labels`` for each of ``num_partitions`` clients (disjoint)."""
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
    if scheme == "label-sorted":
        return np.array_split(np.argsort(labels, kind="stable"), num_partitions)
    if scheme == "pathological":
        return _pathological(labels, num_partitions, classes_per_client, seed)
    return _flwr_datasets_partition(labels, num_partitions, scheme, seed, alpha, min_partition_size)


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
    if scheme == "dirichlet":
        if not alpha > 0:
            raise ValueError(f"dirichlet-alpha must be > 0, got {alpha}")
        if min_partition_size < 0 or min_partition_size * num_partitions > num_samples:
            raise ValueError(
                f"min-partition-size={min_partition_size} is impossible for {num_partitions} clients"
                f" and {num_samples} samples; valid range: 0 to {num_samples // num_partitions}"
            )
    if scheme == "pathological" and not 1 <= classes_per_client <= num_classes:
        raise ValueError(
            f"classes-per-client must be between 1 and {num_classes} (the number of classes),"
            f" got {classes_per_client}"
        )


def _flwr_datasets_partition(labels, num_partitions, scheme, seed, alpha, min_partition_size):
    from datasets import Dataset
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner

    table = Dataset.from_dict({"index": np.arange(len(labels)), "label": labels})
    if scheme == "iid":
        # IidPartitioner shards contiguously: shuffle first so the cut is random.
        table = table.shuffle(seed=seed)
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


def label_counts(labels: np.ndarray, partitions: list[np.ndarray], num_classes: int) -> np.ndarray:
    """(num_partitions, num_classes) matrix of sample counts."""
    labels = np.asarray(labels).reshape(-1)
    return np.stack([np.bincount(labels[idx], minlength=num_classes) for idx in partitions])


def format_label_table(counts: np.ndarray) -> str:
    """Compact per-client label-count table for the log."""
    num_classes = counts.shape[1]
    header = "client " + " ".join(f"{c:>5}" for c in range(num_classes)) + "  total"
    rows = [
        f"{pid:>6} " + " ".join(f"{n:>5}" for n in row) + f" {row.sum():>6}"
        for pid, row in enumerate(counts)
    ]
    return "\n".join([header, *rows])


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
