"""Peak memory of a 10-client ``flwr run`` on a PathMNIST-like set at 64 px: every process
holding its own float32 copy of the data set (before) against the memory-mapped image cache
(after).

Every run writes its own ``pathmnist_64.npz`` in the MedMNIST layout into a temporary data
folder: uint8 images (N, 64, 64, 3) and labels (N, 1) for train, val and test, 9 classes,
PathMNIST's held-out counts (10,004 / 7,180) and a budget's numbers of training images (the
full set: 89,996), the same pixels for the same counts (seed 0). The pixels are random, hence
incompressible: the npz is as large as its arrays (real images compress, which changes the
file, not a run's memory).

* before: the app in ``--before-app`` (a checkout of the code without the image cache), run
  with ``PYTHONPATH`` pointing there;
* after: this checkout; ``cold`` builds the cache during the run, ``warm`` maps the cache that
  one process loading the set built before it.

A study of the study driver (``flowerbed.experiments.study_cli``) in two parts, a budget each
(their repeats differ):

* ``runs`` (the default, into ``results/memory``): one ``flwr run`` per point
  (``run/<code>/<images>[/<cache>]``): FedAvg, model ``cnn``, iid partition, 10 SuperNodes
  with one CPU each (two Ray actors on two cores), one round of one local epoch in which every
  client trains and evaluates (so both actors load the data set: with a fraction of the
  clients, Ray may hand them all to one actor), and the ServerApp's central evaluation on the
  test split. Memory: PSS and RSS summed over the SuperLink and every process it starts,
  sampled every 0.25 s (``process_memory.PeakMemory``; RSS counts a shared page once per process
  that maps it). Before needs about 13 GB per process at 90,000 images (the float32 copy plus
  numpy's temporaries while it is standardised; the ServerApp and both actors each hold one),
  more than a shared 24 GB machine can give, so it runs at 5,000 and 10,000 training images
  (the test split keeps its 7,180), after at those and at the full count, cold and warm; the
  table extrapolates before's peak to the full count, linearly in the training images. One
  run per point.
* ``load`` (published from ``results/memory_load``, which ``--out`` names): the peak RSS of
  one fresh process that imports flowerbed and (``load/<code>/<images>[/<cache>]``) loads the
  data set, the kernel's high-water mark (``VmHWM``), before at 5,000, 10,000 and 20,000
  training images (the table extrapolates it to the full count), after at those (cold) and at
  the full count (cold, warm, and warm then reading a client's 2,000 random training images
  in batches, with the pages of its map that are resident); ``load/reading`` times reading a
  client's 2,000 images in batches from the map against a float32 tensor of the same rows,
  and one cnn epoch on each, in this process with one thread; ``load/cache-sizes`` measures the
  bytes of the image cache at 64, 128 and 224 px (1,000 random training images at each size).
  3 repeats.

The seeds are the repeats (numbered from 1); the points alternate within each repeat, one at a
time (``alternate``). ``quick``: both parts, before at 1,000 and 2,000 training images and
after at those and at 4,000 (the full set's place), 500 val and 500 test images, a client's
share of 500 images, 200 images for the cache sizes, one repeat, into
``results/memory/quick``: a check that the measuring path works, not a measurement (here, at a
load average of 5 to 25 on 2 cores, 2.5 to 4 minutes a ``flwr run``, 4.5 minutes the load
part; under such load a ``flwr run`` may fail to start, and a rerun retries it). Before's
counts keep its copies within a few GiB on the shared machine: 10,000 images in the three
processes of a run, 20,000 in the one process of a load. A run that fails (a ``flwr run`` that
did not complete, a before point without ``--before-app``) is recorded as failed and runs
again next time.

    python benchmarks/memory.py --before-app <checkout without the cache>    # the runs
    python benchmarks/memory.py --before-app <checkout> --budget load --out benchmarks/results/memory_load
    python benchmarks/memory.py --before-app <checkout> --quick
    python benchmarks/memory.py --report-only    # table.md from rows.jsonl
    python benchmarks/memory.py --budget load --out benchmarks/results/memory_load --report-only

``--before-app`` is this script's own option (``--help`` lists it, ``measured.jsonl`` records it), needed
by the before points (not by ``--report-only``); a row names the copy it ran (``app_dir``).
Writes into ``--out``: ``rows.jsonl`` (one row per run), ``measured.jsonl`` (one line per
invocation that measured) and, made from the rows and the provenance beside them alone,
``table.md`` (the runs' peaks, the extrapolation and the before / after ratios) where the rows
hold runs and ``load.md`` (the median one-process peaks, the reading times and the cache
sizes) where they hold the load part; ``docs/benchmarks.md`` includes ``table.md`` of
``results/memory`` and ``load.md`` of ``results/memory_load`` (``tests/test_published_tables.py``
checks both). The committed rows were measured by the script before it became a study and
converted from its ``runs.json`` (the runs, whose fuller output ``runs.md``, with the sizes of
the npz and of the cache, is kept as it wrote it) and ``load.json`` (the load part, measured on
2026-11-26: ``measured.json``, its provenance, kept; ``quick-load.md`` in ``results/memory`` is
an older quick run's output, kept as it was); the tables still name those files, so that they
stay as published. That script measured the cache sizes once, not in each repeat; the two
repeats it lacked (``load/cache-sizes`` in repeats 2 and 3) were measured on 2026-11-28, with
the same sizes. To measure a folder anew,
remove its ``rows.jsonl`` (and ``measured.json``): a rerun adds only what the rows lack.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from process_memory import PeakMemory
from result_tables import unrecorded_provenance_line, write_table

from flowerbed.core.processes import local_superlink_pids
from flowerbed.data import load_dataset
from flowerbed.data.mapped_images import take
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.models import build_model
from flowerbed.simulation import APP_DIR, simulate
from flowerbed.training.loops import minibatches, train_local

TRAIN, VAL, TEST = 89_996, 10_004, 7_180  # PathMNIST's splits
SIZE, CHANNELS, CLASSES = 64, 3, 9
CLIENTS = 10
RESULTS = Path(__file__).resolve().parent / "results" / "memory"
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
LOAD_BUDGET = "load"  # published from LOAD_RESULTS, which --out names
LOAD_RESULTS = RESULTS.parent / "memory_load"
LOAD_VALUES = f"{ROWS}:load"  # report's argument for load.md: the rows seen as its data
LOAD_TABLE = "load.md"
PUBLISHED = ((DATA, TABLE), (LOAD_RESULTS / LOAD_VALUES, LOAD_RESULTS / LOAD_TABLE))
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BEFORE, AFTER = "before", "after"
# the parts (module docstring): a row's "part"
RUNS, PEAKS, READING, SIZES = "runs", "peaks", "reading", "sizes"
BUDGETS = {
    "runs": {"parts": (RUNS,), "before": (5_000, 10_000), "full": TRAIN, "repeats": 1},
    LOAD_BUDGET: {
        "parts": (PEAKS, READING, SIZES),
        "before": (5_000, 10_000, 20_000),
        "full": TRAIN,
        "repeats": 3,
        "share": 2_000,
        "size_images": 1_000,
    },
    "quick": {
        "parts": (RUNS, PEAKS, READING, SIZES),
        "before": (1_000, 2_000),
        "full": 4_000,
        "repeats": 1,
        "held_out": (500, 500),
        "share": 500,
        "size_images": 200,
    },
}
CACHE_SIZES = (64, 128, 224)  # image sizes whose cache bytes are measured
# the reading inputs: a row's keys "read_s/<input>" and "train_s/<input>", and their labels
INPUTS = {"mapped": "mapped view (after)", "tensor": "float32 tensor (before)"}
BASE_INPUT = "tensor"


class Memory:
    """The study (module docstring): one run per (point, repeat); ``before_app``: the
    checkout without the image cache that the before points run."""

    name = "memory"
    budgets = BUDGETS
    default_budget = "runs"
    alternate = True

    def __init__(self, before_app: Path | None = None) -> None:
        self.before_app = None if before_app is None else before_app.resolve()

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        held_out = {"held_out": list(chosen.get("held_out", (VAL, TEST)))}
        points = []
        if RUNS in chosen["parts"]:
            points += code_points("run", RUNS, chosen, held_out)
        if PEAKS in chosen["parts"]:
            either = {"code": "either", "train_images": 0, "cache": "-", "mode": "import"}
            read = {"mode": f"read {chosen['share']}", "share": chosen["share"]}
            points.append(Point("load/import", {"part": PEAKS, **either}))
            points += code_points("load", PEAKS, chosen, {"mode": "load", **held_out})
            warm = points[-1]
            points.append(Point(f"{warm.name}/read", {**warm.settings, **read}))
        if READING in chosen["parts"]:
            settings = {"part": READING, "train_images": chosen["full"], "share": chosen["share"]}
            points.append(Point("load/reading", settings | held_out))
        if SIZES in chosen["parts"]:
            points.append(
                Point("load/cache-sizes", {"part": SIZES, "images": chosen["size_images"]})
            )
        return points, list(range(1, chosen["repeats"] + 1))

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        os.environ["OMP_NUM_THREADS"] = "1"  # one math thread per actor (see overhead.py)
        settings = point.settings
        part = settings["part"]
        with tempfile.TemporaryDirectory(prefix="flowerbed-memory-") as tmp:
            work = Path(tmp)
            if part == SIZES:
                values = cache_sizes(work, settings["images"])
            elif part == READING:
                values = reading_times(data_folder(work, settings), settings["share"])
            else:
                app = self.app_dir(settings["code"])
                measured = flwr_run if part == RUNS else load_peak
                values = {"app_dir": str(app)} | measured(app, settings, work)
        return {"part": part} | values

    def app_dir(self, code: str) -> Path:
        """The copy of flowerbed a point of ``code`` runs: ``before_app`` for before."""
        if code != BEFORE:
            return APP_DIR
        if self.before_app is None:
            raise ValueError("a before point needs --before-app (a checkout without the cache)")
        return self.before_app

    def report(self, rows: list[dict[str, Value]]) -> dict:
        runs = [r for r in rows if r["part"] == RUNS]
        load = [r for r in rows if r["part"] != RUNS]
        tables = {TABLE.name: partial(runs_table, runs)} if runs else {}
        if any(r["part"] == PEAKS for r in load):
            tables[LOAD_TABLE] = partial(load_table, load)
        return tables


def code_points(prefix: str, part: str, budget: dict, settings: dict) -> list[Point]:
    """Before and after (cold) at each of the budget's before counts, then after at the full
    count, cold and warm: ``<prefix>/<code>/<images>[/<cache>]``."""
    chosen = [(BEFORE, n, "-") for n in budget["before"]]
    chosen = [(code, n, cache) for b in chosen for code, n, cache in (b, (AFTER, b[1], "cold"))]
    chosen += [(AFTER, budget["full"], cache) for cache in ("cold", "warm")]
    return [
        Point(
            f"{prefix}/{code}/{n}" + (f"/{cache}" if code == AFTER else ""),
            {"part": part, "code": code, "train_images": n, "cache": cache, **settings},
        )
        for code, n, cache in chosen
    ]


def write_pathmnist_like(
    data_dir: Path,
    train_images: int,
    seed: int = 0,
    size: int = SIZE,
    held_out: tuple[int, int] = (VAL, TEST),
) -> Path:
    """``pathmnist_<size>.npz`` with random uint8 images (module docstring); ``held_out``:
    the val and test counts."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, count in (("train", train_images), ("val", held_out[0]), ("test", held_out[1])):
        arrays[f"{split}_images"] = rng.integers(
            0, 256, (count, size, size, CHANNELS), dtype=np.uint8
        )
        arrays[f"{split}_labels"] = rng.integers(0, CLASSES, (count, 1), dtype=np.uint8)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"pathmnist_{size}.npz"
    np.savez_compressed(path, **arrays)
    return path


