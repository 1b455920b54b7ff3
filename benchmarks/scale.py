"""Scale: 1,000 / 10,000 / 100,000 simulated clients through ``flwr run``, 100 trained per round.

Every client holds its natural partition of the FedProx paper's Synthetic(1, 1)
(``dataset='synthetic'``, ``sim-nodes`` = N, ``partitioner='dataset-nodes'``: about 450
samples per client, 60 features, 10 classes). Model ``logreg`` (multinomial logistic
regression, 610 parameters: the paper's model), plain SGD (learning rate 0.01, batch 10, one
local epoch), FedAvg with ``fraction-train`` = 100 / N and no client-side evaluation (the
server evaluates the global model on the held-out test split every round), 1 CPU per client
(two Ray actors on two cores).

The federation is laid out as ``flowerbed run --clients N`` lays it out
(``flowerbed.simulation.federation_layout``, the ``virtual`` layout): above 100 clients, 100
SuperNodes (the round's sample) carry the N clients (run-config ``virtual-clients``), the
handshake asks those 100, and sampling is reproducible from the seed. The ``supernodes``
layout starts one SuperNode per client, Flower's way, with a handshake (``lazy`` asks one node;
``all`` asks every node, about N^2 checks in Flower's engine).

Per run it records:

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
  seed that trained the same clients in every round end with the same model.

The table adds a least-squares line through the points: how memory and seconds per round grow
per 1,000 clients, and each N against the smallest.

A study of the study driver (``flowerbed.experiments.study_cli``): a budget is a sequence of
runs, one point per run (``<position>/<N>``: the same N may come twice, so that two runs of it
with the same seed show whether they trained the same clients, and the smallest N may end the
sequence as it began it, so that a drift of the machine shows), one seed (42), one run at a
time in the sequence's order (``alternate``). Budgets, each published from its own folder
(``--out`` names the others):

* ``full`` (the default, ``results/scale``): 1,000, 10,000, 100,000, 100,000 and 1,000
  clients, virtual, 3 rounds;
* ``quiet`` (``results/scale-quiet``): 1,000, 100,000 and 1,000 clients, virtual, 3 rounds,
  for a machine left alone;
* ``supernodes-lazy`` (``results/scale-supernodes-lazy``): 1,000, 5,000 and 10,000 clients, one
  SuperNode each, the lazy handshake, 3 rounds;
* ``handshake-all`` (``results/scale-handshake-all``): 200 and 1,000 clients, one SuperNode
  each, the handshake that asks every node, 2 rounds;
* ``quick`` (``results/scale/quick``): 20 and 50 clients, 10 trained per round (up to 100
  clients a SuperNode each, in either layout), the handshake that asks every node, 2 rounds:
  a check that the measuring path works, not a measurement (here, at a load average of 13 on
  2 cores, about 4 minutes a run; under such load a run may fail to start its SuperLink, and
  a rerun retries it).

A run is refused (recorded as failed, and run again next time) when less than
``--min-free-gib`` of memory is available (this machine is shared), or less than the data set's
size plus 4 GiB; ``--timeout`` bounds one ``flwr run``. Both are this script's own options,
taken before the study's command line.

    python benchmarks/scale.py                # the full sequence, into results/scale
    python benchmarks/scale.py --budget quiet --out benchmarks/results/scale-quiet
    python benchmarks/scale.py --budget supernodes-lazy --out benchmarks/results/scale-supernodes-lazy
    python benchmarks/scale.py --budget handshake-all --out benchmarks/results/scale-handshake-all
    python benchmarks/scale.py --quick        # into results/scale/quick
    python benchmarks/scale.py --report-only  # table.md from rows.jsonl (--budget, --out: another)

Writes into ``--out``: ``rows.jsonl`` (one row per run), ``measured.jsonl`` (one line per
invocation that measured) and ``table.md``, made from the rows and the provenance beside them
alone, which ``docs/benchmarks.md`` includes from each of the four folders
(``tests/test_published_tables.py`` checks them). The committed rows were measured by the
script before it became a study and converted from its ``runs.csv`` (the measurement's
``measured.json`` kept where there is one); ``results/scale-supernodes-lazy`` also keeps
``runs-before-shared-copy.csv`` and ``table-before-shared-copy.md``, an earlier measurement of
that layout and the table of that time, as they were. To measure a folder anew, remove its
``rows.jsonl`` (and ``measured.json``): a rerun adds only what the rows lack.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import statistics
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
from process_memory import PeakMemory, own_children
from result_tables import joined, unrecorded_provenance_line, write_table

from flowerbed.core import stages
from flowerbed.core.processes import local_superlink_pids
from flowerbed.core.results import round_seconds
from flowerbed.data.fedprox_synthetic import NUM_FEATURES, PAPER_TRAINING, client_sizes
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.simulation import federation_layout, simulate

SEED = 42
VIRTUAL, SUPERNODES = "virtual", "supernodes"  # the layouts (module docstring)
# handshake: what a SuperNode per client is asked (virtual clients are all asked anyway)
VIRTUAL_RUNS = {"rounds": 3, "layout": VIRTUAL, "handshake": "lazy", "per_round": 100}
BUDGETS = {
    "full": {"clients": (1_000, 10_000, 100_000, 100_000, 1_000), **VIRTUAL_RUNS},
    "quiet": {"clients": (1_000, 100_000, 1_000), **VIRTUAL_RUNS},
    "supernodes-lazy": {
        "clients": (1_000, 5_000, 10_000),
        "rounds": 3,
        "layout": SUPERNODES,
        "handshake": "lazy",
        "per_round": 100,
    },
    "handshake-all": {
        "clients": (200, 1_000),
        "rounds": 2,
        "layout": SUPERNODES,
        "handshake": "all",
        "per_round": 100,
    },
    "quick": {
        "clients": (20, 50),
        "rounds": 2,
        "layout": VIRTUAL,
        "handshake": "all",
        "per_round": 10,
    },
}
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
RESULTS = Path(__file__).parent / "results" / "scale"  # the full budget's
# (rows, table.md) of every published budget: full's, and the others' in results/scale-<budget>
PUBLISHED = [
    (folder / ROWS, folder / "table.md")
    for folder in (
        RESULTS,
        *(RESULTS.with_name(f"scale-{b}") for b in ("quiet", "supernodes-lazy", "handshake-all")),
    )
]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"  # includes table.md


class Scale:
    """The study (module docstring): one run per point of a budget's sequence; a run is
    refused below ``min_free_gib`` of available memory, and a ``flwr run`` stopped after
    ``timeout`` seconds."""

    name = "scale"
    budgets = BUDGETS
    default_budget = "full"
    alternate = True

    def __init__(self, min_free_gib: float = 8.0, timeout: float = 3600.0) -> None:
        self.min_free_gib, self.timeout = min_free_gib, timeout

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        settings = {key: value for key, value in chosen.items() if key != "clients"}
        points = [
            Point(f"{position}/{clients}", {"position": position, "clients": clients, **settings})
            for position, clients in enumerate(chosen["clients"], start=1)
        ]
        return points, [SEED]

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        settings = point.settings
        clients = settings["clients"]
        free, needed = available_gib(), max(self.min_free_gib, data_gib(clients, seed) + 4)
        if free < needed:
            raise RuntimeError(
                f"only {free:.1f} GiB available, {needed:.1f} GiB needed (--min-free-gib="
                f"{self.min_free_gib}, the data set and 4 GiB): not starting the {clients}-client"
                " run"
            )
        values = run_one(settings, seed, self.timeout)
        return {"position": settings["position"], "per_round": settings["per_round"]} | values

    def report(self, rows: list[dict[str, Value]]) -> dict:
        return {"table.md": partial(table, rows)} if rows else {}


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


def data_gib(num_clients: int, seed: int = SEED) -> float:
    """One copy of Synthetic(1, 1) for ``num_clients`` clients: float32 features, int64 labels
    and node ids, training and test rows."""
    rows = client_sizes(seed, num_clients).sum()
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


def run_one(settings: dict, seed: int, timeout: float) -> dict[str, Value]:
    """One ``flwr run`` of ``settings`` (a point's: clients, rounds, layout, handshake,
    per_round) in a temporary folder: what the module docstring says a run records."""
    with tempfile.TemporaryDirectory(prefix="flowerbed-scale-") as tmp:
        return measured_run(settings, seed, timeout, Path(tmp))


def measured_run(settings: dict, seed: int, timeout: float, workdir: Path) -> dict[str, Value]:
    num_clients, per_round = settings["clients"], settings["per_round"]
    run_config = {
        **PAPER_TRAINING,
        "sim-nodes": num_clients,
        "local-epochs": 1,
        "num-server-rounds": settings["rounds"],
        "fraction-train": per_round / num_clients,
        "fraction-evaluate": 0.0,
        "min-available-clients": num_clients,
        "handshake": settings["handshake"],
        "seed": seed,
        "output-dir": str(workdir),
        "run-name": f"scale-{num_clients}",
        # a fresh cache per run: the first process generates the set into it, the others map it
        "cache-dir": str(workdir / f"cache-{num_clients}"),
    }
    supernodes = num_clients
    if settings["layout"] == VIRTUAL:
        supernodes, run_config = federation_layout(run_config, num_clients)
    load_before = os.getloadavg()[1]
    stage_file = workdir / f"stages-{num_clients}.jsonl"
    os.environ[stages.ENV] = str(stage_file)  # the run's processes inherit it (core.stages)
    for _attempt in range(3):  # Flower gives its local SuperLink 15 s to start: on a loaded
        home = Path(tempfile.mkdtemp(prefix="flwr-home-", dir=workdir))  # machine, too short
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
        raise RuntimeError(f"{num_clients} clients: flwr run failed:\n{result.log[-3000:]}")
    rows = result.history[1:]
    seconds = round_seconds(result.run_dir)
    trained = [row["clients_trained"] for row in rows]
    if any(count != per_round for count in trained):
        raise RuntimeError(f"{num_clients} clients: {trained} trained per round, not {per_round}")
    handshake_seconds = re.findall(r"answered the handshake in ([0-9.]+) s", result.log)
    evaluation = central_evaluation_seconds(stage_file)
    later = [r for r in range(2, len(seconds) + 1) if r in evaluation] or list(evaluation)
    return {
        "clients": num_clients,
        "supernodes": supernodes,
        # virtual clients are all asked, whatever the run config's handshake says
        "handshake": "all" if "virtual-clients" in run_config else settings["handshake"],
        "model": model_digest(result.run_dir),
        "rounds": settings["rounds"],
        "wall_s": result.seconds,
        "startup_s": result.seconds - sum(seconds),
        "handshake_s": float(handshake_seconds[-1]) if handshake_seconds else float("nan"),
        "round_s": statistics.median(seconds[1:] if len(seconds) > 1 else seconds),
        "evaluation_s": statistics.median(evaluation[r] for r in later) if later else float("nan"),
        "all_rounds_s": " ".join(f"{s:.1f}" for s in seconds),
        "peak_gib": peak.peak_bytes / 2**30,
        "processes": peak.peak_processes,
        "data_gib": data_gib(num_clients, seed),
        "load": (load_before + os.getloadavg()[1]) / 2,  # 5-minute load average, before/after
        **{f"peak_{kind}": gib / 2**30 for kind, gib in peak.peak_by_kind.items()},
    }


def slope_per_thousand(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares line y = a + b x: (b per 1,000 clients, a)."""
    if len(x) < 2:
        return float("nan"), float("nan")
    b, a = np.polyfit(np.asarray(x, dtype=float), np.asarray(y, dtype=float), 1)
    return 1000 * b, a


