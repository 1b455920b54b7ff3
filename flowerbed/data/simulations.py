"""Generated data sets, seeded by the run's ``seed``: the CTL paper's two simulations and the
FedProx paper's synthetic sets. The CTL paper's (Casey et al., "Distributed Collaborative
Learning with Representative Knowledge Sharing", Mathematics 2025) are below; the FedProx
paper's ``synthetic`` / ``synthetic-iid`` (``fedprox_synthetic``) are registered here:
``sim-nodes`` clients, each its own node.

* ``breast-cancer-shifted`` (Simulation 1, Sec. 4.1): ``sim-shifts`` shifted copies of
  scikit-learn's breast cancer data (569 x 30). Copy s moves feature j by c_{s,j} sigma_j, with
  c_{s,j} ~ N(0, 2^2) truncated to [-5, 5] (drawn once per copy and feature) and sigma_j the
  feature's standard deviation, plus noise N(0, 0.01) sigma_j per element (the authors' code:
  variance 0.01, times sigma_j). Labels are Bernoulli draws from the probability of a
  ``LogisticRegression`` (scikit-learn defaults) fitted on the standardised original data. A
  random (not stratified) 20 % of all rows is the held-out test split, as in the code. The
  authors' per-row Python loops are vectorised: the draws come in another order, so a seed here
  does not reproduce a seed of theirs.
* ``ctl-gaussian`` (Simulation 2, Sec. 4.2): ``sim-nodes`` nodes with their own nodes' data.
  theta in R^30, theta_j ~ U(1, 2) with a random sign, scaled to norm 3. Node k: mean
  mu_{k,j} ~ U(-1, 1) * spread, features X ~ N(mu_k, dispersion^2 S) (S: 1 on the diagonal,
  0.5 elsewhere), label model theta_{k,j} = theta_j + |theta_j| p_j dispersion / 10 with
  p_j ~ N(0, 1), labels Y ~ Bernoulli(sigmoid(theta_k^T x)) (no intercept, as the paper's
  text). ``SimulationOptions(label_intercept=True)`` (no run-config key: a benchmark variant)
  draws the label model as the authors' code does instead: theta in R^31, its last component
  the coefficient of a constant 1 (an intercept), drawn, normalised (all 31 to norm 3) and
  perturbed per node like the others. Each node holds
  ``sim-samples-per-node`` samples, 20 % of them held out as its test part; the node of every
  sample is recorded (partitioner ``dataset-nodes`` gives each client one node).

Every draw of the CTL sets comes from one ``np.random.default_rng(seed)``: the same seed gives
the same arrays. Features are float32 (N, 30) in raw units (the loader standardises them with
training statistics, like every data set), labels int64 in {0, 1}.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from ..settings import RunConfig, Setting
from .array_cache import Allocate, arrays_folder, cached_arrays
from .fedprox_synthetic import FORMAT as SYNTHETIC_FORMAT
from .fedprox_synthetic import SETTINGS as SYNTHETIC_SETTINGS
from .fedprox_synthetic import generate_synthetic

FEDPROX_DATASETS = ("synthetic", "synthetic-iid")
GENERATED_DATASETS = ("breast-cancer-shifted", "ctl-gaussian", *FEDPROX_DATASETS)
# generated sets that come with their own nodes
NODE_DATASETS = ("ctl-gaussian", *FEDPROX_DATASETS)
TEST_FRACTION = 0.2
NUM_FEATURES = 30  # ctl-gaussian; breast cancer has 30 features too
MAX_GAUSSIAN_ROWS = 2_000_000
MAX_NODES = 100_000


@dataclass(frozen=True)
class SimulationOptions:
    """The ``sim-*`` and ``synthetic-*`` run-config keys; ``for_dataset`` keeps only those a
    data set reads."""

    shifts: int = 300
    nodes: int = 10
    spread: float = 3.0
    dispersion: float = 0.5
    samples_per_node: int = 500
    alpha: float = 1.0
    beta: float = 1.0
    label_intercept: bool = False  # ctl-gaussian: the authors' label model (module docstring)

    @classmethod
    def from_config(cls, config: RunConfig) -> SimulationOptions:
        """The options of a run config."""
        return cls(
            shifts=config.sim_shifts,
            nodes=config.sim_nodes,
            spread=config.sim_spread,
            dispersion=config.sim_dispersion,
            samples_per_node=config.sim_samples_per_node,
            alpha=config.synthetic_alpha,
            beta=config.synthetic_beta,
        )

    def for_dataset(self, name: str) -> SimulationOptions:
        """These options with the keys ``name`` does not read set to their defaults (a cache
        key: changing ``sim-spread`` does not regenerate ``breast-cancer-shifted``)."""
        used = {
            "breast-cancer-shifted": ("shifts",),
            "ctl-gaussian": (
                "nodes",
                "spread",
                "dispersion",
                "samples_per_node",
                "label_intercept",
            ),
            "synthetic": ("nodes", "alpha", "beta"),
            "synthetic-iid": ("nodes",),
        }.get(name, ())
        default = SimulationOptions()
        return replace(
            self,
            **{f.name: getattr(default, f.name) for f in fields(self) if f.name not in used},
        )


def _rows_check(value: int, config) -> str | None:
    rows = value * int(config["sim-nodes"])
    if config["dataset"] == "ctl-gaussian" and rows > MAX_GAUSSIAN_ROWS:
        return (
            f"sim-samples-per-node={value} x sim-nodes={config['sim-nodes']} = {rows} samples;"
            f" ctl-gaussian allows at most {MAX_GAUSSIAN_ROWS}"
        )
    return None


_DEFAULT = SimulationOptions()
SETTINGS = (
    Setting(
        "sim-shifts",
        _DEFAULT.shifts,
        "breast-cancer-shifted: shifted copies of the 569 samples (CTL paper, Simulation 1)",
        low=1,
        high=3000,
    ),
    Setting(
        "sim-nodes",
        _DEFAULT.nodes,
        "ctl-gaussian, synthetic, synthetic-iid: nodes (clients), each with its own data"
        " (`partitioner='dataset-nodes'` needs this many SuperNodes); ctl-gaussian: each with"
        " its own feature mean and label model (CTL paper, Simulation 2)",
        low=1,
        high=MAX_NODES,
    ),
    Setting(
        "sim-spread",
        _DEFAULT.spread,
        "ctl-gaussian: node means mu_kj ~ U(-1, 1) x spread",
        low=0,
    ),
    Setting(
        "sim-dispersion",
        _DEFAULT.dispersion,
        "ctl-gaussian: features ~ N(mu_k, dispersion^2 S), S = 1 on the diagonal, 0.5 elsewhere;"
        " node label models theta_kj = theta_j + abs(theta_j) N(0, 1) dispersion / 10",
        low=0,
    ),
    Setting(
        "sim-samples-per-node",
        _DEFAULT.samples_per_node,
        "ctl-gaussian: samples per node, 20 % of them held out as the node's test part",
        low=5,
        check=_rows_check,
    ),
    *SYNTHETIC_SETTINGS,
)


@dataclass(frozen=True)
class Generated:
    """A generated data set before standardisation; ``*_nodes``: the node of every sample."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    train_nodes: np.ndarray | None = None
    test_nodes: np.ndarray | None = None
    standardise: bool = True  # False: the loader keeps the features as generated


