"""Scale: 1,000 / 10,000 / 100,000 simulated clients through ``flwr run``, 100 trained per round.

Every client holds its natural partition of the FedProx paper's Synthetic(1, 1)
(``dataset='synthetic'``, ``sim-nodes`` = N, ``partitioner='dataset-nodes'``: about 450
samples per client, 60 features, 10 classes). Model ``logreg`` (multinomial logistic
regression, 610 parameters: the paper's model), plain SGD (learning rate 0.01, batch 10, one
local epoch), FedAvg with ``fraction-train`` = 100 / N and no client-side evaluation (the
server evaluates the global model on the held-out test split every round), 1 CPU per client
(two Ray actors on two cores).

The federation is laid out as ``flowerbed run --clients N`` lays it out
(``flowerbed.simulation.federation_layout``, ``--layout virtual``, the default): above 100
clients, 100 SuperNodes (the round's sample) carry the N clients (run-config
``virtual-clients``), the handshake asks those 100, and sampling is reproducible from the seed.
``--layout supernodes`` starts one SuperNode per client, Flower's way, with ``--handshake``
(``lazy`` asks one node; ``all`` asks every node, about N^2 checks in Flower's engine).

Per N it reports:

* peak memory: the largest sum of PSS over the whole process tree (the detached SuperLink and
  everything it started: SuperExec, the simulation process that runs the ServerApp, Ray's
  processes and actors; plus the ``flwr run`` client), sampled every 0.5 s from
  /proc/<pid>/smaps_rollup, with the share of each kind of process at that peak;
* seconds per round: the run's ``timings.csv`` (round 1 starts after the handshake), median
  over rounds 2.. (round 1 also starts the second Ray actor);
* start-up + end: wall time minus the rounds (start-up, and the end of the run: the clinical
  summary's bootstrap of the last and best rounds, the report), and the handshake's seconds;
  the data set's size
  (written once into a ``cache-dir`` by the first process that needs it and memory-mapped by
  every process: one copy per machine; the pages a process touches count in its PSS, shared);
  the machine's 5-minute load average (mean of before and after the run: on a shared machine,
  the seconds are only comparable at similar load);
* the SHA-256 of the final model (``model.pt``, first 12 hex digits): two runs of the same N and
  seed that trained the same clients in every round end with the same model
  (``--nodes 1000 1000`` runs it twice).

Then a least-squares line through the points: how memory and seconds per round grow per 1,000
clients. Writes ``runs.csv``, and ``table.md`` from it (``--report-only`` rewrites the table from
``runs.csv`` alone), to ``--out`` (default ``benchmarks/results/scale``). Refuses to start a run
when less than ``--min-free-gib`` of memory is available (this machine is shared), or less than
the data set's size plus 4 GiB.

    python benchmarks/scale.py                 # 1,000, 10,000, 100,000 clients, 3 rounds
    python benchmarks/scale.py --quick         # 200 and 1,000 clients, 2 rounds
    python benchmarks/scale.py --layout supernodes --nodes 200 1000 --handshake all \\
        --out benchmarks/results/scale-handshake-all
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from process_memory import PeakMemory, own_children
from result_tables import provenance_line, record_provenance

from flowerbed.core import stages
from flowerbed.core.processes import local_superlink_pids
from flowerbed.core.results import round_seconds
from flowerbed.data.fedprox_synthetic import NUM_FEATURES, PAPER_TRAINING, client_sizes
from flowerbed.simulation import federation_layout, simulate

PER_ROUND = 100
SEED = 42
KINDS = (  # (kind, a substring of the command line), first match wins
    ("flwr run (CLI)", "bin/flwr run"),
    ("SuperLink", "flower-superlink"),
    ("SuperExec", "flower-superexec"),
    ("simulation + ServerApp", "flwr-simulation"),
    ("Ray actors (ClientApps)", "ClientAppActor"),
    ("Ray actors (ClientApps)", "default_worker.py"),
    ("Ray actors (ClientApps)", "ray::"),
    ("Ray services", "ray"),
)


def kind_of(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    return next((kind for kind, marker in KINDS if marker in command), "other")


def available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def data_gib(num_clients: int) -> float:
    """One copy of Synthetic(1, 1) for ``num_clients`` clients: float32 features, int64 labels
    and node ids, training and test rows."""
    rows = client_sizes(SEED, num_clients).sum()
    return rows * (NUM_FEATURES * 4 + 8 + 8) / 2**30


def central_evaluation_seconds(stage_file: Path) -> dict[int, float]:
    """Round -> seconds of the server's central evaluation (its clinical metrics within), from
    the run's stage times (``flowerbed.core.stages``); round 0 (the initial model) left out."""
    out: dict[int, float] = {}
    if not stage_file.exists():
        return out
    for line in stage_file.read_text().splitlines():
        entry = json.loads(line)
        top_level = entry["stage"] == stages.CENTRAL_EVALUATION and entry["within"] is None
        if top_level and entry["round"]:
            out[entry["round"]] = out.get(entry["round"], 0.0) + entry["seconds"]
    return out


