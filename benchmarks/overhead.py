"""Overhead of flowerbed over a plain PyTorch FedAvg loop, and the memory of a large federation.

The same local training (same data, partitions, model, epochs, rounds, seeds) three ways:

* ``plain``: a hand-written FedAvg loop over the same ``train_local`` / ``evaluate``
  functions (``plain_fedavg``);
* ``in process``: flowerbed's ServerApp and ClientApp in this process (``run_in_process``),
  no Ray;
* ``flwr run``: flowerbed through Flower's Ray simulation (``flowerbed.simulation.simulate``);

and a fourth point, ``memory``: the peak resident memory of a ``flwr run`` of many clients
(100 in the full budget) with 10 % participation, PSS summed over the SuperLink, simulation and
Ray processes, sampled every 0.25 s (``process_memory.PeakMemory``).

All three train one client at a time with one math thread (``flwr run`` with
``client-resources-num-cpus=2`` on 2 cores runs one Ray actor at a time), so the per-round
ratio measures framework overhead, not parallelism or thread contention. Every run times its
rounds through ``FLOWERBED_STAGE_TIMES`` (``flowerbed.core.stages``; the plain loop records the
same ``round`` stage): a round's seconds are its ``round`` stage, from its first training
message to the end of its central evaluation; the end-of-run HTML report is off (no part of a
round, nor of start-up).

A study of the study driver (``flowerbed.experiments.study_cli``): the points are the three
variants and ``memory``, the seeds are repeats, and the points alternate within each repeat
(``alternate``: plain, in process, flwr run, memory, then the next repeat), one at a time, so
that load from other work falls on all of them alike. The memory run is a point of its own
rather than a study of its own: it runs one at a time like the timings (a run beside it would
measure their sum), one command makes the whole table, and its repeats give its peak a spread.
The table gives each variant's seconds per round (the median over rounds 2..N of each run,
round 1 starting the Ray actors and warming torch up; then the median over repeats), its ratio
to the plain loop paired by repeat (the median and its lowest and highest:
``stats.paired_ratio``), the start-up of ``flwr run`` (its wall seconds less its rounds at its
steady pace) and the peak memory, each over the repeats. Budgets: ``full`` (the default: 10
clients, 20 local epochs, 4 rounds, 5 repeats, the memory run of 100 clients: about 15 to 20
minutes on 2 cores) and ``quick`` (1 local epoch, 2 rounds, 2 repeats, a memory run of 10
clients: a few minutes, a check that the measuring path works, not a measurement).

    python benchmarks/overhead.py                  # rows.jsonl and table.md in results/overhead
    python benchmarks/overhead.py --quick          # into results/overhead/quick
    python benchmarks/overhead.py --report-only    # table.md from the files on disk

Writes into ``benchmarks/results/overhead``: ``rows.jsonl`` (one row per run: each round's
seconds, a ``flwr run``'s wall seconds, a memory run's peak), ``measured.jsonl`` (one line per
invocation that measured, said under the table) and ``table.md``, which ``docs/benchmarks.md``
includes.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from process_memory import PeakMemory
from result_tables import joined, unrecorded_provenance_line, write_table

from flowerbed.catalog import parse_run_config
from flowerbed.core.processes import local_superlink_pids
from flowerbed.core.seeding import seed_for
from flowerbed.core.stages import (
    AGGREGATE_TRAIN,
    CENTRAL_EVALUATION,
    CLIENT,
    CLIENT_DECODE,
    CLIENT_EVALUATION,
    CLIENT_STEP,
    CLIENT_TRAINING,
    ENV,
    ROUND,
    record,
    stage,
)
from flowerbed.data import split_train_test
from flowerbed.data.federation import load_splits, partition_for
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import provenance_lines
from flowerbed.experiments.stats import Ratio, paired_ratio
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.models import build_model
from flowerbed.settings import RunConfig
from flowerbed.simulation import SimulationResult, simulate
from flowerbed.training.loops import build_optimizer, evaluate, train_local

RESULTS = Path(__file__).resolve().parent / "results" / "overhead"
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"

PLAIN, IN_PROCESS, FLWR, MEMORY = "plain", "in process", "flwr run", "memory"
VARIANTS = (PLAIN, IN_PROCESS, FLWR)
LABELS = {
    PLAIN: "plain PyTorch FedAvg loop",
    IN_PROCESS: "flowerbed in process (`run_in_process`)",
    FLWR: "flowerbed through `flwr run` (Ray)",
}
WORKLOAD = {"clients": 10, "local_epochs": 20, "rounds": 4}  # round_stages.py's too
BUDGETS = {
    "full": {**WORKLOAD, "repeats": 5, "memory_clients": 100},
    "quick": {**WORKLOAD, "local_epochs": 1, "rounds": 2, "repeats": 2, "memory_clients": 10},
}
# the memory run: 2 rounds of 1 local epoch, 10 % of the clients training and evaluating
MEMORY_RUN = {
    "num-server-rounds": 2,
    "local-epochs": 1,
    "fraction-train": 0.1,
    "fraction-evaluate": 0.1,
    "partitioner": "iid",
}
ROUND_KEY = "round/"  # a row's key of one round's seconds: "round/1", "round/2", ...
WALL = "wall_seconds"  # a row's key of a ``flwr run``'s wall seconds


class Overhead:
    """The study (module docstring): one run per (variant or ``memory``, repeat)."""

    name = "overhead"
    budgets = BUDGETS
    default_budget = "full"
    alternate = True

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        points = [Point(v, {"variant": v, **workload_of(chosen)}) for v in VARIANTS]
        points.append(Point(MEMORY, {"clients": chosen["memory_clients"]}))
        return points, repeat_seeds(chosen)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        if point.name == MEMORY:
            return peak_memory(point.settings["clients"])
        lines, wall = timed_run(partial(run_variant, point.settings["variant"]), point.settings)
        return (
            workload_values(point.settings) | round_values(lines, point.settings["rounds"]) | wall
        )

    def report(self, rows: list[dict[str, Value]]) -> dict:
        return {TABLE.name: partial(table, rows)}


def workload_of(budget: dict) -> dict:
    """The ``WORKLOAD`` keys of a budget's settings."""
    return {key: budget[key] for key in WORKLOAD}


