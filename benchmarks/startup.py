"""Start-up cost of flowerbed against a bare Flower app, both through ``flwr run``.

Two apps, the same federation (10 SuperNodes, one round, ``client-resources-num-cpus=1``, the
offline ``flwr run`` environment of ``flowerbed.simulation.simulate``):

* **bare**: a numpy-only Flower app generated into a temporary folder (its own pyproject.toml,
  ServerApp and ClientApp): Flower's ``FedAvg`` on one float32 vector, clients that send it
  back with a small change; the floor of any Flower app on Ray;
* **flowerbed**: flowerbed's default run (``fedavg`` on ``digits``, model ``cnn``, 2 local
  epochs) for one round, from the copy this interpreter imports (``simulation.APP_DIR``);
* with ``--compare DIR``, the same run of another copy of flowerbed (say, a checkout of the
  code before a change: ``git archive <commit> | tar -x -C DIR``), in the same sequence, so
  before and after are measured under the same load.

The runs alternate, ``--repeats`` times each (default 3, ``--quick`` 1); the table has the
median wall time of each and its ratio to the bare app, and the median over 5 fresh
interpreters of the time to import each app's ClientApp and ServerApp module. A second table
says where a flowerbed Ray actor's first seconds go (import torch, the rest of
``flowerbed.client_app``, loading digits, partitioning it, the first torch optimizer), each
timed in a fresh interpreter. The 1-minute load average before every run is recorded (the machine is shared:
quote ratios, not seconds).

    python benchmarks/startup.py                                   # 3 runs of each
    python benchmarks/startup.py --quick                           # 1 run of each
    python benchmarks/startup.py --compare /tmp/before --compare-label "before"

Outputs under ``--out`` (default ``benchmarks/results/startup``; ``--quick``: ``<out>/quick``):
``startup.md`` (the tables, also printed), ``startup.csv`` (one row per run),
``stages.json`` (the import and stage timings of ``startup.md``) and ``table.md``: the run
table made from ``startup.csv`` alone (``report``, ``--report-only``), which
``docs/benchmarks.md`` includes.

    python benchmarks/startup.py --report-only                     # the tables from their data

``--stages-only`` measures only what a flowerbed process pays, in a few minutes: the stages of
the second table plus the default run's own work in process once everything is imported
(``DEFAULT_RUN_STAGE``), one row per fresh interpreter and stage in ``stages.csv``, and
``--repeats`` alternating runs of each app with the CPU seconds of every process of the run by
command line (``processes.csv``, one row per process; ``process_kind`` names it), their
provenance in ``stages-measured.json`` and their tables ``stages-table.md`` and
``processes-table.md`` (``report``; ``PUBLISHED`` lists them):

    python benchmarks/startup.py --stages-only [--compare DIR --compare-label LABEL]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from process_memory import TreeSampler, process_tree
from result_tables import provenance_line, read_runs, record_provenance, table_head

from flowerbed.core.processes import local_superlink_pids
from flowerbed.core.results import write_csv
from flowerbed.simulation import APP_DIR, simulate

ROUNDS = 1
CLIENTS = 10
CPUS_PER_CLIENT = 1
IMPORT_REPEATS = 5
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

# What each app's processes import first: the ClientApp in every Ray actor, the ServerApp once.
BARE_MODULES = ("bareapp.client_app", "bareapp.server_app")
FLOWERBED_MODULES = ("flowerbed.client_app", "flowerbed.server_app")

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
COMMAND_CHARS = 200  # of a command line kept in processes.csv

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


def write_bare_app(folder: Path) -> Path:
    for name, text in BARE_APP.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def stage_rows(stages, app_dir: Path) -> list[dict[str, list[float]]]:
    """``{stage: [wall s, CPU s]}`` of every stage, run in order in each of ``IMPORT_REPEATS``
    fresh interpreters with ``app_dir`` first on the path, as in a ``flwr run`` (``python -c``
    puts its working folder first: it runs in ``app_dir``); one dict per interpreter. CPU
    seconds barely move with the load of a shared machine; wall seconds do."""
    env = {**os.environ, "PYTHONPATH": str(app_dir), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", STAGE_TIMER, json.dumps(stages)]
    return [
        json.loads(
            subprocess.run(
                command, env=env, cwd=app_dir, capture_output=True, text=True, check=True
            ).stdout.splitlines()[-1]
        )
        for _ in range(IMPORT_REPEATS)
    ]


def stage_seconds(stages, app_dir: Path) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds of every stage over the interpreters of ``stage_rows``."""
    rows = stage_rows(stages, app_dir)
    return {
        name: tuple(statistics.median(row[name][i] for row in rows) for i in range(2))
        for name, _ in stages
    }