def model_digest(run_dir: Path) -> str:
    """The first 12 hex digits of the SHA-256 of the run's final model file."""
    return hashlib.sha256((run_dir / "model.pt").read_bytes()).hexdigest()[:12]


def run_one(
    num_clients: int, rounds: int, layout: str, handshake: str, workdir: Path, timeout: float
) -> dict:
    run_config = {
        **PAPER_TRAINING,
        "sim-nodes": num_clients,
        "local-epochs": 1,
        "num-server-rounds": rounds,
        "fraction-train": PER_ROUND / num_clients,
        "fraction-evaluate": 0.0,
        "min-available-clients": num_clients,
        "handshake": handshake,
        "seed": SEED,
        "output-dir": str(workdir),
        "run-name": f"scale-{num_clients}",
        # a fresh cache per run: the first process generates the set into it, the others map it
        "cache-dir": str(workdir / f"cache-{num_clients}"),
    }
    supernodes = num_clients
    if layout == "virtual":
        supernodes, run_config = federation_layout(run_config, num_clients)
    load_before = os.getloadavg()[1]
    stage_file = workdir / f"stages-{num_clients}.jsonl"
    os.environ[stages.ENV] = str(stage_file)  # the run's processes inherit it (core.stages)
    for _attempt in range(3):  # Flower gives its local SuperLink 15 s to start: on a loaded
        home = Path(tempfile.mkdtemp(prefix="flwr-home-"))  # machine that can be too short
        with PeakMemory(
            lambda home=home: local_superlink_pids(home) + own_children(),
            interval=0.5,
            kind_of=kind_of,
        ) as peak:
            result = simulate(
                run_config,
                num_supernodes=supernodes,
                num_cpus_per_client=1,
                flwr_home=home,
                timeout=timeout,
            )
        if "Failed to start local SuperLink" not in result.log:
            break
        print("  the local SuperLink did not start within Flower's 15 s; again", flush=True)
    del os.environ[stages.ENV]
    if result.returncode != 0 or result.run_dir is None:
        raise SystemExit(f"{num_clients} clients: flwr run failed:\n{result.log[-3000:]}")
    rows = result.history[1:]
    seconds = round_seconds(result.run_dir)
    assert all(row["clients_trained"] == PER_ROUND for row in rows), [
        r["clients_trained"] for r in rows
    ]
    handshake_seconds = re.findall(r"answered the handshake in ([0-9.]+) s", result.log)
    evaluation = central_evaluation_seconds(stage_file)
    later = [r for r in range(2, len(seconds) + 1) if r in evaluation] or list(evaluation)
    return {
        "clients": num_clients,
        "supernodes": supernodes,
        "handshake": handshake if layout == "supernodes" else "all",
        "model": model_digest(result.run_dir),
        "rounds": rounds,
        "wall_s": result.seconds,
        "startup_s": result.seconds - sum(seconds),
        "handshake_s": float(handshake_seconds[-1]) if handshake_seconds else float("nan"),
        "round_s": statistics.median(seconds[1:] if len(seconds) > 1 else seconds),
        "evaluation_s": statistics.median(evaluation[r] for r in later) if later else float("nan"),
        "all_rounds_s": " ".join(f"{s:.1f}" for s in seconds),
        "peak_gib": peak.peak_bytes / 2**30,
        "processes": peak.peak_processes,
        "data_gib": data_gib(num_clients),
        "load": (load_before + os.getloadavg()[1]) / 2,  # 5-minute load average, before/after
        **{f"peak_{kind}": gib / 2**30 for kind, gib in peak.peak_by_kind.items()},
    }