def repeat_seeds(budget: dict) -> list[int]:
    """A budget's repeats, the study's seeds: numbered from 1."""
    return list(range(1, budget["repeats"] + 1))


def plain_fedavg(config: RunConfig, num_clients: int) -> list[float]:
    """FedAvg without Flower: seconds of each round (same seeds as flowerbed's client).

    With ``fraction-evaluate`` > 0 every client evaluates the aggregated model on its local
    test split each round, as flowerbed's clients do. With ``FLOWERBED_STAGE_TIMES`` set, its
    stages are timed under flowerbed's stage names (``flowerbed.core.stages``:
    ``benchmarks/round_stages.py``), its rounds as the ``round`` stage."""
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


# --- one timed run ---------------------------------------------------------------------------


def run_variant(variant: str, overrides: dict, clients: int) -> float | None:
    """One run of ``variant`` (``VARIANTS``) with the run config ``overrides``; its stages go
    where ``FLOWERBED_STAGE_TIMES`` says. Returns the wall seconds of a ``flwr run``, else
    None."""
    if variant == PLAIN:
        plain_fedavg(parse_run_config(resolve_run_config(overrides)), clients)
        return None
    if variant == IN_PROCESS:
        run_in_process(overrides, num_clients=clients)
        return None
    return flwr_seconds(variant, simulate(overrides, num_supernodes=clients, num_cpus_per_client=2))


def flwr_seconds(variant: str, flwr: SimulationResult) -> float:
    """The wall seconds of a ``flwr run`` that succeeded; ``RuntimeError`` with the end of its
    log for one that did not (the driver records the run as failed)."""
    if flwr.returncode != 0:
        raise RuntimeError(f"{variant}: flwr run failed:\n{flwr.log[-3000:]}")
    return flwr.seconds


