"""Declared attacks on chosen partitions, to study the robustness of an aggregation rule.

The run-config key ``attack`` names one attack, ``attackers`` the partition ids that carry it
out (every other partition stays honest). With g the global arrays a client received in its
training message (``msg.content["arrays"]``) and w the arrays of its honest reply
(``reply.content["arrays"]``), the attackers reply instead:

* ``sign-flip``: w' = g - (w - g), the update negated. A Byzantine update in the sense of
  Blanchard et al., "Machine Learning with Adversaries: Byzantine Tolerant Gradient Descent"
  (NeurIPS 2017), and Fang et al., "Local Model Poisoning Attacks to Byzantine-Robust
  Federated Learning" (USENIX Security 2020), whose attacks push the global model against the
  direction of the honest update.
* ``scale``: w' = g + s (w - g) with s = ``attack-scale``: explicit boosting, Bhagoji et al.,
  "Analyzing Federated Learning through an Adversarial Lens" (ICML 2019), who boost by the
  number of agents (10 in their experiments, hence the default).
* ``noise``: w' = w + e, e ~ N(0, std^2) independently per entry with std =
  ``attack-noise-std``: the Gaussian Byzantine update of Blanchard et al. (above) and Fang et
  al. (above). e is drawn from a NumPy generator seeded by ``seed_for(run seed, partition id,
  round, NOISE_TAG)``, over the reply's floating-point entries in their order, so a run
  repeats exactly.
* ``free-rider``: w' = g, the global model sent back unchanged while claiming the client's
  real ``num-examples`` (the honest step runs; only its arrays are discarded): Fraboni et al.,
  "Free-rider Attacks on Model Aggregation in Federated Learning" (AISTATS 2021).
* ``inflate-examples``: the reply's ``num-examples`` metric multiplied by k =
  ``attack-inflation`` (an int), arrays untouched: the weighting exploit of sample-weighted
  averaging (FedAvg weighs a reply by the number of examples it claims; no paper is needed
  for it).
* ``label-flip`` (data poisoning): the attacker's local training labels y become C - 1 - y,
  C the number of classes, for every protocol's training of that partition; its local test
  split stays clean. Tolpegin et al., "Data Poisoning Attacks Against Federated Learning
  Systems" (ESORICS 2020). ``LocalClient.from_context`` applies ``poisoned_labels``.

The first five are model poisoning: the client mod ``attack_update`` on the ClientApp's
``train`` handler (FL rounds' training) rewrites the attacker's honest reply; a reply that is
already an error passes through untouched. They act on floating-point entries only (integer
entries such as batch norm's ``num_batches_tracked`` stay as in the honest reply), keep keys,
shapes and dtypes, and compute in float64 before casting back to each entry's dtype. They need
a strategy whose training reply is the client's trained model (``StrategySpec.replies_model``);
``catalog.parse_run_config`` refuses the others and the protocols that send no ``train``
message, and ``runtime.context.start_run`` refuses attackers that name no partition and logs a
warning naming the attack (``announce_attack``).
"""

from __future__ import annotations

from collections.abc import Mapping
from logging import WARNING
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Context, Message
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.logger import log

from ..core.seeding import seed_for
from ..settings import ConfigError, RunConfig, Setting, comma_list
from .reply_checks import refuse_without_model_reply

NO_ATTACK = "none"
LABEL_FLIP = "label-flip"
MODEL_POISONING = ("sign-flip", "scale", "noise", "free-rider", "inflate-examples")
ATTACKS = (NO_ATTACK, "sign-flip", "scale", "noise", LABEL_FLIP, "inflate-examples", "free-rider")
NOISE_TAG = 0xA77AC  # seed_for's purpose tag of the noise attack


def _check_attackers(value: str, config: RunConfig) -> str | None:
    try:
        [int(token) for token in comma_list(value)]
    except ValueError:
        return f"attackers must be partition ids separated by commas, got {value!r}"
    return None