def data_folder(work: Path, settings: dict) -> Path:
    """``work/data`` holding the set of the settings' training and held-out images."""
    folder = work / "data"
    write_pathmnist_like(folder, settings["train_images"], held_out=tuple(settings["held_out"]))
    return folder


def cache_bytes(data_dir: Path) -> int:
    """The bytes of the image cache's ``.npy`` files in ``data_dir`` (0 without a cache)."""
    return sum(p.stat().st_size for p in (data_dir / "flowerbed-cache").rglob("*.npy"))


def measure(code: str, app_dir: Path, data_dir: Path, train_images: int, cache: str, out: Path):
    """One ``flwr run`` of the app in ``app_dir`` under ``PeakMemory``: its peaks, wall
    seconds and status; ``RuntimeError`` where it did not complete or did not run ``code``."""
    overrides = {
        "dataset": "pathmnist",
        "image-size": SIZE,
        "data-dir": str(data_dir),
        "model": "cnn",
        "partitioner": "iid",
        "num-server-rounds": 1,
        "local-epochs": 1,
        "fraction-train": 1.0,
        "fraction-evaluate": 1.0,
        "output-dir": str(out),
    }
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(app_dir)  # the SuperLink and its children import this code
    try:
        for _ in range(3):  # on a loaded machine the local SuperLink may miss its 15 s start
            home = Path(tempfile.mkdtemp(prefix="flwr-home-"))
            with PeakMemory(lambda home=home: local_superlink_pids(home)) as peak:
                result = simulate(
                    overrides,
                    num_supernodes=CLIENTS,
                    num_cpus_per_client=1,
                    timeout=3600,
                    flwr_home=home,
                    app_dir=app_dir,
                )
            shutil.rmtree(home, ignore_errors=True)
            if "Failed to start local SuperLink" not in result.log:
                break
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = previous
    if result.returncode != 0 or result.run_dir is None:
        raise RuntimeError(f"flwr run failed (rc {result.returncode}):\n{result.log[-3000:]}")
    # which code ran: only the image cache writes <data-dir>/flowerbed-cache
    if (data_dir / "flowerbed-cache").exists() != (code == AFTER):
        raise RuntimeError(f"the {code} run did not run the {code} code ({app_dir})")
    return {
        "code": code,
        "train_images": train_images,
        "cache": cache,
        "peak_pss_gib": peak.peak_pss_bytes / 2**30,
        "peak_rss_gib": peak.peak_rss_bytes / 2**30,
        "wall_s": result.seconds,
        "status": json.loads((result.run_dir / "status.json").read_text())["status"],
    }


