"""Start-up cost of flowerbed against a bare Flower app, both through ``flwr run``.

Two apps, the same federation (10 SuperNodes, one round, ``client-resources-num-cpus=1``, the
offline ``flwr run`` environment of ``flowerbed.simulation.simulate``):

* **bare**: a numpy-only Flower app generated into a temporary folder (its own pyproject.toml,
  ServerApp and ClientApp): Flower's ``FedAvg`` on one float32 vector, clients that send it
  back with a small change; the floor of any Flower app on Ray;
* **flowerbed**: flowerbed's default run (``fedavg`` on ``digits``, model ``cnn``, 2 local
  epochs) for one round, from the copy this interpreter imports (``simulation.APP_DIR``);
* with ``--compare DIR`` (and ``--compare-label LABEL``), the same run of another copy of
  flowerbed (say, a checkout of the code before a change: ``git archive <commit> | tar -x -C
  DIR``), in the same sequence, so before and after are measured under the same load.

A study of the study driver (``flowerbed.experiments.study_cli``) with two kinds of point:

* ``run/<app>``: one ``flwr run`` of the app: its wall seconds, the CPU seconds of its process
  tree, the 1-minute load average before it (the machine is shared: quote ratios, not
  seconds), and the CPU seconds of every process of the run by command line
  (``process_kind``; a process that lives less than 0.2 s is missed);
* ``stages/<app>`` (flowerbed's copies only): where a flowerbed Ray actor's first seconds go,
  each stage (import torch, the rest of ``flowerbed.client_app``, loading digits, partitioning
  it, the first torch optimizer, then the default run's own work in process once everything is
  imported) run in order in one fresh interpreter, wall and CPU seconds.

The seeds are repeats (numbered from 1), the points alternate within each repeat
(``alternate``), one at a time. Budgets: ``full`` (the default: the runs, 3 repeats; into
``results/startup``), ``stages`` (the stages and the runs, 3 repeats: about 10 minutes on 2
cores; published from ``results/startup_stages``, which ``--out`` names) and ``quick`` (the
stages and the runs, 1 repeat: about two minutes, a check that the measuring path works, not a
measurement, into ``results/startup/quick``).

    python benchmarks/startup.py --compare /tmp/before --compare-label "flowerbed before"
    python benchmarks/startup.py --budget stages --out benchmarks/results/startup_stages \\
        --compare /tmp/before --compare-label "flowerbed before"
    python benchmarks/startup.py --quick
    python benchmarks/startup.py --report-only   # the tables from rows.jsonl
    python benchmarks/startup.py --budget stages --out benchmarks/results/startup_stages --report-only

``--compare`` and ``--compare-label`` are this script's own options, beside the study's
command line (``--help`` lists them, ``measured.jsonl`` records them); every row names the copy it ran (``app_dir``). Writes into ``--out``:
``rows.jsonl`` (one row per run), ``measured.jsonl`` (one line per invocation that measured)
and, made from the rows and the provenance beside them alone, the tables that its rows make:
``table.md`` (per app, the median wall and CPU seconds of its runs and their ratios to the bare
app's), ``stages-table.md`` (the median of every stage over the interpreters) and
``processes-table.md`` (CPU seconds per kind of process); ``docs/benchmarks.md`` includes
``table.md`` of ``results/startup`` and the other two of ``results/startup_stages``
(``tests/test_published_tables.py`` checks them). The committed rows were measured by the
script before it became a study and converted from its CSV files: the runs on 2026-11-23
(``results/startup``, whose ``startup.md`` and ``stages.json``, that script's fuller output
with the import times of each app, are kept as it wrote them), the stages and processes on
2026-11-26 (``measured.json``, their provenance, kept; that script ran 5 interpreters for the
stages, hence 5 stage rows per app against 3 repeats). The tables still name the CSV files the
rows were converted from (``startup.csv``, ``stages.csv``, ``processes.csv``), so that they stay
as published. To measure a folder anew, remove its ``rows.jsonl`` and ``measured.json``: a
rerun adds only what the rows lack.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

from process_memory import TreeSampler, process_tree
from result_tables import table_head, unrecorded_provenance_line, write_table

from flowerbed.core.processes import local_superlink_pids
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.simulation import APP_DIR, simulate

ROUNDS = 1
CLIENTS = 10
CPUS_PER_CLIENT = 1
# `flwr run` gives its local SuperLink 15 s to start: on a loaded machine it may not, and the
# run measures nothing; such a run is started again.
SUPERLINK_LATE = "Failed to start local SuperLink within"
SUPERLINK_TRIES = 3

BARE_APP = {
    "pyproject.toml": """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "bareapp"
