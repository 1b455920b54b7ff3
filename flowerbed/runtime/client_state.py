"""Client mod ``keep_client_state``: a node's ``context.state`` on disk, for resumed runs.

Algorithms keep per-client state in Flower's ``context.state`` (SCAFFOLD's c_i, Ditto's
personal model, FedDyn's gradient, MOON's previous model, FedBN's batch-norm entries,
QFedFisher's parameters and Fisher values). It lives in memory: a killed run loses it. While a
run checkpoints (run-config ``checkpoint``), the server adds the record ``flowerbed-run`` =
``{"run-dir": <run folder>}`` to every FL-rounds message (after the recording grid counted
the message's bytes: bookkeeping, not the algorithm's traffic), and this mod, on the
ClientApp's ``train`` and ``evaluate`` handlers:

* after handling a message of round t (``server-round`` of its ``config`` record), writes the
  node's whole ``context.state`` atomically to ``<folder>/partition-<id>/round-<t>.npz``
  and keeps the two latest rounds' files. After a training message always; after an
  evaluation message only if the handler added, removed or replaced a record (evaluation
  changes no state in any flowerbed algorithm, and a step stores state by assigning a
  record, so this halves the writes; a step that edits a stored record in place during
  evaluation would not be saved);
* before handling a message of round t, if ``context.state`` is empty (a fresh process after
  a kill, or a resumed run's new Flower run) and a file of a round < t exists, loads the
  latest such file into ``context.state``.

Why the latest round < t is the state as of the server's checkpoint: the server writes
checkpoint r at the end of round r, after every reply of round r arrived, and sends the
messages of round r + 1 only after that. A resumed run starts at round r + 1, so its first
message to a node has t >= r + 1. The node's files of rounds <= r were written before
checkpoint r and are the state the uninterrupted run had at round r + 1. A file of round
r + 1 may exist (the killed run got that far into round r + 1): "< t" skips it when t = r + 1,
and the resumed run rewrites it. When t > r + 1 (the node was not sampled in round r + 1), the
killed run did not reach the node in round r + 1 either: the sample of a round is a function
of the seed and the round (``protocols.rounds_strategy``). So "< t" never picks state newer than
checkpoint r. Two files
are kept so that the file of round r survives the killed run's file of round r + 1.

Where the files go: ``<state-dir>/run-<digest>/partition-<id>`` when the SuperNode was
started with ``--node-config "... state-dir='/abs/site/folder'"`` (deployment: each site's own
folder); else ``<run folder>/client-state/partition-<id>`` when the run folder is on this
machine (simulation, the in-process federation, a deployment on one machine); else nowhere
(warned once per process): a resumed run then restarts that node's state from empty.

Why ``run-<digest>``, 16 hex digits of the SHA-256 of the run folder's absolute path as the
server sends it (``state_key``), and no part of that path itself: the path comes from the
server, and a name taken from it (its last component, say ``..``) could point outside
``state-dir``; a digest is always one plain folder name. The key must be

* *unique per run*: the run folder is (``results.make_run_dir`` makes a new folder for every
  run and never reuses one), so two runs never share a node's state, even when their folders
  have the same name under two ``output-dir``s;
* *the same for a resumed run*: a resumed run goes on in its own folder (``resume`` is
  resolved to the same absolute path), so a restarted SuperNode finds its state again. Flower's
  run id cannot be part of the key: a resumed run is a new Flower run, with a new id.

``run.json`` in that folder records the run folder it belongs to (for the site's operator, and
checked on every use: a folder that names another run is refused). The resolved state folder
must lie inside ``state-dir`` (a link planted there is refused, naming both paths). Limit: two
servers writing their runs at the same absolute path in the same second would share a site's
state folder; ``run.json`` cannot tell them apart.

Storage: arrays in an ``.npz`` (``allow_pickle=False``) with the records' layout and their
config and metric values as JSON inside it (one file, so one atomic rename); only public
record accessors are used.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from logging import WARNING
from pathlib import Path

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.logger import log

from ..core.results import atomic_write
from ..core.stages import CLIENT, CLIENT_STATE, stage
from ..settings import ConfigError

RECORD = "flowerbed-run"  # the bookkeeping ConfigRecord the server adds to FL-rounds messages
RUN_DIR_KEY = "run-dir"
NODE_STATE_DIR_KEY = "state-dir"  # node-config key: a real site's own state folder
CLIENT_STATE_DIR = "client-state"  # under the run folder
RUN_FILE = "run.json"  # in a run's folder under state-dir: the run folder it belongs to
KEPT_ROUNDS = 2
LAYOUT = "__layout__"  # the npz entry holding the JSON layout
_FILE = re.compile(r"round-(\d+)\.npz")
_warned: set[str] = set()


def message_round(msg: Message) -> int | None:
    config = msg.content.config_records.get("config")
    return int(config["server-round"]) if config is not None and "server-round" in config else None


def state_folder(msg: Message, context: Context) -> Path | None:
    """This node's state folder for the run that sent ``msg`` (module docstring), or ``None``
    when the run does not checkpoint or the folder cannot be reached from here."""
    record = msg.content.config_records.get(RECORD)
    if record is None:
        return None
    run_dir = Path(str(record[RUN_DIR_KEY]))
    partition = f"partition-{int(context.node_config['partition-id'])}"
    site = context.node_config.get(NODE_STATE_DIR_KEY)
    if site not in (None, ""):
        base = Path(str(site)).expanduser()
        if not base.is_absolute():
            raise ConfigError(
                f"node-config {NODE_STATE_DIR_KEY}={str(site)!r} on node {context.node_id} must"
                " be an absolute path"
            )
        return site_state_folder(base, str(record[RUN_DIR_KEY]), partition, context.node_id)
    if run_dir.is_dir():
        return run_dir / CLIENT_STATE_DIR / partition
    if str(run_dir) not in _warned:
        _warned.add(str(run_dir))
        log(
            WARNING,
            "flowerbed: the run folder %s is not on this machine and node-config %s is not set:"
            " this node's state is not checkpointed (a resumed run restarts it empty)",
            run_dir,
            NODE_STATE_DIR_KEY,
        )
    return None


def state_key(run_dir: str) -> str:
    """The name of a run's folder under ``state-dir``: ``run-`` and 16 hex digits of the
    SHA-256 of the run folder's path (module docstring: unique per run, stable on resume)."""
    return "run-" + hashlib.sha256(run_dir.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def site_state_folder(base: Path, run_dir: str, partition: str, node_id: int) -> Path:
    """``<base>/run-<digest>/<partition>`` for the run folder ``run_dir``, checked: inside
    ``base`` once links are resolved, and of that run folder (its ``run.json``)."""
    folder = base / state_key(run_dir) / partition
    where = f"node-config {NODE_STATE_DIR_KEY}={str(base)!r} on node {node_id}"
    resolved, root = folder.resolve(), base.resolve()
    if not resolved.is_relative_to(root):
        raise ConfigError(
            f"{where}: the run's state folder {folder} resolves to {resolved}, outside"
            f" {root}; remove that link"
        )
    marker = folder.parent / RUN_FILE
    try:
        owner = json.loads(marker.read_text())[RUN_DIR_KEY] if marker.is_file() else run_dir
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{where}: {marker} cannot be read ({error})") from None
    if owner != run_dir:
        raise ConfigError(
            f"{where}: {folder.parent} holds the state of the run folder {owner!r}, not {run_dir!r}"
        )
    return folder


def claim(folder: Path, msg: Message) -> None:
    """Before a node's first state file under ``state-dir``: write the run's ``run.json``
    (a stateless client writes nothing, not even that)."""
    run_dir = str(msg.content.config_records[RECORD][RUN_DIR_KEY])
    parent = folder.parent
    if parent.name == state_key(run_dir) and not (parent / RUN_FILE).is_file():
        atomic_write(parent / RUN_FILE, lambda f: json.dump({RUN_DIR_KEY: run_dir}, f))


# --- a RecordDict as one .npz file ------------------------------------------------------------
def _plain(value):
    """A config or metric value as JSON (bytes as base64)."""
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _unplain(value):
    if isinstance(value, dict):
        return base64.b64decode(value["bytes"])
    if isinstance(value, list):
        return [_unplain(v) for v in value]
    return value


def save_state(path: Path, state: RecordDict) -> None:
    layout, arrays = [], {}
    for i, (name, record) in enumerate(state.items()):
        if isinstance(record, ArrayRecord):
            keys = list(record.keys())
            layout.append({"name": name, "kind": "arrays", "keys": keys})
            arrays.update({f"r{i}k{j}": record[k].numpy() for j, k in enumerate(keys)})
        else:
            kind = "metrics" if isinstance(record, MetricRecord) else "config"
            values = {k: _plain(v) for k, v in record.items()}
            layout.append({"name": name, "kind": kind, "values": values})
    text = json.dumps(layout).encode()
    arrays[LAYOUT] = np.frombuffer(text, dtype=np.uint8)
    atomic_write(path, lambda f: np.savez(f, **arrays), binary=True)


def load_state(path: Path) -> RecordDict:
    with np.load(path, allow_pickle=False) as npz:
        layout = json.loads(npz[LAYOUT].tobytes())
        state = RecordDict()
        for i, entry in enumerate(layout):
            if entry["kind"] == "arrays":
                state[entry["name"]] = ArrayRecord(
                    {k: Array(npz[f"r{i}k{j}"]) for j, k in enumerate(entry["keys"])}
                )
            else:
                kind = MetricRecord if entry["kind"] == "metrics" else ConfigRecord
                state[entry["name"]] = kind({k: _unplain(v) for k, v in entry["values"].items()})
    return state


def saved_rounds(folder: Path) -> dict[int, Path]:
    """``{round: file}`` of a node's state folder."""
    if not folder.is_dir():
        return {}
    found = (_FILE.fullmatch(p.name) for p in folder.iterdir())
    return {int(m.group(1)): folder / m.group(0) for m in found if m}


# --- the mod ----------------------------------------------------------------------------------
def is_evaluate(msg: Message) -> bool:
    return msg.metadata.message_type == MessageType.EVALUATE


def same_records(before: dict, state: RecordDict) -> bool:
    """Whether ``state`` holds exactly the record objects of ``before`` (none added, removed
    or replaced)."""
    return before.keys() == state.keys() and all(state[k] is v for k, v in before.items())


def keep_client_state(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Load the node's state before, save it after, a message of an FL round (module doc)."""
    folder = state_folder(msg, context)
    server_round = message_round(msg)
    if folder is None or server_round is None:
        return call_next(msg, context)
    with stage(CLIENT_STATE, server_round, CLIENT):  # timed before and after, not call_next
        if len(context.state) == 0:
            files = saved_rounds(folder)
            earlier = [r for r in files if r < server_round]
            if earlier:
                for name, record in load_state(files[max(earlier)]).items():
                    context.state[name] = record
        before = dict(context.state.items())
    reply = call_next(msg, context)
    with stage(CLIENT_STATE, server_round, CLIENT):
        if len(context.state) and not (is_evaluate(msg) and same_records(before, context.state)):
            claim(folder, msg)
            save_state(folder / f"round-{server_round}.npz", context.state)
            files = saved_rounds(folder)
            for old in sorted(files)[:-KEPT_ROUNDS]:
                files[old].unlink(missing_ok=True)
    return reply
