"""Overhead of flowerbed over a plain PyTorch FedAvg loop, and the memory of a large federation.

Runs the same local training (same data, partitions, model, epochs, rounds, seeds) three ways in
one invocation:

* ``flwr run``: flowerbed through Flower's Ray simulation (``flowerbed.simulation.simulate``);
* in-process: flowerbed's ServerApp and ClientApp in this process (``run_in_process``), no Ray;
* plain: a hand-written FedAvg loop over the same ``train_local`` / ``evaluate`` functions.

It prints the fixed start-up seconds of ``flwr run`` (wall time minus the rounds), the median
seconds per round of each, and their ratios; then the peak resident memory of a ``flwr run``
with 100 clients and 10 % participation (PSS summed over the SuperLink, simulation and Ray
processes, sampled every 0.25 s).

All three train one client at a time with one math thread (``flwr run`` with
``client-resources-num-cpus=2`` on 2 cores runs one Ray actor at a time), so the per-round
ratio measures framework overhead, not parallelism or thread contention.

Writes ``benchmarks/results/overhead/`` (``--out``): ``runs.csv`` (seconds of every round of
each variant), ``setting.json`` (the workload, the ``flwr run`` command's wall seconds, the
peak memory of the 100-client run), ``measured.json`` (commit, command, machine, date) and
``table.md``, made from those files alone by ``report`` (``--report-only``), which
``docs/benchmarks.md`` includes.

    python benchmarks/overhead.py [--local-epochs 20] [--rounds 4] [--clients 10]
    python benchmarks/overhead.py --report-only
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from process_memory import PeakMemory
from result_tables import provenance_line, record_provenance

from flowerbed.catalog import parse_run_config
from flowerbed.core.processes import local_superlink_pids
from flowerbed.core.results import atomic_write, round_seconds, write_csv
from flowerbed.core.seeding import seed_for
from flowerbed.core.stages import (
    AGGREGATE_TRAIN,
    CENTRAL_EVALUATION,
    CLIENT,
    CLIENT_DECODE,
    CLIENT_EVALUATION,
    CLIENT_STEP,
    CLIENT_TRAINING,
    ROUND,
    record,
    stage,
)
from flowerbed.data import split_train_test
from flowerbed.data.federation import load_splits, partition_for
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.models import build_model
from flowerbed.settings import RunConfig
from flowerbed.simulation import simulate
from flowerbed.training.loops import build_optimizer, evaluate, train_local

RESULTS = Path(__file__).resolve().parent / "results" / "overhead"
DATA = RESULTS / "runs.csv"
TABLE = RESULTS / "table.md"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
PLAIN = "plain PyTorch FedAvg loop"
IN_PROCESS = "flowerbed in process (`run_in_process`)"
FLWR = "flowerbed through `flwr run` (Ray)"


def plain_fedavg(config: RunConfig, num_clients: int) -> list[float]:
    """FedAvg without Flower: seconds of each round (same seeds as flowerbed's client).

    With ``fraction-evaluate`` > 0 every client evaluates the aggregated model on its local
    test split each round, as flowerbed's clients do. With ``FLOWERBED_STAGE_TIMES`` set, its
    stages are timed under flowerbed's stage names (``flowerbed.core.stages``:
    ``benchmarks/round_stages.py``)."""
    data = load_splits(config)
    parts = partition_for(config, num_clients)
    clients, tests = [], []
    for pid, indices in enumerate(parts):
        train_idx, test_idx = split_train_test(
            indices, config.local_test_fraction, seed_for(config.seed, pid)
        )
        train_idx, test_idx = torch.from_numpy(train_idx), torch.from_numpy(test_idx)
        clients.append((pid, data.x_train[train_idx], data.y_train[train_idx]))
        tests.append((data.x_train[test_idx], data.y_train[test_idx]))
    torch.manual_seed(config.seed)
    global_model = build_model(config.model, data.input_shape, data.num_classes)
    round_seconds = []
    for server_round in range(1, config.num_server_rounds + 1):
        started = time.perf_counter()
        global_state = {k: v.clone() for k, v in global_model.state_dict().items()}
        weighted_sum, total = None, 0
        for pid, x, y in clients:
            with stage(CLIENT_STEP, server_round, CLIENT):
                with stage(CLIENT_DECODE):
                    model = build_model(config.model, data.input_shape, data.num_classes)
                    model.load_state_dict(global_state)
                torch.manual_seed(seed_for(config.seed, pid, server_round, 1))
                with stage(CLIENT_TRAINING):
                    train_local(
                        model,
                        x,
                        y,
                        epochs=config.local_epochs,
                        batch_size=config.batch_size,
                        optimizer=build_optimizer(model.parameters(), config),
                        generator=torch.Generator().manual_seed(
                            seed_for(config.seed, pid, server_round)
                        ),
                    )
            with stage(AGGREGATE_TRAIN, server_round):
                state = model.state_dict()
                if weighted_sum is None:
                    weighted_sum = {k: v.double() * len(x) for k, v in state.items()}
                else:
                    for k in weighted_sum:
                        weighted_sum[k] += state[k].double() * len(x)
                total += len(x)
        with stage(AGGREGATE_TRAIN, server_round):
            global_model.load_state_dict(
                {k: (v / total).to(global_state[k].dtype) for k, v in weighted_sum.items()}
            )
        if config.fraction_evaluate > 0:
            for x_test, y_test in tests:
                with stage(CLIENT_STEP, server_round, CLIENT), stage(CLIENT_EVALUATION):
                    evaluate(global_model, x_test, y_test)
        with stage(CENTRAL_EVALUATION, server_round):
            evaluate(global_model, data.x_test, data.y_test)
        round_seconds.append(time.perf_counter() - started)
        record(ROUND, round_seconds[-1], server_round)
    return round_seconds


def measure(args) -> None:
    """Run the three variants and the 100-client memory run; write ``runs.csv``,
    ``setting.json`` and ``measured.json`` into ``args.out``."""
    # One math thread everywhere, one client at a time everywhere: the plain loop and the
    # in-process run here, and Ray actors (OMP_NUM_THREADS is inherited through the SuperLink;
    # client-resources-num-cpus=2 lets only one actor run at once on 2 CPUs). Two threads on a
    # shared, loaded machine can be many times slower than one (spin-waiting), which would
    # measure the machine, not the framework.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

    overrides = {
        "num-server-rounds": args.rounds,
        "local-epochs": args.local_epochs,
        "output-dir": args.output_dir,
        "fraction-evaluate": 0.0,
    }
    config = parse_run_config(resolve_run_config(overrides))

    plain = plain_fedavg(config, args.clients)
    run_dir = run_in_process(overrides, num_clients=args.clients)
    in_process = round_seconds(run_dir)
    flwr = simulate(overrides, num_supernodes=args.clients, num_cpus_per_client=2)
    if flwr.returncode != 0:
        raise SystemExit(f"flwr run failed:\n{flwr.log[-3000:]}")
    rows = [
        {"variant": variant, "round": number, "seconds": f"{seconds:.4f}"}
        for variant, seconds_per_round in (
            (PLAIN, plain),
            (IN_PROCESS, in_process),
            (FLWR, round_seconds(flwr.run_dir)),
        )
        for number, seconds in enumerate(seconds_per_round, start=1)
    ]
    setting = {
        "clients": args.clients,
        "local_epochs": args.local_epochs,
        "rounds": args.rounds,
        "flwr_run_wall_seconds": round(flwr.seconds, 2),
        "memory": None,
    }
    if not args.skip_memory:
        memory_overrides = {
            "num-server-rounds": 2,
            "local-epochs": 1,
            "fraction-train": 0.1,
            "fraction-evaluate": 0.1,
            "output-dir": args.output_dir,
            "partitioner": "iid",
        }
        home = Path(tempfile.mkdtemp(prefix="flwr-home-"))
        with PeakMemory(lambda: local_superlink_pids(home)) as peak:
            big = simulate(
                memory_overrides, num_supernodes=100, num_cpus_per_client=1, flwr_home=home
            )
        setting["memory"] = {
            "clients": 100,
            "fraction_train": 0.1,
            "cpus": os.cpu_count(),
            "peak_pss_gib": round(peak.peak_bytes / 2**30, 3),
            "completed": big.returncode == 0,
        }
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "runs.csv", rows, ("variant", "round", "seconds"))
    atomic_write(args.out / "setting.json", lambda f: f.write(json.dumps(setting, indent=1) + "\n"))
    record_provenance(args.out, sys.argv)


def report(data: Path = DATA) -> str:
    """The table of ``docs/benchmarks.md``, made from ``runs.csv`` and ``setting.json``
    beside it alone: median seconds per round over rounds 2.. (round 1 starts the Ray actors
    and warms torch up), the fastest and slowest of those rounds (the machine's noise, seen
    beside the differences) and the ratio to the plain loop, the fixed start-up of ``flwr run``
    (its wall seconds minus its rounds at the median) and the peak memory of the 100-client
    run."""
    with data.open(newline="") as f:
        rows = list(csv.DictReader(f))
    setting = json.loads((data.parent / "setting.json").read_text())
    later_rounds = {
        variant: [float(r["seconds"]) for r in rows if r["variant"] == variant][1:]
        for variant in (PLAIN, IN_PROCESS, FLWR)
    }
    per_round = {variant: statistics.median(s) for variant, s in later_rounds.items()}
    base = per_round[PLAIN]
    caption = (
        f"digits, cnn, {setting['clients']} clients, {setting['local_epochs']} local epochs, "
        f"{setting['rounds']} rounds of FedAvg, one torch thread, one client at a time; median "
        f"seconds per round over rounds 2..{setting['rounds']}."
    )
    lines = [
        caption,
        "",
        "| variant | s / round | fastest – slowest round | ratio to the plain loop |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {v} | {s:.2f} | {min(later_rounds[v]):.2f} – {max(later_rounds[v]):.2f} "
        f"| {s / base:.2f} |"
        for v, s in per_round.items()
    ]
    startup = setting["flwr_run_wall_seconds"] - per_round[FLWR] * setting["rounds"]
    lines += [
        "",
        f"Fixed start-up of `flwr run` (its wall time minus its rounds): {startup:.0f} s.",
    ]
    memory = setting["memory"]
    if memory is not None:
        outcome = "completed" if memory["completed"] else "FAILED"
        lines.append(
            f"Peak memory of a `flwr run` with {memory['clients']} clients and "
            f"{memory['fraction_train']:.0%} participation on {memory['cpus']} CPUs (PSS summed "
            f"over the SuperLink and every process it starts; run {outcome}): "
            f"{memory['peak_pss_gib']:.2f} GiB."
        )
    lines += ["", provenance_line(data.parent)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--local-epochs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--output-dir", default="/tmp/flowerbed-overhead")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--report-only", action="store_true", help="table.md from runs.csv and setting.json"
    )
    args = parser.parse_args()
    if not args.report_only:
        measure(args)
    text = report(args.out / "runs.csv")
    atomic_write(args.out / "table.md", lambda f: f.write(text))
    print(text)


if __name__ == "__main__":
    main()