def generate(
    name: str, seed: int, options: SimulationOptions = _DEFAULT, cache_dir: Path | None = None
) -> Generated:
    """The generated data set ``name`` for the run seed ``seed``. With ``cache_dir`` the FedProx
    sets are written there once and memory-mapped (``array_cache``): every process of a run then
    shares one copy (1.1 GB at 10,000 clients) instead of generating its own."""
    if name == "breast-cancer-shifted":
        return breast_cancer_shifted(seed, options.shifts)
    if name == "ctl-gaussian":
        return ctl_gaussian(
            seed,
            options.nodes,
            options.spread,
            options.dispersion,
            options.samples_per_node,
            label_intercept=options.label_intercept,
        )
    if name in FEDPROX_DATASETS:
        iid = name == "synthetic-iid"
        if cache_dir is None:
            data = vars(generate_synthetic(seed, options.nodes, options.alpha, options.beta, iid))
        else:
            data = _shared_synthetic(name, seed, options, cache_dir)
        return Generated(
            *(data[split] for split in ("x_train", "y_train", "x_test", "y_test")),
            data["train_nodes"],
            data["test_nodes"],
            standardise=False,  # raw, as the FedProx code feeds them to logistic regression
        )
    raise ValueError(
        f"unknown generated dataset {name!r}; valid choices: {', '.join(GENERATED_DATASETS)}"
    )