def flwr_run(app_dir: Path, settings: dict, work: Path) -> dict[str, Value]:
    """A ``runs`` point: its data set written (and, warm, its cache built by one process that
    loads it), then one ``measure``d run; with the bytes of the npz and of the cache, and the
    seconds the npz took to write."""
    started = time.perf_counter()
    data_dir = data_folder(work, settings)
    generated = time.perf_counter() - started
    if settings["cache"] == "warm":
        process_peak_gib(APP_DIR, data_dir)
    code, count, cache = settings["code"], settings["train_images"], settings["cache"]
    values = measure(code, app_dir, data_dir, count, cache, work / "runs")
    npz = data_dir / f"pathmnist_{SIZE}.npz"
    return values | {
        "npz_gib": npz.stat().st_size / 2**30,
        "npz_written_s": round(generated, 1),
        "cache_gib": cache_bytes(data_dir) / 2**30,
    }


def extrapolate(points: list[dict], train_images: int) -> dict | None:
    """Before's row at ``train_images``: the linear fit through the first and last of
    ``points`` (before's rows, by training images)."""
    if len(points) < 2:
        return None
    first, last = points[0], points[-1]
    span = last["train_images"] - first["train_images"]

    def at(key: str) -> float:
        a, b = first[key], last[key]
        return a + (b - a) * (train_images - first["train_images"]) / span

    return {
        "code": BEFORE,
        "train_images": train_images,
        "cache": "extrapolated",
        "peak_pss_gib": at("peak_pss_gib"),
        "peak_rss_gib": at("peak_rss_gib"),
        "wall_s": float("nan"),
        "status": (
            f"linear in the training images through {first['train_images']:,} and"
            f" {last['train_images']:,}"
        ),
    }