def measuring_environment() -> None:
    """One math thread everywhere (this process, and the SuperLink and the Ray actors, which
    inherit ``OMP_NUM_THREADS``: two threads on a shared, loaded machine can be many times
    slower than one, which would measure the machine, not the framework) and no end-of-run
    report (no part of a round, nor of start-up)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["FLOWERBED_REPORT"] = "0"
    torch.set_num_threads(1)


Run = Callable[[dict, int], float | None]  # (run config overrides, clients) -> wall seconds


def timed_run(run: Run, workload: dict, config: dict | None = None) -> tuple[list[dict], dict]:
    """``run`` on the workload (``WORKLOAD``'s keys) with the run config keys ``config`` (no
    client evaluation unless it says so), in a temporary folder (``measuring_environment``):
    the stage lines it recorded and ``{WALL: seconds}`` where it returned them, else ``{}``."""
    measuring_environment()
    with tempfile.TemporaryDirectory(prefix="overhead-") as folder:
        target = Path(folder) / "stages.jsonl"
        overrides = {
            "num-server-rounds": workload["rounds"],
            "local-epochs": workload["local_epochs"],
            "output-dir": str(Path(folder) / "runs"),
            "fraction-evaluate": 0.0,
            **(config or {}),
        }
        os.environ[ENV] = str(target)
        try:
            wall = run(overrides, workload["clients"])
        finally:
            del os.environ[ENV]
        lines = [json.loads(line) for line in target.read_text().splitlines()]
    return lines, {} if wall is None else {WALL: wall}


def workload_values(settings: dict) -> dict[str, Value]:
    """The values of a timing row that say what ran: the variant and ``WORKLOAD``."""
    return {"variant": settings["variant"], **workload_of(settings)}


def round_values(lines: list[dict], rounds: int) -> dict[str, float]:
    """``{"round/1": seconds, ...}``: each round's ``round`` stage in a run's stage lines;
    ``RuntimeError`` unless every one of ``rounds`` rounds was timed."""
    values = {
        f"{ROUND_KEY}{line['round']}": line["seconds"] for line in lines if line["stage"] == ROUND
    }
    if len(values) != rounds:
        raise RuntimeError(f"{len(values)} rounds timed of {rounds}")
    return values


def rounds_of(row: dict[str, Value]) -> dict[int, float]:
    """A row's seconds of each round, by round number, in order."""
    seconds = {
        int(key[len(ROUND_KEY) :]): value for key, value in row.items() if key.startswith(ROUND_KEY)
    }
    return dict(sorted(seconds.items()))


def steady_round(row: dict[str, Value]) -> float | None:
    """A run's seconds per round at its steady pace: the median of rounds 2..N (round 1 starts
    the Ray actors and warms torch up); None for a run of one round."""
    later = [seconds for number, seconds in rounds_of(row).items() if number >= 2]
    return statistics.median(later) if later else None


def start_up(row: dict[str, Value], steady: float) -> float:
    """A ``flwr run``'s start-up: its wall seconds less its rounds at the ``steady`` pace, so
    that the actors' first-round costs count as start-up, not as a round."""
    return float(row[WALL]) - int(row["rounds"]) * steady


# --- the memory of a large federation ---------------------------------------------------------


def peak_memory(clients: int) -> dict[str, Value]:
    """The peak PSS of a ``flwr run`` of ``clients`` clients (``MEMORY_RUN``), summed over its
    SuperLink and every process that starts; whether the run completed (a run that does not
    fit in memory is a finding, not a failure to retry), in ``measuring_environment``."""
    measuring_environment()
    with tempfile.TemporaryDirectory(prefix="overhead-memory-") as folder:
        home = Path(folder) / "flwr-home"
        home.mkdir()
        overrides = {**MEMORY_RUN, "output-dir": str(Path(folder) / "runs")}
        with PeakMemory(lambda: local_superlink_pids(home)) as peak:
            big = simulate(overrides, num_supernodes=clients, num_cpus_per_client=1, flwr_home=home)
    return {
        "variant": MEMORY,
        "clients": clients,
        "fraction_train": MEMORY_RUN["fraction-train"],
        "cpus": os.cpu_count(),
        "peak_pss_gib": peak.peak_bytes / 2**30,
        "completed": int(big.returncode == 0),
    }


# --- the table ---------------------------------------------------------------------------------


def report(data: Path = DATA) -> str:
    """``table.md``, from the files in ``data``'s folder alone (``table``)."""
    return table(measured_rows(data.parent), data.parent)