def _check_attack(value: str, config: RunConfig) -> str | None:
    if value != NO_ATTACK and not comma_list(config.attackers):
        return (
            f"attack={value!r} needs attackers: set attackers to the partition ids that attack,"
            ' e.g. attackers="0,3" (attackers is empty)'
        )
    return None


SETTINGS = (
    Setting(
        "attack",
        NO_ATTACK,
        "declared attack of the `attackers` (robustness studies; rules and papers in"
        " `flowerbed/trust/attacks.py`): `sign-flip`, `scale`, `noise`, `label-flip`,"
        " `inflate-examples`, `free-rider`",
        choices=ATTACKS,
        check=_check_attack,
    ),
    Setting(
        "attackers",
        "",
        'partition ids that carry out `attack`, e.g. `"0,3"`',
        check=_check_attackers,
    ),
    Setting(
        "attack-scale",
        10.0,
        "factor s of `attack=scale`: reply g + s (w - g) (boosting; Bhagoji et al. boost by the"
        " number of agents, 10)",
    ),
    Setting(
        "attack-noise-std",
        1.0,
        "standard deviation of the Gaussian noise `attack=noise` adds to every float entry",
        low=0,
        low_open=True,
    ),
    Setting(
        "attack-inflation",
        10,
        "factor `attack=inflate-examples` multiplies the reply's `num-examples` by",
        low=1,
        low_open=True,
    ),
)
_SETTINGS = {setting.key: setting for setting in SETTINGS}


def _value(run_config: Mapping[str, Any], key: str):
    """``key`` of a raw or parsed run config, typed, its default if absent."""
    setting = _SETTINGS[key]
    return setting.coerce(run_config.get(key, setting.default))


def attacker_ids(run_config: Mapping[str, Any]) -> frozenset[int]:
    """The partition ids of ``attackers`` (raw or parsed run config)."""
    return frozenset(int(token) for token in comma_list(run_config.get("attackers", "")))


def attack_of(run_config: Mapping[str, Any], partition_id: int) -> str:
    """The attack this partition carries out (``none`` for an honest one)."""
    attack = _value(run_config, "attack")
    return attack if partition_id in attacker_ids(run_config) else NO_ATTACK


# --- the server's check and warning ---------------------------------------------------------


def describe_attack(config: Mapping[str, Any]) -> str:
    """``attack='scale' (attack-scale=10.0) by partitions [0, 3]``."""
    attack = _value(config, "attack")
    parameter = {
        "scale": "attack-scale",
        "noise": "attack-noise-std",
        "inflate-examples": "attack-inflation",
    }.get(attack)
    detail = f" ({parameter}={_value(config, parameter)})" if parameter else ""
    return f"attack={attack!r}{detail} by partitions {sorted(attacker_ids(config))}"


def check_model_poisoning(config: RunConfig, strategies: Mapping[str, Any]) -> None:
    """A model-poisoning attack acts on the update a client replies to FL rounds' ``train``
    messages (its trained model minus the global model): refuse protocols that send none and
    strategies whose reply is no model (``strategies``: the FL strategies' specs by name)."""
    if config.attack in MODEL_POISONING:
        also = f"; or attack='{LABEL_FLIP}', which every protocol allows"
        refuse_without_model_reply(f"attack={config.attack!r}", config.strategy, strategies, also)


def announce_attack(config: RunConfig, num_partitions: int) -> None:
    """Refuse attackers that name no partition; log one WARNING naming the run's attack."""
    missing = sorted(attacker_ids(config) - set(range(num_partitions)))
    if missing:
        raise ConfigError(
            f"attackers={config.attackers!r} names partitions {missing} that do not exist;"
            f" valid ids: 0 to {num_partitions - 1}"
        )
    if config.attack != NO_ATTACK:
        log(WARNING, "flowerbed: this run is attacked on purpose: %s", describe_attack(config))