version = "0.1.0"
description = "A numpy-only Flower app: the start-up floor flowerbed is compared with"
license = "Apache-2.0"
dependencies = ["flwr[simulation]==1.42.0", "numpy"]

[tool.hatch.build.targets.wheel]
packages = ["bareapp"]

[tool.flwr.app]
publisher = "flowerbed"

[tool.flwr.app.components]
serverapp = "bareapp.server_app:app"
clientapp = "bareapp.client_app:app"

[tool.flwr.app.config]
num-server-rounds = 1
""",
    "bareapp/__init__.py": '"""A numpy-only Flower app."""\n',
    "bareapp/server_app.py": """\
import numpy as np
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=1.0)
    initial = ArrayRecord([np.zeros(10_000, dtype=np.float32)])
    rounds = context.run_config["num-server-rounds"]
    strategy.start(grid=grid, initial_arrays=initial, num_rounds=rounds)
""",
    "bareapp/client_app.py": """\
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    arrays = [a + 0.01 for a in msg.content["arrays"].to_numpy_ndarrays()]
    metrics = MetricRecord({"num-examples": 1})
    content = RecordDict({"arrays": ArrayRecord(arrays), "metrics": metrics})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    metrics = MetricRecord({"num-examples": 1, "loss": 0.0})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
""",
}

# What a flowerbed Ray actor does for the first time, in order, each timed on its own: the
# seconds that a bare Flower app does not spend.
ACTOR_STAGES = (
    ("import flwr.clientapp + numpy (all the bare app imports)", "import flwr.clientapp, numpy"),
    ("import torch", "import torch"),
    ("import flowerbed.client_app (the rest)", "import flowerbed.client_app"),
    (
        "load digits (load_dataset)",
        (
            "from flowerbed.data import load_dataset, partition_indices;"
            " labels = load_dataset('digits').y_train.numpy()"
        ),
    ),
    (
        "partition digits (dirichlet, 10 clients)",
        "partition_indices(labels, 10, 'dirichlet', seed=42, alpha=0.5, min_partition_size=10)",
    ),
    (
        "first torch optimizer (its add_param_group imports torch._dynamo)",
        "torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)",
    ),
)

# The default run's own work once everything is imported: one round of flowerbed's defaults
# (fedavg on digits, cnn, 2 local epochs, 10 clients) in this process, no Ray, no SuperLink.
DEFAULT_RUN_STAGE = (
    "the default run's own work (1 round, 10 clients, in process, imports done)",
    (
        "import flowerbed.inprocess, tempfile\n"
        "with tempfile.TemporaryDirectory() as folder:\n"
        "    flowerbed.inprocess.run_in_process("
        "{'num-server-rounds': 1, 'output-dir': folder}, num_clients=10)"
    ),
)

# Which process of a ``flwr run`` a command line is (the first marker it holds wins), so one
# run of each app can be compared process by process.
PROCESS_KINDS = (
    ("flwr-simulation", "flwr-simulation (runs the ServerApp)"),
    ("ray::ClientAppActor", "Ray actor (ClientApp)"),
    ("ray::", "Ray worker (other)"),
    ("superexec", "SuperExec"),
    ("superlink", "SuperLink"),
    ("raylet", "Ray's own processes"),
    ("gcs_server", "Ray's own processes"),
    ("/ray/", "Ray's own processes"),
)
FLWR_COMMAND = "flwr (the command)"
COMMAND_CHARS = 200  # of a command line kept in a run's row

# Runs (name, statement) pairs in order; prints {name: [wall s, CPU s]}.
STAGE_TIMER = """
import json, sys, time
seconds = {}
for name, statement in json.loads(sys.argv[1]):
    wall, cpu = time.perf_counter(), time.process_time()
    exec(statement)
    seconds[name] = [time.perf_counter() - wall, time.process_time() - cpu]
