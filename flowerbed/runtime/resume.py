"""Run-config ``resume``: go on with an interrupted run, in its own folder.

``resume=<run folder>`` (``""``: a new run) is checked before anything is loaded or written;
each refusal is one ``ConfigError`` line naming the folder:

* the folder must exist and hold ``config.json`` and a readable server checkpoint
  (``runtime.checkpoint``; written atomically, so a checkpoint that exists is complete);
* a run whose ``status.json`` says ``completed`` has nothing to resume;
* the checkpoint's flwr, torch, numpy and flowerbed versions must be this process's;
* the run config must equal the folder's ``config.json`` except for ``RESUME_FREE_KEYS``:
  ``resume`` itself, ``output-dir`` and ``run-name`` (which only name a new run's folder:
  a resumed run goes on in the ``resume`` folder) and ``wait-timeout`` (how long to wait for
  the nodes to connect). Every other key can change the numbers, so a difference names the
  keys. ``checkpoint`` stays ``true``: the clients find their saved state through the run
  folder that checkpointing messages carry.

The federation's size is checked after the handshake (``runtime.context``): a resumed run
needs the partitions the run had.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from ..settings import ConfigError, RunConfig, Setting
from .checkpoint import ServerCheckpoint, checkpoint_path, read_checkpoint, versions
from .results import as_written

SETTINGS = (
    Setting(
        "resume",
        "",
        "a run folder to resume (FL-rounds protocols): the run goes on in that folder from its"
        ' last checkpoint and ends with the history an uninterrupted run writes; `""`: a new'
        " run. See [Resume](#resume)",
    ),
)
RESUME_FREE_KEYS = ("resume", "output-dir", "run-name", "wait-timeout")
FEDERATION_KEY = "num-partitions"  # written by start_run beside the run config


class ResumePoint(NamedTuple):
    folder: Path  # the run folder, which the resumed run goes on writing
    checkpoint: ServerCheckpoint
    stored_config: dict  # its config.json (with the federation size)


def resume_folder(config: RunConfig) -> Path | None:
    """The folder of ``resume``, or ``None`` for a new run."""
    return Path(str(config.resume)).expanduser().resolve() if config.resume else None


def differing_keys(stored: dict, config: RunConfig) -> list[str]:
    """Keys whose value in the folder's ``config.json`` differs from ``config`` (JSON values,
    as both were written), ``RESUME_FREE_KEYS`` and the federation size aside."""
    given = as_written(config.to_dict())
    keys = (set(stored) | set(given)) - set(RESUME_FREE_KEYS) - {FEDERATION_KEY}
    return sorted(key for key in keys if stored.get(key) != given.get(key))


def open_resume(config: RunConfig) -> ResumePoint:
    """The folder, checkpoint and stored config of ``resume`` (module docstring: every check,
    one ``ConfigError`` line each)."""
    folder = resume_folder(config)
    where = f"resume={str(config.resume)!r}"
    if folder is None or not folder.is_dir():
        raise ConfigError(f"{where}: no such run folder")
    status = _read_json(folder / "status.json", where).get("status")
    if status == "completed":
        raise ConfigError(f"{where}: that run completed; there is nothing to resume")
    if not checkpoint_path(folder).is_file():
        raise ConfigError(
            f"{where}: the folder holds no checkpoint ({checkpoint_path(folder)} is missing):"
            " was it run with checkpoint=false, or by an older flowerbed?"
        )
    stored = _read_json(folder / "config.json", where)
    if not stored:
        raise ConfigError(f"{where}: the folder holds no config.json; is it a run folder?")
    if keys := differing_keys(stored, config):
        shown = ", ".join(f"{k}={stored.get(k)!r} (given {config.get(k)!r})" for k in keys[:5])
        raise ConfigError(
            f"{where}: the run config differs from the run's config.json in {len(keys)} key(s):"
            f" {shown}; resume with the run's own config"
        )
    try:
        checkpoint = read_checkpoint(folder)
    except Exception as error:  # noqa: BLE001 - any unreadable file gets the same one line
        raise ConfigError(
            f"{where}: the checkpoint {checkpoint_path(folder)} cannot be read ({error})"
        ) from None
    if checkpoint.versions != (now := versions()):
        changed = ", ".join(
            f"{k} {checkpoint.versions.get(k)} -> {now[k]}"
            for k in now
            if checkpoint.versions.get(k) != now[k]
        )
        raise ConfigError(
            f"{where}: the checkpoint was written under other versions ({changed}); resume"
            " with the versions that wrote it"
        )
    return ResumePoint(folder, checkpoint, stored)


def _read_json(path: Path, where: str) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(f"{where}: {path.name} cannot be read ({error})") from None