def slope_per_thousand(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares line y = a + b x: (b per 1,000 clients, a)."""
    if len(x) < 2:
        return float("nan"), float("nan")
    b, a = np.polyfit(np.asarray(x, dtype=float), np.asarray(y, dtype=float), 1)
    return 1000 * b, a


def table(results: list[dict], folder: Path) -> str:
    kinds = sorted({k for r in results for k in r if k.startswith("peak_") and k != "peak_gib"})
    virtual = all(r.get("supernodes", r["clients"]) < r["clients"] for r in results)
    layout = (
        "virtual clients (the SuperNodes of the round's sample carry the N clients)"
        if virtual
        else f"one SuperNode per client, handshake={results[0]['handshake']}"
    )
    title = (
        f"FedAvg on Synthetic(1, 1), logreg, {PER_ROUND} clients trained per round, flwr run"
        f" (Ray, 2 CPUs, 1 per client), {layout}"
    )
    header = (
        "| clients | SuperNodes | data set (one copy) GiB | peak PSS GiB |"
        " s/round (median, rounds 2..) | of it central evaluation | rounds (s) | start-up + end s |"
        " handshake s | load | final model |"
    )
    lines = [title, "", header, "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['clients']:,} | {r.get('supernodes') or r['clients']:,} | {r['data_gib']:.2f} |"
            f" {r['peak_gib']:.2f} | {r['round_s']:.1f} | {evaluation_text(r)} |"
            f" {r['all_rounds_s']} | {r['startup_s']:.0f} | {r['handshake_s']:.1f} |"
            f" {r['load']:.1f} | {r.get('model') or 'not recorded'} |"
        )
    x = [r["clients"] for r in results]
    memory, memory_at_0 = slope_per_thousand(x, [r["peak_gib"] for r in results])
    seconds, seconds_at_0 = slope_per_thousand(x, [r["round_s"] for r in results])
    data, _ = slope_per_thousand(x, [r["data_gib"] for r in results])
    fit = (
        f"Least-squares lines: peak memory {memory_at_0:.2f} GiB + {memory:.3f} GiB per 1,000"
        f" clients (the data set itself, one shared copy: {data:.3f} GiB per 1,000 clients);"
        f" seconds per round {seconds_at_0:.1f} + {seconds:.2f} per 1,000 clients."
    )
    lines += [
        *(["", fit] if len(results) > 1 else []),
        *(["", *against_smallest(results)] if len(results) > 1 else []),
        "",
        "Peak PSS by process kind (GiB):",
        "",
        "| clients | " + " | ".join(k.removeprefix("peak_") for k in kinds) + " |",
        "|---|" + "---|" * len(kinds),
    ]
    for r in results:
        cells = " | ".join(f"{r.get(k, 0.0):.2f}" for k in kinds)
        lines.append(f"| {r['clients']:,} | {cells} |")
    lines += ["", provenance_line(folder)]
    return "\n".join(lines)


def evaluation_text(r: dict) -> str:
    value = r.get("evaluation_s", float("nan"))
    return f"{value:.1f}" if math.isfinite(value) else "not recorded"  # NaN: an older run


def against_smallest(results: list[dict]) -> list[str]:
    """Per N above the smallest: its seconds per round as a ratio to the smallest N's (runs of
    the same N: their medians' median), the peak memory above one copy of the data set, and
    whether the runs of one N ended with the same model."""
    by_n: dict[int, list[dict]] = {}
    for r in results:
        by_n.setdefault(r["clients"], []).append(r)
    smallest = min(by_n)
    base = statistics.median(r["round_s"] for r in by_n[smallest])
    base_rest = statistics.median(rest_of_round(r) for r in by_n[smallest])
    lines = []
    for n, runs in sorted(by_n.items()):
        ratio = statistics.median(r["round_s"] for r in runs) / base
        rest = statistics.median(rest_of_round(r) for r in runs) / base_rest
        above = max(r["peak_gib"] - r["data_gib"] for r in runs)
        models = {r.get("model") or "not recorded" for r in runs}
        same = (
            f"; {len(runs)} runs, {'the same final model' if len(models) == 1 else 'different final models'}"
            if len(runs) > 1
            else ""
        )
        without = f" ({rest:.2f}x without the central evaluation)" if math.isfinite(rest) else ""
        lines.append(
            f"- {n:,} clients: s/round {ratio:.2f}x that of {smallest:,}{without}; peak memory"
            f" {above:.2f} GiB above one copy of the data set{same}"
        )
    return lines


def rest_of_round(r: dict) -> float:
    """A round's median seconds without its central evaluation (NaN where not recorded)."""
    return r["round_s"] - r.get("evaluation_s", float("nan"))


RESULTS = Path(__file__).parent / "results" / "scale"  # virtual clients, the default layout
# (runs.csv, table.md) of every published layout: one SuperNode per client with each handshake
PUBLISHED = [
    (folder / "runs.csv", folder / "table.md")
    for folder in (
        RESULTS,
        RESULTS.with_name("scale-quiet"),  # 1,000 / 100,000 / 1,000 on a machine left alone
        RESULTS.with_name("scale-supernodes-lazy"),
        RESULTS.with_name("scale-handshake-all"),
    )
]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"  # includes table.md
TEXT_COLUMNS = ("all_rounds_s", "handshake", "model")
INT_COLUMNS = ("clients", "processes", "rounds", "supernodes")


def report(runs_csv: Path) -> str:
    """``table.md``, from ``runs.csv`` alone (``--report-only``)."""
    with runs_csv.open() as f:
        rows = list(csv.DictReader(f))
    results = [
        {
            key: value
            if key in TEXT_COLUMNS
            else int(value or 0)
            if key in INT_COLUMNS
            else float(value or 0.0)
            for key, value in row.items()
        }
        for row in rows
    ]
    return table(results, runs_csv.parent) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200 and 1,000 clients, 2 rounds")
    parser.add_argument("--layout", choices=("virtual", "supernodes"), default="virtual")
    parser.add_argument(
        "--handshake", choices=("lazy", "all"), default="lazy", help="with --layout supernodes"
    )
    parser.add_argument("--out", default="benchmarks/results/scale")
    parser.add_argument("--min-free-gib", type=float, default=8.0)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--report-only", action="store_true", help="table.md from runs.csv")
    args = parser.parse_args()
    if args.report_only:
        text = report(Path(args.out) / "runs.csv")
        (Path(args.out) / "table.md").write_text(text)
        print(text)
        return
    nodes, rounds = ([200, 1000], 2) if args.quick else (args.nodes, args.rounds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="flowerbed-scale-"))
    results = []
    for num_clients in nodes:
        free, needed = available_gib(), max(args.min_free_gib, data_gib(num_clients) + 4)
        if free < needed:
            raise SystemExit(
                f"only {free:.1f} GiB available, {needed:.1f} GiB needed (--min-free-gib="
                f"{args.min_free_gib}, the data set and 4 GiB): not starting the"
                f" {num_clients}-client run"
            )
        started = time.perf_counter()
        print(f"{num_clients} clients ({free:.1f} GiB available) ...", flush=True)
        results.append(
            run_one(num_clients, rounds, args.layout, args.handshake, workdir, args.timeout)
        )
        print(
            f"  done in {time.perf_counter() - started:.0f} s: peak {results[-1]['peak_gib']:.2f}"
            f" GiB, {results[-1]['round_s']:.1f} s/round",
            flush=True,
        )
        columns = sorted({k for r in results for k in r}, key=lambda k: (k.startswith("peak_"), k))
        with open(out / "runs.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns, restval="")
            writer.writeheader()
            writer.writerows(results)
        record_provenance(out, sys.argv)
        (out / "table.md").write_text(table(results, out) + "\n")
    shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(table(results, out))


if __name__ == "__main__":
    main()