# --- Simulation 1 ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def label_model():
    """(x, y, scaler, model): breast cancer and the labelling model fitted on it (no seed)."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    bunch = load_breast_cancer()
    x, y = bunch.data, bunch.target
    scaler = StandardScaler().fit(x)
    model = LogisticRegression().fit(scaler.transform(x), y)
    return x, y, scaler, model


@dataclass(frozen=True)
class ShiftedCopies:
    """All copies of Simulation 1 before the split: rows of copy s are s*569 ... s*569 + 568."""

    x: np.ndarray  # (shifts * 569, 30), float64
    y: np.ndarray  # (shifts * 569,), int64
    shifts: np.ndarray  # (shifts, 30): c_{s,j}, in units of sigma_j


def shifted_copies(rng: np.random.Generator, num_shifts: int) -> ShiftedCopies:
    """Draw the copies from ``rng``: shifts c, then noise, then the labels' uniforms."""
    from scipy.stats import truncnorm

    x, _, scaler, model = label_model()
    sigma = x.std(axis=0)  # ddof 0, as np.std in the authors' code
    loc, scale, bound = 0.0, 2.0, 5.0
    shifts = truncnorm.rvs(
        (-bound - loc) / scale,
        (bound - loc) / scale,
        loc=loc,
        scale=scale,
        size=(num_shifts, x.shape[1]),
        random_state=rng,
    )
    noise = rng.normal(0.0, np.sqrt(0.01), size=(num_shifts, *x.shape))
    copies = (x[None] + (shifts[:, None, :] + noise) * sigma).reshape(-1, x.shape[1])
    probability = model.predict_proba(scaler.transform(copies))[:, 1]
    labels = (rng.random(len(copies)) < probability).astype(np.int64)
    return ShiftedCopies(copies, labels, shifts)


def breast_cancer_shifted(seed: int, num_shifts: int = _DEFAULT.shifts) -> Generated:
    """Simulation 1: shifted copies, then a random 80/20 split (the test rows drawn last)."""
    rng = np.random.default_rng(seed)
    data = shifted_copies(rng, num_shifts)
    test = rng.choice(len(data.y), size=int(TEST_FRACTION * len(data.y)), replace=False)
    train = np.delete(np.arange(len(data.y)), test)
    x = data.x.astype(np.float32)
    return Generated(x[train], data.y[train], x[test], data.y[test])


# --- Simulation 2 ----------------------------------------------------------------------------
@dataclass(frozen=True)
class GaussianNodes:
    """All samples of Simulation 2 before the split, by node, with the parameters drawn."""

    x: np.ndarray  # (nodes, samples, 30), float64
    y: np.ndarray  # (nodes, samples), int64
    theta: np.ndarray  # (30,): the common label model, norm 3 (31: the intercept last)
    node_theta: np.ndarray  # (nodes, 30): theta_k (31: the intercept last)
    means: np.ndarray  # (nodes, 30): mu_k
    covariance: np.ndarray  # (30, 30): dispersion^2 S