def table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``table.md``: the runs in the sequence's order, the least-squares lines, each N
    against the smallest, the peak by kind of process, and where the rows were measured."""
    results = sorted(rows, key=lambda r: r["position"])
    kinds = sorted({k for r in results for k in r if k.startswith("peak_") and k != "peak_gib"})
    virtual = all(r.get("supernodes", r["clients"]) < r["clients"] for r in results)
    layout = (
        "virtual clients (the SuperNodes of the round's sample carry the N clients)"
        if virtual
        else f"one SuperNode per client, handshake={results[0]['handshake']}"
    )
    title = (
        f"FedAvg on Synthetic(1, 1), logreg, {joined(results, 'per_round')} clients trained per"
        f" round, flwr run (Ray, 2 CPUs, 1 per client), {layout}"
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
    provenance = " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder)
    lines += ["", provenance]
    return "\n".join(lines) + "\n"


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


def report(data: Path) -> str:
    """``table.md``, from the rows in ``data``'s folder (and the provenance beside them) alone."""
    return table(measured_rows(data.parent), data.parent)


def main(argv: list[str] | None = None) -> int:
    """``--min-free-gib`` and ``--timeout`` (module docstring), then the study's command line
    (``study_cli``)."""
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--min-free-gib", type=float, default=8.0)
    own.add_argument("--timeout", type=float, default=3600.0)
    args, rest = own.parse_known_args(argv)
    study = Scale(args.min_free_gib, args.timeout)
    return study_cli.main(study, RESULTS, __doc__, rest, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