# --- data poisoning -------------------------------------------------------------------------


def flip_labels(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """y -> C - 1 - y (a new tensor; the cached labels stay as they are)."""
    return (num_classes - 1) - labels


def poisoned_labels(
    config: RunConfig, partition_id: int, labels: torch.Tensor, num_classes: int
) -> torch.Tensor:
    """A partition's local training labels: flipped for a ``label-flip`` attacker."""
    if attack_of(config, partition_id) != LABEL_FLIP:
        return labels
    return flip_labels(labels, num_classes)


# --- model poisoning: the client mod ---------------------------------------------------------


def _server_round(msg: Message) -> int:
    config = msg.content.config_records.get("config")
    return int(config.get("server-round", 0)) if config is not None else 0


def _is_float(values: np.ndarray) -> bool:
    return np.issubdtype(values.dtype, np.floating)


def poisoned_arrays(
    attack: str,
    sent: Mapping[str, np.ndarray],
    honest: Mapping[str, np.ndarray],
    *,
    scale: float = 1.0,
    noise: np.random.Generator | None = None,
    noise_std: float = 0.0,
) -> dict[str, np.ndarray]:
    """The arrays an attacker replies (module docstring), from the global arrays ``sent``
    and the honest reply's ``honest``; integer entries and every key, shape, dtype kept."""
    out = {}
    for key, w in honest.items():
        if not _is_float(w):
            out[key] = w
            continue
        if attack != "noise" and (key not in sent or np.shape(sent[key]) != np.shape(w)):
            raise ValueError(
                f"attack={attack!r}: the reply's entry {key!r} has no counterpart of shape"
                f" {np.shape(w)} in the global arrays received"
            )
        w64 = w.astype(np.float64)
        if attack == "noise":
            new = w64 + noise.normal(0.0, noise_std, size=w.shape)
        else:
            g64 = np.asarray(sent[key]).astype(np.float64)
            if attack == "sign-flip":
                new = g64 - (w64 - g64)
            elif attack == "scale":
                new = g64 + scale * (w64 - g64)
            elif attack == "free-rider":
                new = g64
            else:
                raise ValueError(f"attack {attack!r} does not change arrays")
        out[key] = np.array(new.astype(w.dtype), order="C")  # keeps 0-d entries
    return out


def noise_generator(run_config: Mapping[str, Any], partition_id: int, server_round: int):
    """The noise attack's generator: seeded by (run seed, partition id, round, NOISE_TAG)."""
    seed = int(run_config["seed"])
    return np.random.default_rng(seed_for(seed, partition_id, server_round, NOISE_TAG))


def attack_update(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """The model-poisoning attacks (module docstring) on an attacker's training reply."""
    partition_id = int(context.node_config["partition-id"])
    run_config = context.run_config
    attack = attack_of(run_config, partition_id)
    if attack not in MODEL_POISONING:
        return call_next(msg, context)
    sent = {}  # g, read before the handler runs (noise and inflate-examples need none)
    if attack in ("sign-flip", "scale", "free-rider"):
        sent = {key: array.numpy() for key, array in msg.content["arrays"].items()}
    reply = call_next(msg, context)
    if reply.has_error():
        return reply
    if attack == "inflate-examples":
        metrics = reply.content["metrics"]
        metrics["num-examples"] = int(metrics["num-examples"]) * _value(
            run_config, "attack-inflation"
        )
        return reply
    honest = {key: array.numpy() for key, array in reply.content["arrays"].items()}
    noise = None
    if attack == "noise":
        noise = noise_generator(run_config, partition_id, _server_round(msg))
    arrays = poisoned_arrays(
        attack,
        sent,
        honest,
        scale=_value(run_config, "attack-scale"),
        noise=noise,
        noise_std=_value(run_config, "attack-noise-std"),
    )
    reply.content["arrays"] = ArrayRecord({key: Array(value) for key, value in arrays.items()})
    return reply