def import_seconds(module: str, app_dir: Path) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``import module`` in a fresh interpreter."""
    return stage_seconds([("import", f"import {module}")], app_dir)["import"]


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


def one_run(app: str, app_dir: Path, output_dir: Path, processes: list[dict] | None = None):
    """One ``flwr run``: wall seconds, and CPU seconds of the ``flwr`` command (it is waited
    for: ``RUSAGE_CHILDREN``) plus those of the SuperLink's process tree. With ``processes``,
    appends one row per process (the command's and every one of the tree's): its command line,
    ``process_kind`` and CPU seconds."""
    run_config = {"num-server-rounds": ROUNDS}
    if app != "bare":
        run_config["output-dir"] = str(output_dir)
    for _ in range(SUPERLINK_TRIES):
        load = os.getloadavg()[0]
        home = Path(tempfile.mkdtemp(prefix="flwr-home-", dir=output_dir.parent))
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
        raise SystemExit(f"{app}: flwr run failed:\n{result.log[-3000:]}")
    cli = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cpu = cli + tree.seconds
    print(f"{app}: {result.seconds:.1f} s, {cpu:.1f} CPU s (load {load:.2f})", flush=True)
    if processes is not None:
        processes.append(
            {
                "app": app,
                "pid": 0,
                "kind": FLWR_COMMAND,
                "cpu_seconds": round(cli, 2),
                "command": "flwr run (waited for: RUSAGE_CHILDREN)",
            }
        )
        processes.extend(
            {
                "app": app,
                "pid": pid,
                "kind": process_kind(tree.command_by_pid.get(pid, "")),
                "cpu_seconds": round(seconds, 2),
                "command": tree.command_by_pid.get(pid, ""),
            }
            for pid, seconds in sorted(tree.seconds_by_pid.items())
        )
    return {
        "app": app,
        "seconds": round(result.seconds, 3),
        "cpu_seconds": round(cpu, 2),
        "load_1min": round(load, 2),
    }


def wall_and_cpu(seconds: tuple[float, float]) -> str:
    return f"{seconds[0]:.2f} ({seconds[1]:.2f})"


RESULTS = Path(__file__).resolve().parent / "results" / "startup"
# what ``report`` reads and writes, and the page that includes the tables
DATA = RESULTS / "startup.csv"
TABLE = RESULTS / "table.md"
# ``--stages-only``: the stage timings (one row per interpreter and stage), the CPU seconds of
# every process of one run of each app, and where they were measured
STAGES = "stages.csv"
PROCESSES = "processes.csv"
STAGES_PROVENANCE = "stages-measured.json"
STAGES_TABLES = {STAGES: "stages-table.md", PROCESSES: "processes-table.md"}
PUBLISHED = [(DATA, TABLE)] + [
    (RESULTS / data, RESULTS / table) for data, table in STAGES_TABLES.items()
]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"

STAGE_FIELDS = ["app", "interpreter", "stage", "wall_s", "cpu_s"]
PROCESS_FIELDS = ["app", "repeat", "pid", "kind", "cpu_seconds", "command"]


def report(data: Path) -> str:
    """The table made from ``data`` alone: ``stages_report`` for ``stages.csv``,
    ``processes_report`` for ``processes.csv``, else ``runs_report`` (``startup.csv``)."""
    if data.name == STAGES:
        return stages_report(data)
    if data.name == PROCESSES:
        return processes_report(data)
    return runs_report(data)


def stages_report(data: Path) -> str:
    """Per stage and app, the median wall and CPU seconds over the fresh interpreters of
    ``stages.csv``, and where they were measured."""
    rows = read_runs(data, ("wall_s", "cpu_s"), ("interpreter",))
    apps = list(dict.fromkeys(r["app"] for r in rows))
    stages = list(dict.fromkeys(r["stage"] for r in rows))
    interpreters = len({(r["app"], r["interpreter"]) for r in rows}) // len(apps)

    def cell(app: str, stage: str) -> str:
        chosen = [r for r in rows if r["app"] == app and r["stage"] == stage]
        if not chosen:
            return "–"
        return wall_and_cpu(
            tuple(statistics.median(r[key] for r in chosen) for key in ("wall_s", "cpu_s"))
        )

    caption = (
        "A flowerbed Ray actor's first steps, each stage run in order in fresh interpreters"
        f" (median of {interpreters}, `{STAGES}`), wall s (CPU s); the last stage is the"
        f" default run in process once everything is imported. {provenance_line(data.parent, STAGES_PROVENANCE)}"
    )
    lines = table_head(caption, "stage", apps)
    lines += [
        f"| {stage} | " + " | ".join(cell(app, stage) for app in apps) + " |" for stage in stages
    ]
    return "\n".join(lines) + "\n"


def processes_report(data: Path) -> str:
    """Per kind of process (``process_kind``) and app, the CPU seconds of one ``flwr run``:
    the median over the runs of ``processes.csv`` of the kind's sum, and how many processes
    of that kind a run had with the median CPU seconds of each; a total row."""
    rows = read_runs(data, ("cpu_seconds",), ("repeat", "pid"))
    apps = list(dict.fromkeys(r["app"] for r in rows))
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    repeats = sorted({r["repeat"] for r in rows})

    def cell(app: str, kind: str | None) -> str:
        def chosen(repeat: int) -> list[float]:
            return [
                r["cpu_seconds"]
                for r in rows
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
        f" (processes × median CPU s of one; `{PROCESSES}`). A process that lives less than"
        f" 0.2 s is missed. {provenance_line(data.parent, STAGES_PROVENANCE)}"
    )
    lines = table_head(caption, "process", apps)
    lines += [f"| {kind} | " + " | ".join(cell(app, kind) for app in apps) + " |" for kind in kinds]
    lines.append("| all | " + " | ".join(cell(app, None) for app in apps) + " |")
    return "\n".join(lines) + "\n"


def runs_report(data: Path) -> str:
    """``table.md`` from ``startup.csv`` alone: per app, the median wall and CPU seconds of its
    runs and their ratios to the bare app's, and the 1-minute load range before the runs."""
    with data.open() as f:
        runs = list(csv.DictReader(f))
    apps = list(dict.fromkeys(r["app"] for r in runs))
    wall, cpu = (
        {app: statistics.median(float(r[key]) for r in runs if r["app"] == app) for app in apps}
        for key in ("seconds", "cpu_seconds")
    )
    loads = [float(r["load_1min"]) for r in runs]
    repeats = len({r["repeat"] for r in runs})
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
            f"| {app} | {sum(r['app'] == app for r in runs)} | {wall[app]:.1f} |"
            f" {wall[app] / wall['bare']:.2f} | {cpu[app]:.1f} | {cpu[app] / cpu['bare']:.2f} |"
            for app in apps
        ),
    ]
    return "\n".join(lines) + "\n"


