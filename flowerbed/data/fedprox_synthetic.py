"""The synthetic federated data sets of the FedProx paper (Li et al., "Federated Optimization in
Heterogeneous Networks", MLSys 2020, Sec. 5.1), for any number of clients, from the run's seed.

``synthetic`` is Synthetic(alpha, beta): every client k has its own multinomial logistic model
and its own distribution of features. alpha (``synthetic-alpha``) controls how much the local
models differ, beta (``synthetic-beta``) how much the local data differ. With d = 60 features
and C = 10 classes, client k draws

    u_k ~ N(0, alpha^2),  W_k in R^{d x C} ~ N(u_k, 1),  b_k in R^C ~ N(u_k, 1)   (element-wise)
    B_k ~ N(0, beta^2),   v_k in R^d ~ N(B_k, 1)
    x ~ N(v_k, Sigma),    Sigma diagonal, Sigma_jj = j^(-1.2)  (j = 1 ... d)
    y = argmax softmax(x W_k + b_k) = argmax (x W_k + b_k)

What alpha does: u_k is added to every entry of W_k and b_k, so every logit of a sample grows
by u_k (sum_j x_j + 1), the same number for all ten classes, and no label changes. With the same
seed, Synthetic(alpha, beta) is the same data set for every alpha (in the reference code too:
its W_k is u_k plus the same standard normals); alpha only moves the labelling models'
parameters, not the function they compute. The clients' labelling functions differ because
each client draws its own W_k, b_k around u_k, for alpha = 0 as well. beta does change the data:
B_k moves a client's features along the all-ones direction.

``synthetic-iid`` is the paper's Synthetic-IID: one W and b ~ N(0, 1) (element-wise) for all
clients and x ~ N(0, Sigma) on every client.

Client k holds n_k = floor(exp(N(4, 2^2))) + 50 samples (the reference code's
``np.random.lognormal(4, 2).astype(int) + 50``; the paper calls the sizes a power law): at least
50, median about 105, a heavy tail (10,000 clients hold about 4.5 million samples, the largest
client tens of thousands). Its first ``int(0.9 n_k)`` samples are its training part and the rest
its test part (the code's 90/10 split per client). The training pool and the held-out test split
are all clients' parts in client order; the client of every sample is recorded (``train_nodes``
/ ``test_nodes``), so partitioner ``dataset-nodes`` gives each client its natural partition.
The number of clients is run-config ``sim-nodes``.

Where this departs from the reference code (litian96/FedProx,
``data/synthetic_*/generate_*.py``), and why:

* alpha and beta are standard deviations, as the code's ``np.random.normal(0, alpha)``; the
  paper writes N(0, alpha), which reads as a variance. The two agree for alpha, beta in {0, 1}.
* Every client draws from its own stream, ``SeedSequence(seed, spawn_key=(k,))``, in the order
  n_k, u_k, B_k, v_k, W_k, b_k, features (the IID set: n_k, features; W and b from the stream
  ``SeedSequence(seed)``). So client k's data do not depend on how many clients there are, and
  the code's unseeded draws are not reproduced.
* x = v_k + sqrt(diag(Sigma)) z with z ~ N(0, I) in float32: the distribution of the code's
  ``multivariate_normal`` (Sigma is diagonal) without its (n, d, d) work. Labels are computed
  from the stored float32 features (in float64), so they are exactly argmax(x W_k + b_k) of x.
* No shuffle before the 90/10 split: a client's samples are i.i.d., so its first 90 % is as
  random a subset as a shuffled 90 %.
* Features are not standardised (the code feeds them raw to logistic regression); flowerbed's
  other data sets are.

Generation is one pass per client of vectorised numpy writing into preallocated float32 arrays:
memory is the data set itself (256 bytes per sample: 60 float32 features, an int64 label and
node) plus one client's temporaries; 10,000 clients (4.3 million samples) take about 10 s on one
core here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..settings import Setting
from .array_cache import Allocate, build_progress

# the version of the generator: bump it when the same seed gives other arrays (cached sets of an
# older version are then not read)
FORMAT = 1
NUM_FEATURES = 60
NUM_CLASSES = 10
SIZE_LOG_MEAN, SIZE_LOG_STD = 4.0, 2.0  # n_k - 50 ~ floor(lognormal(4, 2))
MIN_SAMPLES = 50
TRAIN_FRACTION = 0.9
COVARIANCE_EXPONENT = -1.2

SETTINGS = (
    Setting(
        "synthetic-alpha",
        1.0,
        "synthetic: model heterogeneity alpha, u_k ~ N(0, alpha^2) and W_k, b_k ~ N(u_k, 1)"
        " (FedProx paper's Synthetic(alpha, beta); clients = `sim-nodes`). u_k adds the same"
        " number to all ten logits, so alpha changes no label (same seed, same data)",
        low=0,
    ),
    Setting(
        "synthetic-beta",
        1.0,
        "synthetic: data heterogeneity beta, B_k ~ N(0, beta^2), feature means v_k ~ N(B_k, 1)",
        low=0,
    ),
)


# How the FedProx paper trains on these sets (its code's run_fedprox.sh): every client its own
# natural partition, multinomial logistic regression, plain SGD at 0.01 with batches of 10.
PAPER_TRAINING = {
    "dataset": "synthetic",
    "partitioner": "dataset-nodes",
    "model": "logreg",
    "optimizer": "sgd",
    "momentum": 0.0,
    "learning-rate": 0.01,
    "batch-size": 10,
}


def feature_variances(num_features: int = NUM_FEATURES) -> np.ndarray:
    """The diagonal of Sigma: j^(-1.2) for j = 1 ... d."""
    return np.arange(1, num_features + 1, dtype=np.float64) ** COVARIANCE_EXPONENT


def client_stream(seed: int, client: int) -> np.random.Generator:
    """Client ``client``'s own random stream (independent of the number of clients)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(client,)))


