"""Krum, MultiKrum and Bulyan: Byzantine-robust selection among the clients' models.

With n replies w_1..w_n (each client's whole state dict flattened into one vector) and f the
number of malicious clients assumed (``num-malicious-clients``):

* score(i) = sum of ||w_i - w_j||^2 over the n - f - 2 models w_j nearest to w_i (j != i).
* Krum (Blanchard et al., NeurIPS 2017, "Machine Learning with Adversaries: Byzantine
  Tolerant Gradient Descent"): x <- the model of lowest score. Needs n > 2f + 2.
* MultiKrum (same paper): x <- mean of the m models of lowest score (``multikrum-selected``);
  m = 1 is Krum. Needs n > 2f + 2 and m <= n - f.
* Bulyan (El Mhamdi et al., ICML 2018, "The Hidden Vulnerability of Distributed Learning in
  Byzantium"): select theta = n - 2f models by Krum repeatedly, then, per coordinate, the
  mean of the beta = theta - 2f selected values closest to the selected values' median.
  Needs n >= 4f + 3.

All three are Flower's own strategies (``Krum``, ``MultiKrum``, ``Bulyan``), used as they are.
How Flower implements them, where it matters:

* the distances cover every entry of the state dict: batch-norm running statistics and the
  integer ``num_batches_tracked`` counter too, and the selected models' buffers are
  aggregated like the weights;
* MultiKrum's mean is weighted by the replies' ``num-examples`` (the paper's is uniform);
  Bulyan's coordinate-wise mean is uniform;
* Bulyan's selection is one MultiKrum pass (the theta lowest scores among all n), not the
  paper's recursion (Krum, remove the pick, rescore the rest);
* the squared distances are computed as ||x||^2 + ||y||^2 - 2 x.y in the replies' dtype
  (float32 for a float model): for large models whose replies differ little, the
  cancellation makes them inaccurate (200,000 entries differing by about 1e-3 each: true
  distances 0.40, Flower's 0.03 to 0.63, a model's distance to itself not 0);
* Flower checks nothing before the run. With too few replies, Krum and MultiKrum still
  aggregate (scores over max(1, n - f - 2) neighbours; m > n selects all); Bulyan skips the
  round's aggregation (the global model stays as it was) when fewer than 4f + 3 replies
  arrive, e.g. when sampled clients fail.

``check_federation`` stops a run whose sampled clients per round (``clients_per_round``, as
Flower samples them) cannot meet these requirements, before any training.

Clients run plain local training (``fedavg.train_plain``).
"""

from __future__ import annotations

from flwr.serverapp.strategy import Bulyan, Krum, MultiKrum

from ..settings import RunConfig, Setting
from .common import StrategySpec, flower_kwargs
from .fedavg import train_plain

NUM_MALICIOUS = Setting(  # one object, declared by krum, multikrum and bulyan
    "num-malicious-clients",
    0,
    "Krum / MultiKrum / Bulyan: f, the number of malicious clients assumed among those sampled"
    " each round. Default 0 (Flower's): it runs on every federation of at least 3 sampled"
    " clients, and Krum and MultiKrum still keep the most central models, but Bulyan with f=0"
    " is the plain coordinate-wise mean; set f to the number of attackers you simulate (needs"
    " more than 2f + 2 sampled clients, at least 4f + 3 for Bulyan)",
    low=0,
)
MULTIKRUM_SELECTED = Setting(
    "multikrum-selected",
    2,
    "MultiKrum: m, the number of lowest-score models averaged (weighted by num-examples); at"
    " most n - f of the n sampled clients. Default 2: valid on every federation Krum accepts"
    " with f=0 (3 clients on), and neither Krum (m=1) nor FedAvg of all clients (m=n);"
    " the paper's m = n - f depends on the federation",
    low=1,
)
SETTINGS = (NUM_MALICIOUS, MULTIKRUM_SELECTED)


def clients_per_round(config: RunConfig, num_clients: int) -> int:
    """n, the clients Flower's FedAvg family samples for training each round out of
    ``num_clients``: int(num_clients * fraction-train), truncated as Flower does, at least
    ``min_train_nodes`` (1, ``common.flower_kwargs``)."""
    minimum = flower_kwargs(config)["min_train_nodes"]
    return max(int(num_clients * config.fraction_train), minimum)


def sampled_text(config: RunConfig, num_clients: int) -> str:
    """``fraction-train=0.5 of 10 clients samples 5 per round`` (for the messages)."""
    n = clients_per_round(config, num_clients)
    return f"fraction-train={config.fraction_train} of {num_clients} clients samples {n} per round"