def run_report(
    apps: dict[str, Path],
    runs: list[dict],
    imports: dict[str, tuple[tuple[float, float], tuple[float, float]]],
    stages: dict[str, dict[str, tuple[float, float]]],
    repeats: int,
) -> str:
    wall, cpu = (
        {app: statistics.median(r[key] for r in runs if r["app"] == app) for app in apps}
        for key in ("seconds", "cpu_seconds")
    )
    loads = [r["load_1min"] for r in runs]
    copies = "; ".join(f"{app} from {apps[app]}" for app in stages)
    setup = (
        f"`flwr run`, {CLIENTS} SuperNodes, {ROUNDS} round, client-resources-num-cpus="
        f"{CPUS_PER_CLIENT}, {os.cpu_count()} CPUs; median of {repeats} alternating runs;"
        f" imports: median of {IMPORT_REPEATS} fresh interpreters; {copies}; 1-minute load"
        f" average before the runs {min(loads):.2f} to {max(loads):.2f}."
    )
    lines = [
        setup,
        "",
        (
            "| app | wall s | ratio to bare | CPU s | ratio to bare | import ClientApp s (CPU s)"
            " | import ServerApp s (CPU s) |"
        ),
        "|---|---|---|---|---|---|---|",
        *(
            f"| {app} | {wall[app]:.1f} | {wall[app] / wall['bare']:.2f} | {cpu[app]:.1f} |"
            f" {cpu[app] / cpu['bare']:.2f} | {wall_and_cpu(imports[app][0])} |"
            f" {wall_and_cpu(imports[app][1])} |"
            for app in apps
        ),
        "",
        f"A flowerbed Ray actor's first steps, wall s (CPU s), {IMPORT_REPEATS} interpreters:",
        "",
        "| stage | " + " | ".join(stages) + " |",
        "|---|" + "---|" * len(stages),
        *(
            f"| {name} | " + " | ".join(wall_and_cpu(stages[app][name]) for app in stages) + " |"
            for name, _ in ACTOR_STAGES
        ),
    ]
    return "\n".join(lines) + "\n"