def draw_size(rng: np.random.Generator) -> int:
    """n_k = floor(lognormal(4, 2)) + 50, the reference code's sample count of a client."""
    return int(rng.lognormal(SIZE_LOG_MEAN, SIZE_LOG_STD)) + MIN_SAMPLES


def client_sizes(seed: int, num_clients: int) -> np.ndarray:
    """n_k of every client (its stream's first draw), without generating any data."""
    return np.array([draw_size(client_stream(seed, k)) for k in range(num_clients)])


def train_size(num_samples: int) -> int:
    """A client's training part: ``int(0.9 n)`` samples, the rest is its test part."""
    return int(TRAIN_FRACTION * num_samples)


@dataclass(frozen=True)
class SyntheticFederation:
    """Synthetic(alpha, beta) (or Synthetic-IID) with the parameters it was drawn from.

    Rows of ``x_train``/``y_train`` are the clients' training parts in client order
    (``train_nodes`` says whose), likewise for the test split. For the IID set ``u`` and ``B``
    are zero, ``means`` zero and every client's ``weights``/``biases`` the same.
    """

    x_train: np.ndarray  # (sum of training parts, 60) float32
    y_train: np.ndarray  # int64
    x_test: np.ndarray
    y_test: np.ndarray
    train_nodes: np.ndarray  # int64, the client of every training row
    test_nodes: np.ndarray
    sizes: np.ndarray  # (clients,) n_k
    u: np.ndarray  # (clients,) the mean of client k's model entries
    B: np.ndarray  # (clients,) the mean of client k's feature means
    means: np.ndarray  # (clients, 60) v_k
    weights: np.ndarray  # (clients, 60, 10) W_k
    biases: np.ndarray  # (clients, 10) b_k


def in_memory(name: str, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """The default ``allocate``: an array in this process's memory."""
    return np.empty(shape, dtype=dtype)


def generate_synthetic(
    seed: int,
    num_clients: int,
    alpha: float = 1.0,
    beta: float = 1.0,
    iid: bool = False,
    allocate: Allocate = in_memory,
) -> SyntheticFederation:
    """Synthetic(alpha, beta), or Synthetic-IID with ``iid=True`` (alpha, beta ignored).

    ``allocate(name, shape, dtype)`` gives the arrays the rows are written into (``x_train``,
    ``y_train``, ``x_test``, ``y_test``, ``train_nodes``, ``test_nodes``): memory by default;
    a file-backed ``np.lib.format.open_memmap`` writes the set once into files that every
    process can map (one copy in memory instead of one per process).
    """
    if num_clients < 1:
        raise ValueError(f"the synthetic data set needs at least one client, got {num_clients}")
    if alpha < 0 or beta < 0:
        raise ValueError(f"synthetic alpha and beta must be >= 0, got alpha={alpha}, beta={beta}")
    d, c = NUM_FEATURES, NUM_CLASSES
    streams = [client_stream(seed, k) for k in range(num_clients)]
    sizes = np.array([draw_size(rng) for rng in streams], dtype=np.int64)
    train_sizes = np.array([train_size(n) for n in sizes], dtype=np.int64)
    test_sizes = sizes - train_sizes
    num_train, num_test = int(train_sizes.sum()), int(test_sizes.sum())
    x_train = allocate("x_train", (num_train, d), np.float32)
    x_test = allocate("x_test", (num_test, d), np.float32)
    y_train = allocate("y_train", (num_train,), np.int64)
    y_test = allocate("y_test", (num_test,), np.int64)
    clients = np.arange(num_clients)
    train_nodes = allocate("train_nodes", (num_train,), np.int64)
    test_nodes = allocate("test_nodes", (num_test,), np.int64)
    train_nodes[:] = np.repeat(clients, train_sizes)
    test_nodes[:] = np.repeat(clients, test_sizes)
    u, B = np.zeros(num_clients), np.zeros(num_clients)
    means = np.zeros((num_clients, d))
    weights, biases = np.empty((num_clients, d, c)), np.empty((num_clients, c))
    if iid:
        shared = np.random.default_rng(np.random.SeedSequence(seed))
        weights[:] = shared.normal(0.0, 1.0, (d, c))
        biases[:] = shared.normal(0.0, 1.0, c)
    scale = np.sqrt(feature_variances(d)).astype(np.float32)
    train_start = np.concatenate([[0], np.cumsum(train_sizes)])
    test_start = np.concatenate([[0], np.cumsum(test_sizes)])
    for k, rng in enumerate(streams):
        if not iid:
            u[k] = rng.normal(0.0, alpha)
            B[k] = rng.normal(0.0, beta)
            means[k] = rng.normal(B[k], 1.0, d)
            weights[k] = rng.normal(u[k], 1.0, (d, c))
            biases[k] = rng.normal(u[k], 1.0, c)
        x = rng.standard_normal((sizes[k], d), dtype=np.float32)
        x *= scale
        x += means[k].astype(np.float32)
        y = np.argmax(x.astype(np.float64) @ weights[k] + biases[k], axis=1)
        cut = train_sizes[k]
        x_train[train_start[k] : train_start[k + 1]] = x[:cut]
        y_train[train_start[k] : train_start[k + 1]] = y[:cut]
        x_test[test_start[k] : test_start[k + 1]] = x[cut:]
        y_test[test_start[k] : test_start[k + 1]] = y[cut:]
        build_progress(k + 1, num_clients, "clients")  # a cache build's progress lines
    return SyntheticFederation(
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        train_nodes=train_nodes,
        test_nodes=test_nodes,
        sizes=sizes,
        u=u,
        B=B,
        means=means,
        weights=weights,
        biases=biases,
    )
