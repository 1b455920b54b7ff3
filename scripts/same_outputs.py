"""Same run config and seed, same outputs: run a fixed set of two-round jobs and compare them
with the outputs of another commit; and rebuild every published table from its committed data.

Used to prove that a restructuring changed no behaviour. Each job runs in process (the real
ServerApp job and ClientApp handlers, no Ray, one torch thread, no HTML report), 4 clients,
two rounds, the protocol's smallest settings. Its outputs without wall-clock fields (``seconds``,
``time``, ``cpu_latency_ms``) are saved as one JSON file per job: ``history.json``, the JSON
files a protocol or feature adds (``kt_metrics.json``, ``distill.json``, ``privacy.json``,
``ctl_metrics.json``, ``clinical.json``, ...: ``OUTPUT_FILES``) and a digest of every tensor of
every ``*.pt`` and array of every ``*.npz`` the run writes. Run it with the flowerbed of the
checkout to record (its cwd first on ``sys.path``, or ``PYTHONPATH``)::

    cd <old checkout> && PYTHONPATH=$PWD python /path/to/scripts/same_outputs.py record /tmp/before
    cd <new checkout> && PYTHONPATH=$PWD python /path/to/scripts/same_outputs.py record /tmp/after
    python scripts/same_outputs.py compare /tmp/before /tmp/after
    python scripts/same_outputs.py tables   # published tables from committed data; git diff

The jobs: one per protocol of ``flowerbed.catalog.PROTOCOLS`` (read when the script runs, so a
new protocol is covered without an edit; ``PROTOCOL_OVERRIDES`` only where one needs smaller or
other settings), a federated-then-distill job per ``distill-objective``, and the features
``FEATURES``. ``record --jobs a,b`` records only those; ``list`` names them all. A job whose key
(or choice) the recorded checkout does not declare is saved as "not available"; a job that
raises is saved as "failed" with its error, and ``record`` names both kinds at the end (a
failure on one commit is a finding, not a crash).

Differential privacy: the DP noise (and, for central DP with ``fraction-train`` < 1, the client
sample) is drawn from the operating system's entropy by design (``flowerbed.privacy``:
``fresh_entropy`` and the local-DP mod call ``np.random.seed()`` without a seed), and no run-config
key seeds it. The DP jobs run with that entropy pinned: inside them ``np.random.seed()`` without
an argument seeds a fixed value (``pinned_entropy``), so that the noise, and every output, is
reproducible and compared whole. Their fraction-train is 1 (no secret sample from ``os.urandom``).

``compare`` prints one line per job and exits 1 if any differs (a job not available on one side
is named but not counted). ``--rename old=new`` maps a history column that the newer commit
deliberately renamed.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits

import flowerbed
from flowerbed.catalog import PROTOCOLS, SETTINGS

try:  # the in-process runner moved to its own module
    from flowerbed.inprocess import run_in_process
except ImportError:
    from flowerbed.simulation import run_in_process

NUM_CLIENTS = 4
COMMON = {"num-server-rounds": 2, "local-epochs": 1, "seed": 7}
KT = {
    "partitioner": "pathological",
    "kt-local-max-epochs": 3,
    "kt-local-patience": 1,
    "kt-epochs": 1,
    "kt-query-threshold": 10,
    "kt-query": "multi",
}
VQC = {"model": "vqc", "vqc-layers": 1, "optimizer": "adam", "learning-rate": 0.01}
# per protocol, only what it needs beyond COMMON (smaller settings, its own data or model)
PROTOCOL_OVERRIDES = {
    "scaffold": {"fraction-train": 0.5},
    "fednova": {"local-epochs-max": 3},
    "qfedavg": VQC,
    "qfedadam": VQC,
    "qfedfisher": VQC,
    "qkt": KT,
    "qkt-light": {**KT, "kt-light-head-epochs": 1},
    "local": KT,
    "fedavg1": KT,
    "ensemble": KT,
    "kd": KT,
    "ctl": {"dataset": "breast-cancer"},
    "fedsa": {
        "server-fraction": 0.2,
        "fedsa-selection-gap": 1,
        "fedsa-local-epochs": 1,
        "fedsa-weak-epochs": 1,
        "fedsa-adapt-epochs": 1,
        "fedsa-labels-per-class": 2,
    },
}
DISTILL = {"distill-epochs": 1}
DP = {"dp-noise-multiplier": 0.01, "dp-clipping-norm": 10.0}
PINNED_ENTROPY = 1234  # what np.random.seed() without a seed seeds inside a DP job
# keys whose values are wall-clock measurements, dropped from every recorded file
WALL_CLOCK = frozenset({"seconds", "time", "cpu_latency_ms"})
# the JSON (and JSON-lines) files of a run folder that hold its outputs (those a run writes)
OUTPUT_FILES = (
    "history.json",
    "kt_metrics.json",
    "distill.json",
    "distill_history.json",
    "privacy.json",
    "ctl_metrics.json",
    "fedsa_selection.json",
    "clinical.json",
    "client_table.jsonl",
    "classes.json",
    "partitions.json",
    "model_best.json",
    "status.json",
)
SUMMARY = "record.json"  # what record writes beside the jobs: status and seconds of each


@dataclass(frozen=True)
class Job:
    """One run: its run-config overrides (over ``COMMON``), whether each node reads its own
    folder of digits (``partitioner='site'``), whether its OS entropy is pinned (DP)."""

    overrides: dict = field(default_factory=dict)
    sites: bool = False
    pinned: bool = False


FEATURES = {
    "dp-central": Job({"dp": "central-server-fixed", **DP}, pinned=True),
    "dp-local": Job({"dp": "local", **DP}, pinned=True),
    "attack-label-flip": Job({"attack": "label-flip", "attackers": "0"}),
    "attack-sign-flip": Job({"attack": "sign-flip", "attackers": "0"}),
    "failing-partitions": Job({"failing-partitions": "1", "max-failed-rounds": 0}),
    "max-update-norm": Job({"max-update-norm": 1.0}),
    "kt-metrics": Job({"kt-metrics": True, **KT}),
    "site": Job({"dataset": "site", "partitioner": "site", "model": "mlp"}, sites=True),
}


def jobs() -> dict[str, Job]:
    """Every job, by name: the protocols of the recorded checkout's catalog, a distillation
    per objective it declares, then the features."""
    out = {name: Job({"strategy": name, **PROTOCOL_OVERRIDES.get(name, {})}) for name in PROTOCOLS}
    objectives = SETTINGS["distill-objective"].choices if "distill-objective" in SETTINGS else ()
    for objective in objectives:
        if objective != "none":
            out[f"distill-{objective}"] = Job({"distill-objective": objective, **DISTILL})
    return {**out, **FEATURES}


def unavailable(overrides: dict) -> list[str]:
    """The keys (and ``key=value`` choices) of ``overrides`` this checkout does not declare."""
    missing = []
    for key, value in overrides.items():
        if key not in SETTINGS:
            missing.append(key)
        elif isinstance(SETTINGS[key].choices, tuple) and value not in SETTINGS[key].choices:
            missing.append(f"{key}={value}")
    return missing


@contextmanager
def pinned_entropy(pinned: bool) -> Iterator[None]:
    """Inside, ``np.random.seed()`` without a seed (flowerbed's fresh OS entropy for DP noise)
    seeds ``PINNED_ENTROPY`` instead; a seeded call is unchanged."""
    if not pinned:
        yield
        return
    original = np.random.seed

    def seed(value=None) -> None:
        original(PINNED_ENTROPY if value is None else value)

    np.random.seed = seed
    try:
        yield
    finally:
        np.random.seed = original


def write_sites(root: Path, per_site: int = 100, test_share: float = 0.25) -> list[dict]:
    """``NUM_CLIENTS`` sites' own folders, each a ``data.npz`` of a disjoint slice of
    scikit-learn's digits (8x8, 0..255); returns each node's node config (its ``data-dir``)."""
    bunch = load_digits()
    images = np.round(bunch.images * 255 / 16).astype(np.uint8)[:, None]
    labels = bunch.target.astype(np.int64)
    num_test = int(per_site * test_share)
    configs = []
    for site in range(NUM_CLIENTS):
        folder = root / f"site-{site}"
        folder.mkdir(parents=True)
        x = images[site * per_site : (site + 1) * per_site]
        y = labels[site * per_site : (site + 1) * per_site]
        np.savez(
            folder / "data.npz",
            x_train=x[num_test:],
            y_train=y[num_test:],
            x_test=x[:num_test],
            y_test=y[:num_test],
        )
        configs.append({"data-dir": str(folder)})
    return configs


def without_wall_clock(value):
    """``value`` with every ``WALL_CLOCK`` key dropped, at any depth."""
    if isinstance(value, dict):
        return {k: without_wall_clock(v) for k, v in value.items() if k not in WALL_CLOCK}
    if isinstance(value, list):
        return [without_wall_clock(v) for v in value]
    return value


def tensor_digests(path: Path) -> dict[str, str]:
    """A digest of every tensor of a saved state dict (non-tensor entries by their repr)."""
    state = torch.load(path, weights_only=True)
    if not isinstance(state, dict):
        return {"": hashlib.sha256(repr(state).encode()).hexdigest()[:16]}
    out = {}
    for key, value in state.items():
        data = value.cpu().numpy().tobytes() if torch.is_tensor(value) else repr(value).encode()
        out[str(key)] = hashlib.sha256(data).hexdigest()[:16]
    return out


def array_digests(path: Path) -> dict[str, str]:
    """A digest of every array of an ``.npz`` file (saved predictions)."""
    with np.load(path) as arrays:
        return {k: hashlib.sha256(arrays[k].tobytes()).hexdigest()[:16] for k in arrays.files}


def read_json(path: Path):
    """A JSON file, or a JSON-lines file as the list of its lines."""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def outputs(run_dir: Path) -> dict:
    """What a run folder holds that a refactor must not change (``OUTPUT_FILES`` present, the
    tensors of every ``*.pt``, the arrays of every ``*.npz``)."""
    files = {
        name: without_wall_clock(read_json(run_dir / name))
        for name in OUTPUT_FILES
        if (run_dir / name).is_file()
    }
    models = {path.name: tensor_digests(path) for path in sorted(run_dir.glob("*.pt"))}
    models |= {path.name: array_digests(path) for path in sorted(run_dir.glob("*.npz"))}
    return {"files": files, "models": models}


def run_job(job: Job) -> dict:
    """Run ``job`` in a temporary folder; its outputs, or how it failed."""
    missing = unavailable({**COMMON, **job.overrides})
    if missing:
        return {"status": "not available", "missing": missing}
    with tempfile.TemporaryDirectory() as tmp:
        overrides = {**COMMON, **job.overrides, "output-dir": str(Path(tmp) / "runs")}
        node_configs = write_sites(Path(tmp) / "sites") if job.sites else None
        try:
            with pinned_entropy(job.pinned):
                if node_configs is None:
                    run_dir = run_in_process(overrides, num_clients=NUM_CLIENTS)
                else:
                    run_dir = run_in_process(
                        overrides, num_clients=NUM_CLIENTS, node_configs=node_configs
                    )
        except Exception as error:  # noqa: BLE001  a failing job is a finding: recorded, not raised
            first = (str(error).replace(tmp, "<tmp>").splitlines() or [""])[0]
            return {"status": "failed", "error": f"{type(error).__name__}: {first}"}
        return {"status": "ok", **outputs(run_dir)}


def record(folder: Path, names: list[str] | None) -> None:
    """Run the jobs (``names``, or all) and write ``<job>.json`` each, plus ``SUMMARY``."""
    every = jobs()
    unknown = sorted(set(names or ()) - set(every))
    if unknown:
        sys.exit(f"no such job: {', '.join(unknown)} (see: same_outputs.py list)")
    package = Path(flowerbed.__file__).resolve().parent
    if (Path.cwd() / "flowerbed").is_dir() and package != (Path.cwd() / "flowerbed").resolve():
        print(f"warning: flowerbed comes from {package}, not this checkout: PYTHONPATH=$PWD?")
    folder.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("FLOWERBED_REPORT", "0")  # the HTML report is no compared output
    torch.set_num_threads(1)
    summary = {}
    for name in names or every:
        start = time.perf_counter()
        out = run_job(every[name])
        seconds = round(time.perf_counter() - start, 1)
        (folder / f"{name}.json").write_text(json.dumps(out, indent=1, sort_keys=True))
        summary[name] = {"status": out["status"], "seconds": seconds}
        detail = out.get("error") or ", ".join(out.get("missing", ()))
        print(f"{name:28s} {out['status']:14s} {seconds:6.1f} s  {detail}", flush=True)
    summary["flowerbed"] = str(package)
    (folder / SUMMARY).write_text(json.dumps(summary, indent=1))
    total = sum(row["seconds"] for row in summary.values() if isinstance(row, dict))
    for status in ("failed", "not available"):
        named = [
            n for n, row in summary.items() if isinstance(row, dict) and row["status"] == status
        ]
        print(f"{status}: {', '.join(named) if named else 'none'}")
    print(f"{len(summary) - 1} jobs in {total:.0f} s, flowerbed from {summary['flowerbed']}")


def keyed(name: str, value):
    """A recorded file in a form whose differences read well: history rows by round."""
    if name.endswith("history.json") and isinstance(value, list):
        return {
            f"round {row.get('round', row.get('epoch', i))}": row for i, row in enumerate(value)
        }
    return value


def diff(path: str, old, new, out: list[str]) -> None:
    """Append ``path: old -> new`` for every leaf where ``old`` and ``new`` differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            diff(f"{path} {key}", old.get(key, "<absent>"), new.get(key, "<absent>"), out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            diff(f"{path}[{i}]", a, b, out)
    elif old != new:
        out.append(f"{path}: {old} -> {new}")


def differences(old: dict, new: dict) -> list[str]:
    """Where two recorded jobs differ: their status, every recorded file, the tensors."""
    if old["status"] != "ok" or new["status"] != "ok":
        if old == new:
            return []
        return [f"{old['status']} -> {new['status']}: {new.get('error', old.get('error', ''))}"]
    out: list[str] = []
    order = {name: i for i, name in enumerate(OUTPUT_FILES)}  # history first
    for name in sorted(
        set(old["files"]) | set(new["files"]), key=lambda n: order.get(n, len(order))
    ):
        a, b = old["files"].get(name, "<absent>"), new["files"].get(name, "<absent>")
        diff(name, keyed(name, a), keyed(name, b), out)
    for name in sorted(set(old["models"]) | set(new["models"])):
        a, b = old["models"].get(name, {}), new["models"].get(name, {})
        changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        if changed:
            out.append(f"{name}: {len(changed)} entries differ ({', '.join(changed[:4])}...)")
    return out


def renamed(job: dict, renames: dict[str, str]) -> dict:
    """``job`` with its history columns renamed as ``renames`` says (old name -> new)."""
    history = job.get("files", {}).get("history.json", [])
    for row in history:
        for key, new_key in renames.items():
            if key in row:
                row[new_key] = row.pop(key)
    return job


def compare(before: Path, after: Path, renames: dict[str, str]) -> int:
    """Print one line per job of either folder (and its differences); 1 if any differs."""
    names = sorted(
        {p.stem for folder in (before, after) for p in folder.glob("*.json")} - {Path(SUMMARY).stem}
    )
    different, skipped = [], []
    for name in names:
        paths = before / f"{name}.json", after / f"{name}.json"
        if not all(p.is_file() for p in paths):
            side = "after" if paths[0].is_file() else "before"
            print(f"{name:28s} not recorded {side}")
            skipped.append(name)
            continue
        old, new = (json.loads(p.read_text()) for p in paths)
        if "not available" in (old["status"], new["status"]):
            print(f"{name:28s} not available {'before' if old['status'] != 'ok' else 'after'}")
            skipped.append(name)
            continue
        lines = differences(renamed(old, renames), new)
        state = "DIFFERENT" if lines else "identical"
        if not lines and old["status"] == "failed":
            state = f"identical (failed on both: {old['error']})"
        print(f"{name:28s} {state}")
        for line in lines[:20]:
            print(f"    {line}")
        if len(lines) > 20:
            print(f"    ... {len(lines) - 20} more")
        if lines:
            different.append(name)
    print(
        f"different: {', '.join(different) or 'none'}; not compared: {', '.join(skipped) or 'none'}"
    )
    return 1 if different else 0


def repository_root() -> Path:
    """The checkout whose flowerbed this process imports (its tables are rebuilt)."""
    return Path(flowerbed.__file__).resolve().parent.parent


def published_benchmarks(benchmarks: Path) -> list[Path]:
    """The benchmark scripts that publish tables: those defining ``report`` and ``DOCS``."""
    out = []
    for path in sorted(benchmarks.glob("*.py")):
        names = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
        if {"report", "DOCS"} <= names:
            out.append(path)
    return out


def load(path: Path):
    """A benchmark script as a module, registered in ``sys.modules`` (a dataclass looks its
    module up there); its siblings, such as ``result_tables``, importable."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"benchmark_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def tables() -> int:
    """Rebuild every published table (with its intervals' file and the Holm blocks of the
    pages that include it) from the committed result files, as each benchmark's report step
    writes it; print ``git status`` and ``git diff --stat`` of benchmarks/results and docs and
    return 1 if anything changed (run it on a clean tree: an edit already there counts too).
    Not rebuilt: the logs and earlier records kept beside the tables (``ctl/ctl.md``,
    ``fedsa/fedsa.md``, ``scale/table-before-shared-copy.md``, ...), which no report step makes
    from committed data."""
    root = repository_root()
    benchmarks = root / "benchmarks"
    for path in published_benchmarks(benchmarks):
        benchmark = load(path)
        result_tables = sys.modules["result_tables"]
        if hasattr(benchmark, "PUBLISHED"):
            pairs = list(benchmark.PUBLISHED)
        else:
            data = getattr(benchmark, "DATA", benchmark.RESULTS / "runs.csv")
            pairs = [(data, getattr(benchmark, "TABLE", benchmark.RESULTS / "table.md"))]
        for data, table in pairs:
            result_tables.write_table(table, lambda b=benchmark, d=data: b.report(d))
            print(f"rebuilt {Path(table).relative_to(root)}")
    paths = ["benchmarks/results", "docs"]

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args, "--", *paths], cwd=root, capture_output=True, text=True, check=True
        ).stdout

    status, stat = git("status", "--porcelain"), git("diff", "--stat")
    print(stat or "", status or "every published table is byte-identical", sep="")
    return 1 if status else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run the jobs, one JSON file each into FOLDER")
    rec.add_argument("folder", type=Path)
    rec.add_argument("--jobs", default="", help="comma-separated job names (default: all)")
    sub.add_parser("list", help="the job names and their overrides")
    cmp = sub.add_parser("compare", help="compare two recorded folders; exit 1 if any differs")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    cmp.add_argument("--rename", action="append", default=[], help="old=new history column")
    sub.add_parser("tables", help="rebuild the published tables; exit 1 if any changed")
    args = parser.parse_args()
    if args.command == "record":
        record(args.folder, [n for n in args.jobs.split(",") if n] or None)
    elif args.command == "list":
        for name, job in jobs().items():
            print(f"{name:28s} {job.overrides}")
    elif args.command == "compare":
        renames = dict(item.split("=", 1) for item in args.rename)
        sys.exit(compare(args.before, args.after, renames))
    else:
        sys.exit(tables())


if __name__ == "__main__":
    main()