def run_order(row: dict) -> tuple:
    """The tables' order: imports first, then by training images, before first, cold before
    warm, the read last."""
    mode = str(row.get("mode", ""))
    return (
        mode != "import",
        row["train_images"],
        row["code"] != BEFORE,
        row["cache"] == "warm",
        mode.startswith("read"),
    )


def runs_table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``table.md``: the runs' peaks, before's extrapolated to the largest count after ran
    at, the before / after ratios, and where the rows were measured (none is said for the
    rows converted from ``runs.json``, whose provenance was not recorded)."""
    rows = sorted(rows, key=run_order)
    full = max((r["train_images"] for r in rows if r["code"] == AFTER), default=0)
    estimate = extrapolate([r for r in rows if r["code"] == BEFORE], full)
    shown = rows + ([estimate] if estimate is not None else [])
    caption = (
        "Peak PSS and RSS summed over every process of the run, wall seconds and status, per"
        " code, training images and cache (`runs.json`):"
    )
    text = f"{caption}\n\n{peaks_table(shown)}\n\n{ratios(shown)}\n"
    measured = measurement_lines(folder)
    return text + (f"\n{' '.join(measured)}\n" if measured else "")


def peaks_table(rows: list[dict]) -> str:
    lines = [
        "| code | training images | cache | peak PSS (GiB) | peak RSS (GiB) | wall s | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        seconds = "-" if np.isnan(r["wall_s"]) else f"{r['wall_s']:.0f}"
        lines.append(
            f"| {r['code']} | {r['train_images']:,} | {r['cache']} | {r['peak_pss_gib']:.2f} |"
            f" {r['peak_rss_gib']:.2f} | {seconds} | {r['status']} |"
        )
    return "\n".join(lines)


def ratios(rows: list[dict]) -> str:
    """before / after (cold) peak PSS at every count where both exist."""
    before = {r["train_images"]: r for r in rows if r["code"] == BEFORE}
    lines = []
    for r in rows:
        if r["code"] == AFTER and r["cache"] == "cold" and r["train_images"] in before:
            b = before[r["train_images"]]
            how = "extrapolated" if b["cache"] == "extrapolated" else "measured"
            lines.append(
                f"- {r['train_images']:,} training images: before ({how}) / after (cold) peak"
                f" PSS = {b['peak_pss_gib'] / r['peak_pss_gib']:.1f}x, peak RSS"
                f" {b['peak_rss_gib'] / r['peak_rss_gib']:.1f}x"
            )
    return "\n".join(lines)


LOAD_SCRIPT = """
import sys
import numpy as np
import torch
from flowerbed.data import load_dataset
from flowerbed.training.loops import minibatches