print(json.dumps(seconds))
"""


RESULTS = Path(__file__).resolve().parent / "results" / "startup"
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
STAGES_BUDGET = "stages"  # published from STAGES_RESULTS, which --out names
STAGES_RESULTS = RESULTS.parent / "startup_stages"
# the stages and processes tables are made of the same rows (report's argument)
STAGE_VALUES, PROCESS_VALUES = f"{ROWS}:stages", f"{ROWS}:processes"
STAGES_TABLE, PROCESSES_TABLE = "stages-table.md", "processes-table.md"
PUBLISHED = [
    (DATA, TABLE),
    (STAGES_RESULTS / STAGE_VALUES, STAGES_RESULTS / STAGES_TABLE),
    (STAGES_RESULTS / PROCESS_VALUES, STAGES_RESULTS / PROCESSES_TABLE),
]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"

RUN, STAGES = "run", "stages"  # the two kinds of point (module docstring)
BARE, FLOWERBED = "bare", "flowerbed"
BUDGETS = {
    "full": {"parts": (RUN,), "repeats": 3},
    STAGES_BUDGET: {"parts": (STAGES, RUN), "repeats": 3},
    "quick": {"parts": (STAGES, RUN), "repeats": 1},
}
# a row's keys of a stage ("wall/<stage>", "cpu/<stage>") and of a run's processes
# ("process/<i>/<field>", i from 0, the flwr command's first)
WALL, CPU, PROCESS = "wall/", "cpu/", "process/"
STAGE_ORDER = [name for name, _ in (*ACTOR_STAGES, DEFAULT_RUN_STAGE)]


class Startup:
    """The study (module docstring): one run per (point, repeat); ``compare``: (label,
    folder) of another copy of flowerbed to run too."""

    name = "startup"
    budgets = BUDGETS
    default_budget = "full"
    alternate = True

    def __init__(self, compare: tuple[str, Path] | None = None) -> None:
        self.apps = {BARE: "", FLOWERBED: str(APP_DIR)}
        if compare is not None:
            self.apps[compare[0]] = str(compare[1].resolve())

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        points = [
            Point(f"{part}/{app}", {"part": part, "app": app, "app_dir": folder})
            for part in chosen["parts"]
            for app, folder in self.apps.items()
            if not (part == STAGES and app == BARE)
        ]
        return points, list(range(1, chosen["repeats"] + 1))

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        settings = point.settings
        labels = {"part": settings["part"], "app": settings["app"]}
        with tempfile.TemporaryDirectory(prefix="flowerbed-startup-") as tmp:
            folder = Path(settings["app_dir"] or write_bare_app(Path(tmp) / BARE))
            if settings["part"] == STAGES:
                return labels | {"app_dir": str(folder)} | stage_values(folder)
            return labels | {"app_dir": str(folder)} | one_run(labels["app"], folder, Path(tmp))

    def report(self, rows: list[dict[str, Value]]) -> dict:
        tables = {
            TABLE.name: (runs_table, [r for r in rows if "wall_seconds" in r]),
            STAGES_TABLE: (stages_table, [r for r in rows if r["part"] == STAGES]),
            PROCESSES_TABLE: (processes_table, [r for r in rows if "processes" in r]),
        }
        return {name: partial(make, chosen) for name, (make, chosen) in tables.items() if chosen}


def write_bare_app(folder: Path) -> Path:
    for name, text in BARE_APP.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def stage_values(app_dir: Path) -> dict[str, float]:
    """The wall and CPU seconds of every stage of ``STAGE_ORDER``, run in order in one fresh
    interpreter with ``app_dir`` first on the path, as in a ``flwr run`` (``python -c`` puts its
    working folder first: it runs in ``app_dir``). CPU seconds barely move with the load of a
    shared machine; wall seconds do."""
    env = {**os.environ, "PYTHONPATH": str(app_dir), "OMP_NUM_THREADS": "1"}
    stages = [*ACTOR_STAGES, DEFAULT_RUN_STAGE]
    command = [sys.executable, "-c", STAGE_TIMER, json.dumps(stages)]
    done = subprocess.run(command, env=env, cwd=app_dir, capture_output=True, text=True, check=True)
    seconds = json.loads(done.stdout.splitlines()[-1])
    return {
        f"{key}{name}": round(both[i], 4)
        for name, both in seconds.items()
        for i, key in enumerate((WALL, CPU))
    }


class TreeCpuSeconds(TreeSampler):
    """CPU seconds (user + system) of a SuperLink and every process it starts (ServerApp
    process, Ray, actors), sampled from ``/proc`` in a thread: per process, the last value
    seen before it ended. A process that lives less than one interval is missed, so this is a
    lower bound; unlike wall time it hardly moves with the load of a shared machine."""

    def __init__(self, flwr_home: Path, interval: float = 0.2) -> None:
        super().__init__(interval)
        self.flwr_home = flwr_home
        self.seconds_by_pid: dict[int, float] = {}
        self.command_by_pid: dict[int, str] = {}
        self._tick = os.sysconf("SC_CLK_TCK")

    def sample(self) -> None:
        for pid in process_tree(local_superlink_pids(self.flwr_home)):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                # a Ray worker renames itself when it becomes an actor ("ray::ClientAppActor")
                # and "ray::IDLE" when it has nothing to do: keep its latest busy title
                if command and ("IDLE" not in command or pid not in self.command_by_pid):
                    self.command_by_pid[pid] = command[:COMMAND_CHARS]
            except OSError:
                continue  # ended meanwhile
            self.seconds_by_pid[pid] = (int(fields[11]) + int(fields[12])) / self._tick

    @property
    def seconds(self) -> float:
        return sum(self.seconds_by_pid.values())


def process_kind(command: str) -> str:
    """What a process of a ``flwr run`` is, from its command line (``PROCESS_KINDS``; else
    the name of its program)."""
    for marker, kind in PROCESS_KINDS:
        if marker in command:
            return kind
    return Path(command.split(" ", 1)[0]).name or "?"


def one_run(app: str, app_dir: Path, work: Path) -> dict[str, Value]:
    """One ``flwr run`` of the app in ``app_dir`` (its outputs and Flower's home in ``work``):
    wall seconds, CPU seconds of the ``flwr`` command (it is waited for: ``RUSAGE_CHILDREN``)
    plus those of the SuperLink's process tree, the 1-minute load before it, and each process's
    (the command's, then the tree's by pid) ``PROCESS`` values: pid, ``process_kind``, CPU
    seconds and command line. ``RuntimeError`` when the run fails."""
    run_config = {"num-server-rounds": ROUNDS}
    if app != BARE:
        run_config["output-dir"] = str(work / "runs")
    for _ in range(SUPERLINK_TRIES):
        load = os.getloadavg()[0]
        home = Path(tempfile.mkdtemp(prefix="flwr-home-", dir=work))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with TreeCpuSeconds(home) as tree:
            result = simulate(
                run_config,
                num_supernodes=CLIENTS,
                num_cpus_per_client=CPUS_PER_CLIENT,
                app_dir=app_dir,
                flwr_home=home,
            )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if SUPERLINK_LATE not in result.log:
            break
        print(f"{app}: {SUPERLINK_LATE} (load {load:.2f}); trying again", flush=True)
    if result.returncode != 0:
        raise RuntimeError(f"{app}: flwr run failed:\n{result.log[-3000:]}")
    cli = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    processes = [(0, FLWR_COMMAND, cli, "flwr run (waited for: RUSAGE_CHILDREN)")] + [
        (
            pid,
            process_kind(tree.command_by_pid.get(pid, "")),
            seconds,
            tree.command_by_pid.get(pid, ""),
        )
        for pid, seconds in sorted(tree.seconds_by_pid.items())
    ]
    values: dict[str, Value] = {
        "wall_seconds": round(result.seconds, 3),
        "cpu_seconds": round(cli + tree.seconds, 2),
        "load_1min": round(load, 2),
        "processes": len(processes),
    }
    for i, (pid, kind, seconds, command) in enumerate(processes):
        values |= {
            f"{PROCESS}{i}/pid": pid,
            f"{PROCESS}{i}/kind": kind,
            f"{PROCESS}{i}/cpu_seconds": round(seconds, 2),
            f"{PROCESS}{i}/command": command,
        }
    return values


def wall_and_cpu(seconds: tuple[float, float]) -> str:
    return f"{seconds[0]:.2f} ({seconds[1]:.2f})"


def provenance(folder: Path) -> str:
    """Where the rows in ``folder`` were measured, one paragraph."""
    return " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder)


def report(data: Path) -> str:
    """The table made from the rows in ``data``'s folder (and the provenance beside them)
    alone: ``stages-table.md`` for their stage values (``STAGE_VALUES``),
    ``processes-table.md`` for their processes (``PROCESS_VALUES``), else ``table.md``."""
    tables = Startup().report(measured_rows(data.parent))
    name = {STAGE_VALUES: STAGES_TABLE, PROCESS_VALUES: PROCESSES_TABLE}.get(data.name, TABLE.name)
    return tables[name](data.parent)


def apps_of(rows: list[dict[str, Value]]) -> list[str]:
    return list(dict.fromkeys(str(r["app"]) for r in rows))


def stages_table(rows: list[dict[str, Value]], folder: Path) -> str:
    """Per stage and app, the median wall and CPU seconds over the fresh interpreters of the
    ``stages`` rows, and where they were measured."""
    apps = apps_of(rows)
    names = {key[len(WALL) :] for r in rows for key in r if key.startswith(WALL)}
    stages = [s for s in STAGE_ORDER if s in names] + sorted(names - set(STAGE_ORDER))
    interpreters = len(rows) // len(apps)

    def cell(app: str, stage: str) -> str:
        chosen = [r for r in rows if r["app"] == app and f"{WALL}{stage}" in r]
        if not chosen:
            return "–"
        return wall_and_cpu(
            tuple(statistics.median(r[f"{key}{stage}"] for r in chosen) for key in (WALL, CPU))
        )

    caption = (
        "A flowerbed Ray actor's first steps, each stage run in order in fresh interpreters"
        f" (median of {interpreters}, `stages.csv`), wall s (CPU s); the last stage is the"
        f" default run in process once everything is imported. {provenance(folder)}"
    )
    lines = table_head(caption, "stage", apps)
    lines += [
        f"| {stage} | " + " | ".join(cell(app, stage) for app in apps) + " |" for stage in stages
    ]
    return "\n".join(lines) + "\n"


def process_records(rows: list[dict[str, Value]]) -> list[dict[str, Value]]:
    """One record per process of every run (app, repeat, kind, CPU seconds), runs in the rows'
    order, each run's processes in its order."""
    return [
        {
            "app": r["app"],
            "repeat": r["seed"],
            "kind": r[f"{PROCESS}{i}/kind"],
            "cpu_seconds": r[f"{PROCESS}{i}/cpu_seconds"],
        }
        for r in rows
        for i in range(int(r["processes"]))
    ]


def processes_table(rows: list[dict[str, Value]], folder: Path) -> str:
    """Per kind of process (``process_kind``) and app, the CPU seconds of one ``flwr run``:
    the median over the runs of the kind's sum, and how many processes of that kind a run had
    with the median CPU seconds of each; a total row."""
    records = process_records(rows)
    apps = apps_of(records)
    kinds = list(dict.fromkeys(r["kind"] for r in records))
    repeats = sorted({r["repeat"] for r in records})

    def cell(app: str, kind: str | None) -> str:
        def chosen(repeat: int) -> list[float]:
            return [
                r["cpu_seconds"]
                for r in records
                if r["app"] == app and r["repeat"] == repeat and kind in (None, r["kind"])
            ]

        sums = [sum(chosen(repeat)) for repeat in repeats]
        each = [value for repeat in repeats for value in chosen(repeat)]
        if not each:
            return "–"
        count = round(len(each) / len(repeats))
        return f"{statistics.median(sums):.1f} ({count} × {statistics.median(each):.1f})"

    caption = (
        f"CPU s of every process of a `flwr run` ({CLIENTS} SuperNodes, {ROUNDS} round), by"
        f" command line: median over {len(repeats)} run(s) of each app of the kind's sum"
        " (processes × median CPU s of one; `processes.csv`). A process that lives less than"
        f" 0.2 s is missed. {provenance(folder)}"
    )
    lines = table_head(caption, "process", apps)
    lines += [f"| {kind} | " + " | ".join(cell(app, kind) for app in apps) + " |" for kind in kinds]
    lines.append("| all | " + " | ".join(cell(app, None) for app in apps) + " |")
    return "\n".join(lines) + "\n"


def runs_table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``table.md``: per app, the median wall and CPU seconds of its runs and their ratios to
    the bare app's, the 1-minute load range before the runs, and where they were measured
    (none is said for the rows converted from ``startup.csv``, whose provenance was not
    recorded)."""
    apps = apps_of(rows)
    wall, cpu = (
        {app: statistics.median(r[key] for r in rows if r["app"] == app) for app in apps}
        for key in ("wall_seconds", "cpu_seconds")
    )
    loads = [r["load_1min"] for r in rows]
    repeats = len({r["seed"] for r in rows})
    lines = [
        (
            f"`flwr run`, {CLIENTS} SuperNodes, {ROUNDS} round, client-resources-num-cpus="
            f"{CPUS_PER_CLIENT}: median of {repeats} alternating runs of each app (`startup.csv`);"
            " CPU s: the process tree's; 1-minute load average before the runs"
            f" {min(loads):.2f} to {max(loads):.2f}."
        ),
        "",
        "| app | runs | wall s | ratio to bare | CPU s | ratio to bare |",
        "|---|---|---|---|---|---|",
        *(
            f"| {app} | {sum(r['app'] == app for r in rows)} | {wall[app]:.1f} |"
            f" {wall[app] / wall[BARE]:.2f} | {cpu[app]:.1f} | {cpu[app] / cpu[BARE]:.2f} |"
            for app in apps
        ),
    ]
    measured = measurement_lines(folder)
    return "\n".join(lines + (["", " ".join(measured)] if measured else [])) + "\n"


def options() -> argparse.ArgumentParser:
    """This script's own options (module docstring), beside the study's command line
    (``study_cli``)."""
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument(
        "--compare", type=Path, help="another copy of flowerbed to run beside this one"
    )
    own.add_argument(
        "--compare-label",
        default="flowerbed (compared)",
        help="its name in the tables (default: flowerbed (compared))",
    )
    return own


def main(argv: list[str] | None = None) -> int:
    def study(own: argparse.Namespace) -> Startup:
        return Startup(None if own.compare is None else (own.compare_label, own.compare))

    return study_cli.main(study, RESULTS, __doc__, argv, write=write_table, options=options())


if __name__ == "__main__":
    raise SystemExit(main())
