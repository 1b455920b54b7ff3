"""Overhead of flowerbed over a plain PyTorch FedAvg loop, and the memory of a large federation.

Runs the same local training (same data, partitions, model, epochs, rounds, seeds) three ways in
one invocation:

* ``flwr run``: flowerbed through Flower's Ray simulation (``flowerbed.simulation.simulate``);
* in-process: flowerbed's ServerApp and ClientApp in this process (``run_in_process``), no Ray;
* plain: a hand-written FedAvg loop over the same ``train_local`` / ``evaluate`` functions.

It prints the fixed start-up seconds of ``flwr run`` (wall time minus the rounds), the median
seconds per round of each, and their ratios; then the peak resident memory of a ``flwr run``
with 100 clients and 10 % participation (sum of RSS over the SuperLink, simulation and Ray
processes, sampled every 0.25 s).

All three train one client at a time with one math thread (``flwr run`` with
``client-resources-num-cpus=2`` on 2 cores runs one Ray actor at a time), so the per-round
ratio measures framework overhead, not parallelism or thread contention.

    python benchmarks/overhead.py [--local-epochs 30] [--rounds 4] [--clients 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from process_memory import PeakMemory

from flowerbed.catalog import parse_run_config
from flowerbed.data import split_train_test
from flowerbed.data.federation import load_splits, partition_for
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.models import build_model
from flowerbed.runtime.results import round_seconds
from flowerbed.runtime.seeding import seed_for
from flowerbed.settings import RunConfig
from flowerbed.simulation import local_superlink_pids, simulate
from flowerbed.training.loops import build_optimizer, evaluate, train_local


def plain_fedavg(config: RunConfig, num_clients: int) -> list[float]:
    """FedAvg without Flower: seconds of each round (same seeds as flowerbed's client)."""
    data = load_splits(config)
    parts = partition_for(config, num_clients)
    clients = []
    for pid, indices in enumerate(parts):
        train_idx, _ = split_train_test(
            indices, config.local_test_fraction, seed_for(config.seed, pid)
        )
        train_idx = torch.from_numpy(train_idx)
        clients.append((pid, data.x_train[train_idx], data.y_train[train_idx]))
    torch.manual_seed(config.seed)
    global_model = build_model(config.model, data.input_shape, data.num_classes)
    round_seconds = []
    for server_round in range(1, config.num_server_rounds + 1):
        started = time.perf_counter()
        global_state = {k: v.clone() for k, v in global_model.state_dict().items()}
        weighted_sum, total = None, 0
        for pid, x, y in clients:
            model = build_model(config.model, data.input_shape, data.num_classes)
            model.load_state_dict(global_state)
            torch.manual_seed(seed_for(config.seed, pid, server_round, 1))
            train_local(
                model,
                x,
                y,
                epochs=config.local_epochs,
                batch_size=config.batch_size,
                optimizer=build_optimizer(model.parameters(), config),
                generator=torch.Generator().manual_seed(seed_for(config.seed, pid, server_round)),
            )
            state = model.state_dict()
            if weighted_sum is None:
                weighted_sum = {k: v.double() * len(x) for k, v in state.items()}
            else:
                for k in weighted_sum:
                    weighted_sum[k] += state[k].double() * len(x)
            total += len(x)
        global_model.load_state_dict(
            {k: (v / total).to(global_state[k].dtype) for k, v in weighted_sum.items()}
        )
        evaluate(global_model, data.x_test, data.y_test)
        round_seconds.append(time.perf_counter() - started)
    return round_seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--local-epochs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--output-dir", default="/tmp/flowerbed-overhead")
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
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
    flwr_rounds = round_seconds(flwr.run_dir)
    # round 1 includes starting the Ray actors: count it as start-up, use rounds 2.. for the median
    per_round = {
        "plain PyTorch loop": statistics.median(plain[1:]),
        "flowerbed in-process": statistics.median(in_process[1:]),
        "flowerbed flwr run (Ray)": statistics.median(flwr_rounds[1:]),
    }
    startup = flwr.seconds - per_round["flowerbed flwr run (Ray)"] * args.rounds

    print(
        f"\nWorkload: digits, cnn, {args.clients} clients, {args.local_epochs} local epochs, "
        f"{args.rounds} rounds, FedAvg (median over rounds 2..{args.rounds})\n"
    )
    print("| variant | median s/round | ratio to plain loop |")
    print("|---|---|---|")
    base = per_round["plain PyTorch loop"]
    for name, seconds in per_round.items():
        print(f"| {name} | {seconds:.2f} | {seconds / base:.2f} |")
    print(
        f"\nflwr run fixed start-up (wall {flwr.seconds:.1f} s minus {args.rounds} median rounds): {startup:.1f} s"
    )

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
        status = "ok" if big.returncode == 0 else f"FAILED:\n{big.log[-2000:]}"
        print(
            f"\nPeak memory, 100 clients, 10 % participation, 2 rounds ({os.cpu_count()} CPUs, "
            f"1 CPU per client): {peak.peak_bytes / 2**30:.2f} GiB (PSS summed over the SuperLink and "
            f"every process it started: simulation, Ray, actors); run {status}"
        )


if __name__ == "__main__":
    main()