def by_repeat(rows: list[dict[str, Value]], value: Callable[[dict], float | None]) -> dict:
    """``{repeat: value(row)}`` of ``rows``, leaving out the rows whose value is None."""
    values = {row["seed"]: value(row) for row in rows}
    return {seed: v for seed, v in values.items() if v is not None}


def spread(values: dict, unit: str, digits: int) -> str:
    """``"4.88 s (4.70 – 5.10 s)"``: the median of ``values`` and their lowest and highest."""
    low, high = min(values.values()), max(values.values())
    median = statistics.median(values.values())
    return f"{median:.{digits}f} {unit} ({low:.{digits}f} – {high:.{digits}f} {unit})"


def variant_cells(steady: dict[str, dict], labels: dict[str, str]) -> list[list[str]]:
    """Per variant of ``labels`` (variant -> label, in order) that has runs: its label, its
    median over repeats of the seconds per round in ``steady`` (variant -> repeat -> seconds)
    and its ratio to the plain loop paired by repeat, the median and the lowest – highest ("1"
    and nothing for the plain loop, nothing where no repeat has both)."""
    cells = []
    for variant, label in labels.items():
        if not steady.get(variant):
            continue
        ratio = paired_ratio(steady[variant], steady.get(PLAIN, {}))
        row = [label, f"{statistics.median(steady[variant].values()):.2f}"]
        cells.append(row + ratio_cells(ratio, variant == PLAIN))
    return cells


def ratio_cells(ratio: Ratio | None, base: bool) -> list[str]:
    """The two cells of a paired ratio: its median and its lowest – highest."""
    if base or ratio is None:
        return ["1", ""] if base else ["", ""]
    return [f"{ratio.median:.2f}x", f"{ratio.low:.2f}x – {ratio.high:.2f}x"]


def table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``table.md``: the seconds per round of each variant and its paired ratio to the plain
    loop, the start-up of ``flwr run`` and the peak memory, each over the repeats; then where
    the rows were measured."""
    timed = [row for row in rows if row["variant"] != MEMORY]
    memory = [row for row in rows if row["variant"] == MEMORY]
    steady = {v: by_repeat([r for r in timed if r["variant"] == v], steady_round) for v in VARIANTS}
    repeats = "/".join(map(str, dict.fromkeys(len(s) for s in steady.values() if s)))
    lines = [
        (
            f"digits, cnn, {joined(timed, 'clients')} clients, {joined(timed, 'local_epochs')}"
            f" local epochs, {joined(timed, 'rounds')} rounds of FedAvg, one torch thread, one"
            f" client at a time; the variants alternate within each of {repeats} repeats;"
            " seconds per round: the median over rounds 2..N of each run."
        ),
        "",
        (
            "| variant | s / round (median of repeats) | ratio to plain, paired by repeat:"
            " median | lowest – highest |"
        ),
        "|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in variant_cells(steady, LABELS)]
    flwr = [r for r in timed if r["variant"] == FLWR and r["seed"] in steady[FLWR]]
    if flwr:
        fixed = by_repeat(flwr, lambda row: start_up(row, steady[FLWR][row["seed"]]))
        lines += [
            "",
            (
                "Start-up of `flwr run` (its wall seconds less its rounds at its steady pace),"
                f" median of the repeats (lowest – highest): {spread(fixed, 's', 1)}."
            ),
        ]
    if memory:
        peaks = by_repeat(memory, lambda row: row["peak_pss_gib"])
        completed = sum(int(row["completed"]) for row in memory)
        lines.append(
            f"Peak memory of a `flwr run` with {joined(memory, 'clients')} clients and"
            f" {float(joined(memory, 'fraction_train')):.0%} participation on"
            f" {joined(memory, 'cpus')} CPUs (PSS summed over the SuperLink and every process it"
            f" starts; {completed} of {len(memory)} runs completed), median of the repeats"
            f" (lowest – highest): {spread(peaks, 'GiB', 2)}."
        )
    provenance = " ".join(f"Measured: {line}" for line in provenance_lines(folder))
    lines += ["", provenance or unrecorded_provenance_line(folder)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(Overhead(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
