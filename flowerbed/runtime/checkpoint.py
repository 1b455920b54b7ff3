"""The server's checkpoint of an FL-rounds run: what a resumed run needs to go on exactly.

``<run-dir>/checkpoint/server.pt`` is rewritten atomically (``results.atomic_write``) at the
end of every round, after the round's history row is written. It holds:

* ``round``: the last finished round r (0: the initial model only);
* ``arrays``: the global model after round r (what Flower's loop hands to round r + 1);
* ``strategy``: the data attributes of the strategy object (``strategy_state``), e.g.
  SCAFFOLD's c, FedDyn's h, Flower's FedAdam ``m_t``/``v_t``/``current_arrays``, FedAvgM's
  ``momentum_vector``: everything a server rule keeps from one round to the next;
* ``rng``: Python's ``random`` state (Flower samples clients with it), numpy's and torch's
  global states (CUDA's too when this process initialised CUDA);
* ``history``, ``failed_rounds``: the history rows so far (with their seconds, so that
  ``timings.csv`` continues) and the count of rounds in which no client succeeded;
* ``best_accuracy``: the best-round bookkeeping of ``model_best.pt``;
* ``versions``: flwr, torch, numpy and flowerbed of the process that wrote it (``runtime.resume``
  warns about another minor or patch version and refuses another major one);
* ``run_id``, ``config_digest``, ``run_config``: whose run it is (the ``run-id`` of the run
  folder's ``config.json``) and a SHA-256 digest of that ``config.json`` less the keys a
  resume may change (``runtime.resume.checkpoint_stamp``), with the digested items, so that
  a resume can name what differs; a checkpoint of another run, or of another config, is refused.

``format`` numbers the layout (``FORMAT``; format 1 had no identity); a file of another format
is ``OtherFormat``, read anyway only when asked (run-config ``resume-any-version``).

Everything is stored as tensors and plain Python values (``encode``), so the file is read with
``torch.load(weights_only=True)``: reading a checkpoint runs no pickled code.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord

from ..core.results import atomic_write

CHECKPOINT_DIR = "checkpoint"
SERVER_FILE = "server.pt"
FORMAT = 2  # bump when the layout below changes (1: without run_id, config_digest, run_config)


def checkpoint_path(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / SERVER_FILE


def versions() -> dict[str, str]:
    """The versions whose change could change a run's numbers."""
    return {
        name: importlib.metadata.version(name) for name in ("flwr", "torch", "numpy", "flowerbed")
    }


# --- values as tensors and plain Python --------------------------------------------------------
# A tagged value is a one-key dict {tag: payload}; every other dict, list and tuple is walked.
NDARRAY, NUMPY_SCALAR, ARRAY_RECORD, FROZENSET = (
    "__ndarray__",
    "__numpy_scalar__",
    "__arrayrecord__",
    "__frozenset__",
)
PLAIN = (type(None), bool, int, float, str, torch.Tensor)


class NotData(TypeError):
    """A value that is not data (a function, an object): it cannot be checkpointed."""