def _too_few(name: str, config: RunConfig, num_clients: int, need: int, rule: str, most: int):
    """The message for n < ``need`` sampled clients (``most``: the largest valid f)."""
    f = config["num-malicious-clients"]
    lower = f"set num-malicious-clients to at most {most}, or " if most >= 0 else ""
    return (
        f"strategy={name!r} with num-malicious-clients={f} needs {rule} = {need} sampled"
        f" clients per round, and {sampled_text(config, num_clients)}: {lower}sample at least"
        f" {need} clients (more clients or a larger fraction-train)"
    )


def check_krum(config: RunConfig, num_clients: int, name: str = "krum") -> str | None:
    """Krum's n > 2f + 2 (n - f - 2 >= f + 1 neighbours in every score)."""
    n, f = clients_per_round(config, num_clients), config["num-malicious-clients"]
    if n <= 2 * f + 2:
        return _too_few(name, config, num_clients, 2 * f + 3, "at least 2f + 3", (n - 3) // 2)
    return None


def check_multikrum(config: RunConfig, num_clients: int) -> str | None:
    """Krum's n > 2f + 2, and m <= n - f (no more models averaged than honest ones)."""
    message = check_krum(config, num_clients, name="multikrum")
    if message:
        return message
    n, f = clients_per_round(config, num_clients), config["num-malicious-clients"]
    m = config["multikrum-selected"]
    if m > n - f:
        return (
            f"strategy='multikrum' with multikrum-selected={m} and num-malicious-clients={f}"
            f" averages more models than the n - f = {n - f} honest ones"
            f" ({sampled_text(config, num_clients)}): set multikrum-selected to at most {n - f}"
        )
    return None


def check_bulyan(config: RunConfig, num_clients: int) -> str | None:
    """Bulyan's n >= 4f + 3 (Flower skips the aggregation of a round with fewer replies)."""
    n, f = clients_per_round(config, num_clients), config["num-malicious-clients"]
    if n < 4 * f + 3:
        return _too_few("bulyan", config, num_clients, 4 * f + 3, "at least 4f + 3", (n - 3) // 4)
    return None


def build_krum(config: RunConfig, **kwargs) -> Krum:
    return Krum(num_malicious_nodes=config["num-malicious-clients"], **kwargs)


def build_multikrum(config: RunConfig, **kwargs) -> MultiKrum:
    return MultiKrum(
        num_malicious_nodes=config["num-malicious-clients"],
        num_nodes_to_select=config["multikrum-selected"],
        **kwargs,
    )


def build_bulyan(config: RunConfig, **kwargs) -> Bulyan:
    return Bulyan(num_malicious_nodes=config["num-malicious-clients"], **kwargs)


_BLANCHARD = "Blanchard et al., NeurIPS 2017"
ROBUST = "multi-round FL, robust aggregation"

SPECS = (
    StrategySpec(
        "krum",
        "the client model of lowest score, score = sum of squared distances to its n − f − 2"
        " nearest others, over the whole state dict (batch-norm buffers included) (Flower's `Krum`;"
        " key `num-malicious-clients` = f; needs n > 2f + 2 sampled clients)",
        _BLANCHARD,
        build_krum,
        train_plain,
        settings=(NUM_MALICIOUS,),
        check_federation=check_krum,
        kind=ROBUST,
    ),
    StrategySpec(
        "multikrum",
        "mean of the m client models of lowest Krum score, weighted by num-examples (Flower's"
        " `MultiKrum`; keys `num-malicious-clients`, `multikrum-selected` = m; needs n > 2f + 2 and"
        " m ≤ n − f)",
        _BLANCHARD,
        build_multikrum,
        train_plain,
        settings=SETTINGS,
        check_federation=check_multikrum,
        kind=ROBUST,
    ),
    StrategySpec(
        "bulyan",
        "θ = n − 2f models of lowest Krum score (one scoring pass, Flower's; the paper reruns Krum"
        " after each pick), then per coordinate the uniform mean of the β = θ − 2f values closest"
        " to their median (Flower's `Bulyan`; key `num-malicious-clients`; needs n ≥ 4f + 3)",
        "El Mhamdi et al., ICML 2018",
        build_bulyan,
        train_plain,
        settings=(NUM_MALICIOUS,),
        check_federation=check_bulyan,
        kind=ROBUST,
    ),
)