def gaussian_nodes(
    rng: np.random.Generator,
    num_nodes: int,
    spread: float,
    dispersion: float,
    samples_per_node: int,
    num_features: int = NUM_FEATURES,
    label_intercept: bool = False,
) -> GaussianNodes:
    """Draw from ``rng``: theta, node means, features, node label models, label uniforms.
    ``label_intercept``: theta has one more component, the coefficient of a constant 1, as in
    the authors' code (their ``beta`` of size p + 1 and the column of ones appended to the
    features); their probability 1 / (1 + exp(score)) flips the sign of the whole score, which
    the random signs make equal in distribution, so it is not copied."""
    d = num_features
    size = d + 1 if label_intercept else d
    theta = rng.uniform(1.0, 2.0, size) * np.where(rng.random(size) < 0.5, -1.0, 1.0)
    theta *= 3.0 / np.linalg.norm(theta)
    means = rng.uniform(-1.0, 1.0, (num_nodes, d)) * spread
    shape = np.full((d, d), 0.5) + 0.5 * np.eye(d)  # S
    root = np.linalg.cholesky(shape)
    z = rng.standard_normal((num_nodes, samples_per_node, d))
    x = means[:, None, :] + dispersion * z @ root.T
    node_theta = theta + np.abs(theta) * rng.standard_normal((num_nodes, size)) * dispersion / 10
    logits = np.einsum("kid,kd->ki", x, node_theta[:, :d])
    if label_intercept:
        logits += node_theta[:, d:]
    y = (rng.random(logits.shape) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
    return GaussianNodes(x, y, theta, node_theta, means, dispersion**2 * shape)


def node_test_size(samples_per_node: int) -> int:
    """Held-out samples of one node (20 %, at least one)."""
    return max(1, round(TEST_FRACTION * samples_per_node))


def ctl_gaussian(
    seed: int,
    num_nodes: int = _DEFAULT.nodes,
    spread: float = _DEFAULT.spread,
    dispersion: float = _DEFAULT.dispersion,
    samples_per_node: int = _DEFAULT.samples_per_node,
    label_intercept: bool = False,
) -> Generated:
    """Simulation 2; training and test rows ordered by node, each node's rows in random order
    (``label_intercept``: the authors' label model, ``gaussian_nodes``)."""
    rng = np.random.default_rng(seed)
    data = gaussian_nodes(
        rng, num_nodes, spread, dispersion, samples_per_node, label_intercept=label_intercept
    )
    order = rng.permuted(np.tile(np.arange(samples_per_node), (num_nodes, 1)), axis=1)
    num_test = node_test_size(samples_per_node)
    rows = np.arange(num_nodes)[:, None]
    test, train = order[:, :num_test], order[:, num_test:]
    nodes = np.repeat(np.arange(num_nodes), samples_per_node)

    def take(columns: np.ndarray):
        flat = (rows * samples_per_node + columns).reshape(-1)
        x = data.x.reshape(-1, data.x.shape[-1])[flat].astype(np.float32)
        return x, data.y.reshape(-1)[flat], nodes[flat]

    x_train, y_train, train_nodes = take(train)
    x_test, y_test, test_nodes = take(test)
    return Generated(x_train, y_train, x_test, y_test, train_nodes, test_nodes)


def _synthetic_identity(name: str, seed: int, options: SimulationOptions) -> dict:
    """What determines a FedProx set's arrays (its cache entry's identity)."""
    return {
        "generator": f"{name} {SYNTHETIC_FORMAT}",
        "seed": seed,
        "clients": options.nodes,
        **({} if name == "synthetic-iid" else {"alpha": options.alpha, "beta": options.beta}),
    }


def synthetic_cache_folder(
    name: str, seed: int, options: SimulationOptions, cache_dir: Path
) -> Path:
    """The cache folder of a FedProx set (``_shared_synthetic``): there once it was built."""
    return arrays_folder(
        cache_dir, f"{name}-{options.nodes}", _synthetic_identity(name, seed, options)
    )


def _shared_synthetic(
    name: str, seed: int, options: SimulationOptions, cache_dir: Path
) -> dict[str, np.ndarray]:
    """The rows of a FedProx set, generated straight into the cache's files on first use."""
    identity = _synthetic_identity(name, seed, options)

    def build(allocate: Allocate) -> None:
        generate_synthetic(
            seed,
            options.nodes,
            options.alpha,
            options.beta,
            iid=name == "synthetic-iid",
            allocate=allocate,
        )

    return cached_arrays(cache_dir, f"{name}-{options.nodes}", identity, build)