def encode(value: Any) -> Any:
    """``value`` with numpy arrays and ArrayRecords turned into tagged tensors (``NotData`` for
    anything that is not data)."""
    if isinstance(value, np.generic):
        return {NUMPY_SCALAR: torch.from_numpy(np.asarray(value).reshape(1))}
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, np.ndarray):
        return {NDARRAY: torch.from_numpy(np.ascontiguousarray(value).copy())}
    if isinstance(value, ArrayRecord):
        return {ARRAY_RECORD: {key: encode(array.numpy()) for key, array in value.items()}}
    if isinstance(value, frozenset):
        return {FROZENSET: [encode(v) for v in sorted(value)]}
    if isinstance(value, dict):
        return {key: encode(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(encode(v) for v in value)
    raise NotData(f"a {type(value).__name__} is not data")


def decode(value: Any) -> Any:
    """The inverse of ``encode``."""
    if isinstance(value, dict):
        if len(value) == 1:
            tag, payload = next(iter(value.items()))
            if tag == NDARRAY:
                return payload.numpy()
            if tag == NUMPY_SCALAR:
                return payload.numpy()[0]
            if tag == ARRAY_RECORD:
                return ArrayRecord({k: Array(decode(v)) for k, v in payload.items()})
            if tag == FROZENSET:
                return frozenset(decode(v) for v in payload)
        return {key: decode(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(decode(v) for v in value)
    return value


# --- the strategy's state ---------------------------------------------------------------------
def _rebuilt_from_config(value: Any) -> bool:
    """Functions and frozen dataclasses (QFedFisher's significance rule) hold no state of the
    run: ``build_server`` makes them again from the same run config."""
    frozen = dataclasses.is_dataclass(value) and value.__dataclass_params__.frozen
    return callable(value) or bool(frozen)


def strategy_state(strategy: Any) -> dict[str, Any]:
    """The strategy object's data attributes (``vars``), encoded.

    Generic, so that every registered strategy is covered without a list per algorithm
    (``tests/test_resume.py`` checks them all after two rounds). What carries state between
    rounds: Flower's FedAdam/FedYogi/FedAdagrad ``current_arrays``, ``m_t``, ``v_t``; FedAvgM's
    ``current_arrays`` and ``momentum_vector``; flowerbed's SCAFFOLD ``c``, FedDyn ``h``; the
    rest (``current``, ``num_clients``, ``_global``, ``round_metrics``, ``optimised``) is
    rewritten in every round before it is read, and the settings (fractions, learning rates,
    ``trainable``) equal the rebuilt strategy's; saving them too costs little and keeps the
    rule simple. Functions and frozen dataclasses are skipped (``_rebuilt_from_config``);
    any other object raises, naming the attribute, so a new kind of state cannot be lost
    silently.
    """
    state = {}
    for name, value in vars(strategy).items():
        if _rebuilt_from_config(value):
            continue
        try:
            state[name] = encode(value)
        except NotData as error:
            raise NotData(
                f"cannot checkpoint {type(strategy).__name__}.{name}: {error}; make it data"
                " (arrays, numbers, dicts, lists) or set checkpoint=false"
            ) from None
    return state


def restore_strategy_state(strategy: Any, state: dict[str, Any]) -> None:
    for name, value in state.items():
        setattr(strategy, name, decode(value))


# --- random states --------------------------------------------------------------------------
def rng_states() -> dict[str, Any]:
    states = {
        "python": random.getstate(),
        "numpy": encode(np.random.get_state()),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(decode(states["numpy"]))
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


# --- the file -------------------------------------------------------------------------------
@dataclass
class ServerCheckpoint:
    """What the server keeps after round ``round`` (see the module docstring)."""

    round: int
    arrays: ArrayRecord
    strategy: dict[str, Any]  # encoded (strategy_state)
    rng: dict[str, Any]
    history: list[dict]
    failed_rounds: int
    best_accuracy: float
    versions: dict[str, str]
    run_id: str = ""  # format 1 had none of these three
    config_digest: str = ""
    run_config: dict = dataclasses.field(default_factory=dict)


class OtherFormat(ValueError):
    """A checkpoint of another layout than ``FORMAT``."""

    def __init__(self, found: Any) -> None:
        super().__init__(f"a checkpoint of format {found!r}, this flowerbed reads format {FORMAT}")
        self.found = found


def write_checkpoint(run_dir: Path, checkpoint: ServerCheckpoint) -> None:
    content = {f.name: getattr(checkpoint, f.name) for f in dataclasses.fields(checkpoint)}
    content.update(
        format=FORMAT, arrays=encode(checkpoint.arrays), history=encode(checkpoint.history)
    )
    atomic_write(checkpoint_path(run_dir), lambda f: torch.save(content, f), binary=True)


def checkpointed_round(run_dir: Path) -> int:
    """The last round checkpointed in ``run_dir``; -1 while there is no readable checkpoint
    (for scripts and tests that watch a run)."""
    try:
        return int(read_checkpoint(run_dir).round)
    except (OSError, ValueError, RuntimeError):
        return -1


def read_checkpoint(run_dir: Path, any_format: bool = False) -> ServerCheckpoint:
    """The checkpoint of ``run_dir``; ``OtherFormat`` for another format (read as far as it
    goes with ``any_format``: the fields it lacks keep their defaults, when they have one);
    ``ValueError`` for a file that is not one."""
    content = torch.load(checkpoint_path(run_dir), weights_only=True)
    if not isinstance(content, dict) or "format" not in content:
        raise ValueError("not a flowerbed checkpoint")
    if content["format"] != FORMAT and not any_format:
        raise OtherFormat(content["format"])
    fields = dataclasses.fields(ServerCheckpoint)
    required = {
        f.name
        for f in fields
        if content["format"] == FORMAT or f.default is f.default_factory is dataclasses.MISSING
    }
    if missing := sorted(required - set(content)):
        raise ValueError(f"the checkpoint lacks {missing}")
    values = {f.name: content[f.name] for f in fields if f.name in content}
    values["arrays"] = decode(values["arrays"])
    values["history"] = decode(values["history"])
    return ServerCheckpoint(**values)