def measure_stages(apps: dict[str, Path], repeats: int, out: Path, work: Path) -> None:
    """``--stages-only``: the stages of ``ACTOR_STAGES`` and ``DEFAULT_RUN_STAGE`` in
    ``IMPORT_REPEATS`` fresh interpreters per flowerbed app (``stages.csv``, one row per
    interpreter and stage), and ``repeats`` alternating ``flwr run`` of each app with the CPU
    seconds of every process (``processes.csv``); then their provenance and tables."""
    stages = [*ACTOR_STAGES, DEFAULT_RUN_STAGE]
    stage_table = [
        {
            "app": app,
            "interpreter": number,
            "stage": name,
            "wall_s": round(wall, 4),
            "cpu_s": round(cpu, 4),
        }
        for app, folder in apps.items()
        if app != "bare"
        for number, row in enumerate(stage_rows(stages, folder), start=1)
        for name, (wall, cpu) in row.items()
    ]
    write_csv(out / STAGES, stage_table, STAGE_FIELDS)
    processes: list[dict] = []
    for repeat in range(1, repeats + 1):
        for app, folder in apps.items():
            before = len(processes)
            one_run(app, folder, work / "runs", processes)
            for row in processes[before:]:
                row["repeat"] = repeat
    write_csv(out / PROCESSES, processes, PROCESS_FIELDS)
    record_provenance(out, sys.argv, file=STAGES_PROVENANCE)
    for data, table in STAGES_TABLES.items():
        text = report(out / data)
        (out / table).write_text(text)
        print("\n" + text, flush=True)
    print(f"written: {out / STAGES}, {out / PROCESSES}, their tables, {out / STAGES_PROVENANCE}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one run of each app")
    parser.add_argument("--compare", type=Path, help="another copy of flowerbed to run too")
    parser.add_argument("--compare-label", default="flowerbed (compared)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/startup"))
    parser.add_argument(
        "--report-only", action="store_true", help="the tables from their data files"
    )
    parser.add_argument(
        "--stages-only",
        action="store_true",
        help="only the stage timings and the per-process CPU seconds (no run table)",
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, not {args.repeats}")
    if args.report_only:
        pairs = [("startup.csv", "table.md"), *STAGES_TABLES.items()]
        for data, table in pairs:
            if (args.out / data).is_file():
                (args.out / table).write_text(report(args.out / data))
                print((args.out / table).read_text())
        return
    repeats = 1 if args.quick else args.repeats
    out = args.out / "quick" if args.quick else args.out
    out.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="flowerbed-startup-") as tmp:
        apps = {"bare": write_bare_app(Path(tmp) / "bare"), "flowerbed": APP_DIR}
        if args.compare:
            apps[args.compare_label] = args.compare.resolve()
        if args.stages_only:
            measure_stages(apps, repeats, out, Path(tmp))
            return
        imports = {
            app: tuple(
                import_seconds(module, folder)
                for module in (BARE_MODULES if app == "bare" else FLOWERBED_MODULES)
            )
            for app, folder in apps.items()
        }
        stages = {
            app: stage_seconds(ACTOR_STAGES, folder)
            for app, folder in apps.items()
            if app != "bare"
        }
        runs = [
            {"repeat": repeat, **one_run(app, folder, Path(tmp) / "runs")}
            for repeat in range(1, repeats + 1)
            for app, folder in apps.items()
        ]

    text = run_report(apps, runs, imports, stages, repeats)
    print("\n" + text)
    (out / "startup.md").write_text(text)
    with open(out / "startup.csv", "w", newline="") as f:
        writer = csv.DictWriter(
            f, fieldnames=["repeat", "app", "seconds", "cpu_seconds", "load_1min"]
        )
        writer.writeheader()
        writer.writerows(runs)
    (out / "stages.json").write_text(
        json.dumps({"imports": imports, "stages": stages}, indent=1) + "\n"
    )
    record_provenance(out, sys.argv)
    (out / "table.md").write_text(report(out / "startup.csv"))
    print(f"written: {out / 'startup.md'}, {out / 'startup.csv'}, {out / 'table.md'}")


if __name__ == "__main__":
    main()
