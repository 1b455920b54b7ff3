"""Run-config ``resume``: go on with an interrupted run, in its own folder.

``resume=<run folder>`` (``""``: a new run) is checked before anything is loaded or written;
each refusal is one ``ConfigError`` line naming the folder:

* the folder must exist; a run whose ``status.json`` says ``completed`` has nothing to resume;
* no live run may hold the folder (``runtime.run_lock``: its ``run.lock`` names the PID and
  host); a ``running`` status whose lock is dead is rewritten as ``interrupted`` first;
* the folder must hold ``config.json`` and a readable server checkpoint
  (``runtime.checkpoint``; written atomically, so a checkpoint that exists is complete);
* the run config must equal the folder's ``config.json`` except for ``RESUME_FREE_KEYS``:
  ``resume`` itself, ``output-dir`` and ``run-name`` (which only name a new run's folder:
  a resumed run goes on in the ``resume`` folder), ``wait-timeout`` (how long to wait for
  the nodes to connect) and ``resume-any-version``. Every other key can change the numbers,
  so a difference names the keys. ``checkpoint`` stays ``true``: the clients find their saved
  state through the run folder that checkpointing messages carry;
* the checkpoint must be this run's: its ``run_id`` the ``run-id`` that ``start_run`` wrote
  into ``config.json`` when it made the folder (a random id), its ``config_digest`` the
  digest of that ``config.json`` less the keys above (``checkpoint_stamp``): a checkpoint
  copied from another run, or a ``config.json`` edited since, is refused, naming what differs;
* versions (``version_changes``): another minor or patch version of flwr, torch, numpy or
  flowerbed warns and goes on (the rest of the run may differ from an uninterrupted one in
  the last bits; ``versions.json`` in the folder keeps the checkpoint's versions and the new
  ones); another major version, or another checkpoint format, is refused unless
  ``resume-any-version=true`` (then it warns, and an old format's identity goes unchecked).

The handshake of a resumed run waits for as many connected nodes as the run had partitions
(``handshake_wanted_nodes``, within ``wait-timeout``), so that nodes still coming up are not left
out; the federation's size is checked after the handshake (``runtime.context``): a resumed run
needs the partitions the run had. ``hold_run_folder`` then takes the folder's lock, so that
a second process that passed these checks meanwhile is refused before it writes anything.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from logging import WARNING
from pathlib import Path
from typing import NamedTuple

from flwr.common.logger import log

from ..core.results import as_written, write_json
from ..settings import ConfigError, RunConfig, Setting
from .checkpoint import (
    FORMAT,
    OtherFormat,
    ServerCheckpoint,
    checkpoint_path,
    read_checkpoint,
    versions,
)
from .run_lock import RunLock, busy_message, hold, holder, settled_status

SETTINGS = (
    Setting(
        "resume",
        "",
        "a run folder to resume (FL-rounds protocols): the run goes on in that folder from its"
        ' last checkpoint and ends with the history an uninterrupted run writes; `""`: a new'
        " run. See [Resume](docs/resume.md)",
    ),
    Setting(
        "resume-any-version",
        False,
        "with `resume`: go on from a checkpoint written under another major version of flwr,"
        " torch, numpy or flowerbed, or in another checkpoint format (the rest of the run may"
        " then differ from an uninterrupted run's); another minor or patch version only warns."
        " See [Resume](docs/resume.md)",
    ),
)
RESUME_FREE_KEYS = ("resume", "output-dir", "run-name", "wait-timeout", "resume-any-version")
FEDERATION_KEY = "num-partitions"  # written by start_run beside the run config
RUN_ID_KEY = "run-id"  # likewise: the run's identity, a random id made with its folder
# likewise, when the protocol's own defaults were applied: their keys, comma-separated (the
# values are the config's own)
PROTOCOL_DEFAULTS_KEY = "protocol-defaults"
VERSIONS_FILE = "versions.json"


class ResumePoint(NamedTuple):
    folder: Path  # the run folder, which the resumed run goes on writing
    checkpoint: ServerCheckpoint
    stored_config: dict  # its config.json (with the federation size)


def handshake_wanted_nodes(resumed: ResumePoint | None) -> int:
    """How many connected nodes the handshake of a resumed run waits for (within
    ``wait-timeout``) before it asks them all: the run's partitions (its ``config.json``'s
    ``num-partitions``); 0 for a new run. A node that connects after the handshake is never
    sampled (``RecordingGrid``), so a resume started while the last nodes are still coming up
    would go on with fewer clients than the run had: other samples (Flower samples a fraction
    of the nodes it lists), another SCAFFOLD |S|/N, another history."""
    return int(resumed.stored_config.get(FEDERATION_KEY) or 0) if resumed else 0


def resume_folder(config: RunConfig) -> Path | None:
    """The folder of ``resume``, or ``None`` for a new run."""
    return Path(str(config.resume)).expanduser().resolve() if config.resume else None


def differing_keys(stored: dict, config: RunConfig) -> list[str]:
    """Keys whose value in the folder's ``config.json`` differs from ``config`` (JSON values,
    as both were written), ``RESUME_FREE_KEYS`` and the federation size aside. A key declared
    since the run started (absent from its ``config.json``) given at its default is no
    difference: a newer flowerbed resumes the run as the older one would have."""
    given, defaults = as_written(config.to_dict()), as_written(config.defaults)
    written_beside = {FEDERATION_KEY, RUN_ID_KEY, PROTOCOL_DEFAULTS_KEY}
    keys = (set(stored) | set(given)) - set(RESUME_FREE_KEYS) - written_beside
    return sorted(
        key
        for key in keys
        if stored.get(key) != given.get(key)
        and not (key not in stored and key in defaults and given.get(key) == defaults[key])
    )


# --- whose checkpoint -------------------------------------------------------------------------
def new_run_id() -> str:
    return uuid.uuid4().hex


def digested_config(record: dict) -> dict:
    """What a checkpoint's digest covers: a run folder's ``config.json`` (with the federation
    size) less ``RESUME_FREE_KEYS`` and the run id, as JSON gives it."""
    written = as_written(record)
    return {
        key: written[key]
        for key in sorted(written)
        if key not in RESUME_FREE_KEYS and key != RUN_ID_KEY
    }


def config_digest(items: dict) -> str:
    text = json.dumps(items, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def checkpoint_stamp(run_dir: Path) -> dict:
    """What every checkpoint of this process records beside the run's state: the versions,
    the run's id and its config's digest (from the folder's ``config.json``)."""
    record = json.loads((Path(run_dir) / "config.json").read_text())
    items = digested_config(record)
    return {
        "versions": versions(),
        "run_id": str(record.get(RUN_ID_KEY, "")),
        "config_digest": config_digest(items),
        "run_config": items,
    }


def identity_mismatch(checkpoint: ServerCheckpoint, stored: dict) -> str:
    """What makes ``checkpoint`` another run's than the folder's ``config.json`` (``""``: it is
    the run's)."""
    found = []
    if checkpoint.run_id != str(stored.get(RUN_ID_KEY, "")):
        found.append(
            f"it is run {checkpoint.run_id or '(none)'}'s, the folder's config.json says run"
            f" {stored.get(RUN_ID_KEY) or '(none)'}"
        )
    items = digested_config(stored)
    if checkpoint.config_digest != config_digest(items):
        theirs = checkpoint.run_config
        keys = sorted(k for k in set(items) | set(theirs) if items.get(k) != theirs.get(k))
        shown = ", ".join(f"{k}={theirs.get(k)!r} (config.json {items.get(k)!r})" for k in keys[:5])
        found.append(
            f"its run config differs from config.json in {shown}"
            if keys
            else f"its config digest {checkpoint.config_digest[:12]} is not config.json's"
            f" {config_digest(items)[:12]}"
        )
    return "; ".join(found)


# --- versions -------------------------------------------------------------------------------
def _major(version: str | None) -> int | None:
    match = re.match(r"\d+", version or "")
    return int(match.group()) if match else None


def version_changes(old: dict, new: dict) -> tuple[list[str], list[str]]:
    """``(major, minor)``: the packages whose version differs, ``"torch 2.4.1 -> 3.0.0"``; a
    version that cannot be read counts as major."""
    major, minor = [], []
    for name in dict.fromkeys([*new, *old]):
        before, now = old.get(name), new.get(name)
        if before != now:
            same = _major(before) is not None and _major(before) == _major(now)
            (minor if same else major).append(f"{name} {before} -> {now}")
    return major, minor


def record_versions(run_dir: Path, checkpoint: ServerCheckpoint) -> None:
    """Append to the folder's ``versions.json`` when this process's versions are not those of
    the checkpoint it goes on from: the round, the checkpoint's versions, the new ones."""
    now = versions()
    if checkpoint.versions == now:
        return
    path = Path(run_dir) / VERSIONS_FILE
    try:
        entries = json.loads(path.read_text()) if path.is_file() else []
    except (OSError, ValueError):
        entries = []
    entry = {
        "after_round": checkpoint.round,
        "checkpoint": checkpoint.versions,
        "now": now,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_json(path, [*(entries if isinstance(entries, list) else []), entry])


def hold_run_folder(run_dir: Path, resumed: ResumePoint | None) -> RunLock:
    """This run's lock on its folder (``runtime.run_lock``), taken before the run writes its
    status: a live run holding it (a second resume that got here first) is refused in one line.
    A resumed run then records a change of versions (``record_versions``)."""
    lock = hold(run_dir, f"resume={str(resumed.folder)!r}" if resumed else str(run_dir))
    if resumed is not None:
        try:
            record_versions(run_dir, resumed.checkpoint)
        except BaseException:
            lock.release()
            raise
    return lock


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
    if (found := holder(folder)) is not None and found.alive:
        raise ConfigError(busy_message(where, found))
    if status == "running":
        settled_status(folder)  # a dead run: now marked interrupted, with why
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
    any_version = bool(config.resume_any_version)
    override = (
        "set resume-any-version=true to go on anyway (the rest of the run may then differ from"
        " an uninterrupted run's)"
    )
    try:
        checkpoint = read_checkpoint(folder, any_format=any_version)
    except OtherFormat as error:
        raise ConfigError(
            f"{where}: the checkpoint has format {error.found!r}, this flowerbed reads format"
            f" {FORMAT}; resume with the flowerbed that wrote it, or {override}"
        ) from None
    except Exception as error:  # noqa: BLE001 - any unreadable file gets the same one line
        raise ConfigError(
            f"{where}: the checkpoint {checkpoint_path(folder)} cannot be read ({error})"
        ) from None
    if not checkpoint.config_digest:  # an older format, read with resume-any-version
        log(
            WARNING,
            "flowerbed: %s: the checkpoint predates run identities (format 1): going on without"
            " checking that it is this folder's run",
            where,
        )
    elif mismatch := identity_mismatch(checkpoint, stored):
        raise ConfigError(
            f"{where}: the checkpoint {checkpoint_path(folder)} is not this run's: {mismatch};"
            " was it copied from another run folder, or config.json edited?"
        )
    major, minor = version_changes(checkpoint.versions, versions())
    if major and not any_version:
        raise ConfigError(
            f"{where}: the checkpoint was written under another major version"
            f" ({', '.join(major)}), which may compute other numbers; resume with the versions"
            f" that wrote it, or {override}"
        )
    if major or minor:
        log(
            WARNING,
            "flowerbed: %s: the checkpoint was written under other versions (%s): going on; the"
            " rest of the run may differ from an uninterrupted run's in the last bits (both"
            " versions go to %s)",
            where,
            ", ".join(major + minor),
            VERSIONS_FILE,
        )
    return ResumePoint(folder, checkpoint, stored)


def _read_json(path: Path, where: str) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(f"{where}: {path.name} cannot be read ({error})") from None