data_dir, mode, size, share = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mapped = 0
if mode != "import":
    data = load_dataset("pathmnist", data_dir, image_size=size)
if mode == "read":  # one pass over a client's share, as its training reads it
    rows = torch.from_numpy(np.random.default_rng(0).permutation(len(data.y_train))[:share])
    x = data.x_train.subset(rows) if hasattr(data.x_train, "subset") else data.x_train[rows]
    for _ in minibatches(x, data.y_train[rows], 32, torch.Generator().manual_seed(0)):
        pass
    path = ""
    for line in open("/proc/self/smaps"):
        if not line.split()[0].endswith(":"):
            path = line.split()[-1]
        elif line.startswith("Rss:") and path.endswith("x_train.npy"):
            mapped += int(line.split()[1]) * 1024
import flowerbed
# VmHWM: this process's peak RSS since exec (ru_maxrss would include the parent's RSS at fork)
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
print(flowerbed.__file__, peak, mapped)
"""


def process_peak_gib(
    app_dir: Path, data_dir: Path, mode: str = "load", share: int = 0
) -> tuple[float, float]:
    """Peak RSS of one fresh process that imports flowerbed from ``app_dir`` and (``mode``
    ``load`` or ``read``) loads the data set, (``read``) then reads ``share`` random training
    images in batches: the kernel's high-water mark (``VmHWM``), so no sample can miss a
    peak. Also the resident pages of the mapped ``x_train.npy`` at the end (GiB)."""
    env = {**os.environ, "PYTHONPATH": str(app_dir), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", LOAD_SCRIPT, str(data_dir), mode, str(SIZE), str(share)]
    # run in app_dir: ``python -c`` puts the working directory first on sys.path
    done = subprocess.run(command, env=env, cwd=app_dir, capture_output=True, text=True, check=True)
    imported, peak, mapped = done.stdout.split()[-3:]
    if not Path(imported).is_relative_to(app_dir):
        raise RuntimeError(f"flowerbed came from {imported}, not from {app_dir}")
    return int(peak) / 2**30, int(mapped) / 2**30


def load_peak(app_dir: Path, settings: dict, work: Path) -> dict[str, Value]:
    """A ``load`` point's peak (``process_peak_gib``): imports only; or a fresh set loaded
    (cold: the process builds the cache), or loaded once before (warm), then, for
    ``read <share>``, read."""
    mode = settings["mode"]
    data_dir = work
    if mode != "import":
        data_dir = data_folder(work, settings)
        if settings["cache"] == "warm":
            process_peak_gib(APP_DIR, data_dir)
    peak, mapped = process_peak_gib(app_dir, data_dir, mode.split()[0], settings.get("share", 0))
    return {
        "code": settings["code"],
        "train_images": settings["train_images"],
        "cache": settings["cache"],
        "mode": mode,
        "peak_rss_gib": round(peak, 4),
        "mapped_gib": round(mapped, 4),
    }


def reading_times(data_dir: Path, share: int) -> dict[str, Value]:
    """Seconds of one epoch over a client's share of ``share`` images, read from the mapped
    view (per-batch gather from the map + standardisation) and from a float32 tensor of the
    same rows (what a client held before), and of one training epoch of ``cnn`` on each (the
    inputs in turn), in this process, one thread: ``read_s/<input>`` and ``train_s/<input>``."""
    torch.set_num_threads(1)
    data = load_dataset("pathmnist", data_dir, image_size=SIZE)
    rows = np.random.default_rng(0).permutation(len(data.y_train))[:share]
    view, y = take(data.x_train, rows), data.y_train[rows]
    inputs = {"mapped": view, "tensor": view[:]}

    def seconds(work) -> float:
        started = time.perf_counter()
        work()
        return time.perf_counter() - started

    def read_all(x):
        for _ in minibatches(x, y, 32, torch.Generator().manual_seed(0)):
            pass

    def train(x):
        torch.manual_seed(0)
        model = build_model("cnn", data.input_shape, data.num_classes)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        train_local(
            model,
            x,
            y,
            epochs=1,
            batch_size=32,
            optimizer=optimizer,
            generator=torch.Generator().manual_seed(0),
        )

    values: dict[str, Value] = {"images": share}
    for name, x in inputs.items():
        values[f"read_s/{name}"] = round(seconds(lambda x=x: read_all(x)), 4)
        values[f"train_s/{name}"] = round(seconds(lambda x=x: train(x)), 4)
    return values


def cache_sizes(work: Path, images: int) -> dict[str, Value]:
    """Bytes of the image cache at each of ``CACHE_SIZES`` (``cache_bytes/<size>``): a
    PathMNIST-like set of ``images`` training images (and a tenth of that for val and test)
    loaded once at each size; the npz's bytes beside them (``npz_bytes/<size>``)."""
    held_out = (max(images // 10, 1), max(images // 10, 1))
    values: dict[str, Value] = {
        "train_images": images,
        "val_images": held_out[0],
        "test_images": held_out[1],
    }
    for size in CACHE_SIZES:
        data_dir = work / f"sizes-{size}"
        npz = write_pathmnist_like(data_dir, images, size=size, held_out=held_out)
        load_dataset("pathmnist", data_dir, image_size=size)
        values[f"cache_bytes/{size}"] = cache_bytes(data_dir)
        values[f"npz_bytes/{size}"] = npz.stat().st_size
        shutil.rmtree(data_dir, ignore_errors=True)
    return values


def reading_table(rows: list[dict[str, Value]]) -> str:
    """Median read and train seconds per input over the ``reading`` rows and their ratios to
    the float32 tensor's."""

    def median(key: str, name: str) -> float:
        return float(np.median([r[f"{key}/{name}"] for r in rows]))

    lines = [
        (
            f"One epoch over a client's {rows[0]['images']:,} images (batches of 32, cnn,"
            f" one thread, median of {len(rows)}):"
        ),
        "",
        "| input | read the batches (s) | ratio | train one epoch (s) | ratio |",
        "|---|---|---|---|---|",
    ]
    for name, label in INPUTS.items():
        read, trained = median("read_s", name), median("train_s", name)
        lines.append(
            f"| {label} | {read:.3f} | {read / median('read_s', BASE_INPUT):.2f} |"
            f" {trained:.1f} | {trained / median('train_s', BASE_INPUT):.2f} |"
        )
    return "\n".join(lines)


def sizes_table(rows: list[dict[str, Value]]) -> str:
    """The cache's bytes per image size (the median over the ``sizes`` rows) and their ratio
    to 64 px's, with the npz's."""
    sizes = sorted(int(key.split("/")[1]) for key in rows[0] if key.startswith("cache_bytes/"))

    def median(key: str, size: int) -> float:
        return statistics.median(r[f"{key}/{size}"] for r in rows)

    first = rows[0]
    return "\n".join(
        [
            (
                f"Image cache on disk per image size, the same random set at each ({first['train_images']:,}"
                f" training, {first['val_images']:,} val and {first['test_images']:,} test images;"
                " the cache's `.npy` files summed):"
            ),
            "",
            f"| image size (px) | cache MiB | ratio to {SIZE} px | npz MiB |",
            "|---|---|---|---|",
            *(
                f"| {size} | {median('cache_bytes', size) / 2**20:.1f} |"
                f" {median('cache_bytes', size) / median('cache_bytes', SIZE):.2f} |"
                f" {median('npz_bytes', size) / 2**20:.1f} |"
                for size in sizes
            ),
        ]
    )


def load_table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``load.md``: the median one-process peaks (before at the full count: the line through
    the medians of its smallest and largest measured counts), the batch-reading times
    (``reading_table``), the cache bytes per image size (``sizes_table``) and where the rows
    were measured."""
    peaks = sorted((r for r in rows if r["part"] == PEAKS), key=run_order)
    full = max(r["train_images"] for r in peaks)
    groups = list(
        dict.fromkeys((r["code"], r["train_images"], r["cache"], r["mode"]) for r in peaks)
    )

    def median(group, key: str = "peak_rss_gib") -> float:
        chosen = [
            r[key] for r in peaks if (r["code"], r["train_images"], r["cache"], r["mode"]) == group
        ]
        return float(np.median(chosen))

    repeats = len({r["seed"] for r in peaks})
    lines = [
        (
            "Peak RSS (`VmHWM`) of one process that imports flowerbed and loads the data set"
            " (`load_dataset`): the ServerApp and every Ray actor each pay this before"
            f" training; median of {repeats} alternating repeats (`load.json`)."
        ),
        "",
        "| code | training images | cache | peak RSS (GiB) | how |",
        "|---|---|---|---|---|",
    ]
    for group in groups:
        code, count, cache, mode = group
        how = {"import": "imports only", "load": "measured"}.get(mode)
        if how is None:
            share = mode.split()[-1]
            how = (
                f"measured, then one pass over {int(share):,} random training images (a"
                f" client's share): {median(group, 'mapped_gib'):.2f} GiB of x_train.npy"
                " resident in its map (file pages, shared)"
            )
        lines.append(f"| {code} | {count:,} | {cache} | {median(group):.2f} | {how} |")
    before = sorted((g[1], median(g)) for g in groups if g[0] == BEFORE)
    if len(before) >= 2:
        (n1, p1), (n2, p2) = before[0], before[-1]
        estimate = p1 + (p2 - p1) * (full - n1) / (n2 - n1)
        lines.append(
            f"| before | {full:,} | - | {estimate:.2f} | extrapolated: linear through the"
            f" medians at {n1:,} and {n2:,} |"
        )
    for part, make in ((READING, reading_table), (SIZES, sizes_table)):
        chosen = [r for r in rows if r["part"] == part]
        lines += ["", make(chosen)] if chosen else []
    provenance = " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder)
    return "\n".join([*lines, "", provenance]) + "\n"


def report(data: Path) -> str:
    """The table made from the rows in ``data``'s folder (and the provenance beside them)
    alone: ``load.md`` for ``LOAD_VALUES``, else ``table.md``."""
    tables = Memory().report(measured_rows(data.parent))
    return tables[LOAD_TABLE if data.name == LOAD_VALUES else TABLE.name](data.parent)


def options() -> argparse.ArgumentParser:
    """This script's own option (module docstring), beside the study's command line
    (``study_cli``)."""
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument(
        "--before-app", type=Path, help="a checkout of the code without the image cache"
    )
    return own


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(
        lambda own: Memory(own.before_app),
        RESULTS,
        __doc__,
        argv,
        write=write_table,
        options=options(),
    )


if __name__ == "__main__":
    raise SystemExit(main())
