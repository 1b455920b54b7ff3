"""Same run config and seed, same outputs: run a fixed set of two-round jobs and compare them
with the outputs of another commit.

Used to prove that a restructuring changed no behaviour. Each job runs in process (the real
ServerApp job and ClientApp handlers, no Ray), 4 clients, two rounds, and its ``history.json``
(without the wall-clock ``seconds``), ``kt_metrics.json`` where written, and a digest of every
tensor of ``model.pt`` are saved as one JSON file per job::

    git checkout <old>; python scripts/same_outputs.py record /tmp/before
    git checkout <new>; python scripts/same_outputs.py record /tmp/after
    python scripts/same_outputs.py compare /tmp/before /tmp/after

``compare`` prints one line per job and exits 1 if any differs. ``--rename old=new`` maps a
history column that the newer commit deliberately renamed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

KT = {
    "partitioner": "pathological",
    "kt-local-max-epochs": 3,
    "kt-local-patience": 1,
    "kt-epochs": 1,
    "kt-query-threshold": 10,
    "kt-query": "multi",
}
VQC = {"model": "vqc", "vqc-layers": 1, "optimizer": "adam", "learning-rate": 0.01}
JOBS = {
    "fedavg": {"strategy": "fedavg"},
    "scaffold": {"strategy": "scaffold", "fraction-train": 0.5},
    "fednova": {"strategy": "fednova", "local-epochs-max": 3},
    "qfedfisher-vqc": {"strategy": "qfedfisher", **VQC},
    "qkt": {"strategy": "qkt", **KT},
    "fedavg-kt-metrics": {"strategy": "fedavg", "kt-metrics": True, **KT},
}
COMMON = {"num-server-rounds": 2, "local-epochs": 1, "seed": 7}


def run_in_process(overrides: dict, num_clients: int) -> Path:
    try:  # the in-process runner moved to its own module
        from flowerbed.inprocess import run_in_process as run
    except ImportError:
        from flowerbed.simulation import run_in_process as run
    return run(overrides, num_clients=num_clients)


def model_digest(path: Path) -> dict[str, str]:
    import torch

    if not path.exists():
        return {}
    state = torch.load(path, weights_only=True)
    return {k: hashlib.sha256(v.cpu().numpy().tobytes()).hexdigest()[:16] for k, v in state.items()}


def record(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, job in JOBS.items():
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = run_in_process({**COMMON, **job, "output-dir": tmp}, num_clients=4)
            history = json.loads((run_dir / "history.json").read_text())
            for row in history:
                row.pop("seconds", None)
            kt_file = run_dir / "kt_metrics.json"
            out = {
                "history": history,
                "kt_metrics": json.loads(kt_file.read_text()) if kt_file.exists() else None,
                "model": model_digest(run_dir / "model.pt"),
            }
        (folder / f"{name}.json").write_text(json.dumps(out, indent=1, sort_keys=True))
        print(f"recorded {name}")


def differences(old: dict, new: dict) -> list[str]:
    """Where two recorded jobs differ: history fields by round, kt_metrics, model tensors."""
    out = []
    old_rows = {row["round"]: row for row in old["history"]}
    new_rows = {row["round"]: row for row in new["history"]}
    if set(old_rows) != set(new_rows):
        out.append(f"rounds {sorted(old_rows)} vs {sorted(new_rows)}")
    for r in sorted(set(old_rows) & set(new_rows)):
        for key in sorted(set(old_rows[r]) | set(new_rows[r])):
            a, b = old_rows[r].get(key, "<absent>"), new_rows[r].get(key, "<absent>")
            if a != b:
                out.append(f"round {r} {key}: {a} -> {b}")
    if old["kt_metrics"] != new["kt_metrics"]:
        out.append("kt_metrics differ")
    if old["model"] != new["model"]:
        out.append("model tensors differ")
    return out


def compare(before: Path, after: Path, renames: dict[str, str]) -> int:
    failed = 0
    for name in JOBS:
        old = json.loads((before / f"{name}.json").read_text())
        new = json.loads((after / f"{name}.json").read_text())
        for old_row, new_row in zip(old["history"], new["history"]):
            for key, renamed in renames.items():
                if key in old_row and renamed in new_row:
                    old_row[renamed] = old_row.pop(key)
        diff = differences(old, new)
        failed += bool(diff)
        print(f"{name:20s} {'identical' if not diff else 'DIFFERENT'}")
        for line in diff:
            print(f"    {line}")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("folder", type=Path)
    cmp = sub.add_parser("compare")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    cmp.add_argument("--rename", action="append", default=[], help="old=new history column")
    args = parser.parse_args()
    if args.command == "record":
        record(args.folder)
    else:
        renames = dict(item.split("=", 1) for item in args.rename)
        sys.exit(compare(args.before, args.after, renames))


if __name__ == "__main__":
    main()
