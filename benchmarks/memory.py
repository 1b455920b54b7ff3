"""Peak memory of a 10-client ``flwr run`` on a PathMNIST-like set at 64 px: every process
holding its own float32 copy of the data set (before) against the memory-mapped image cache
(after).

Writes ``pathmnist_64.npz`` in the MedMNIST layout into a temporary data folder: uint8 images
(N, 64, 64, 3) and labels (N, 1) for train, val and test, 9 classes, PathMNIST's counts
(89,996 / 10,004 / 7,180). The pixels are random, hence incompressible: the npz is as large
as its arrays (real images compress, which changes the file, not a run's memory). Each run:
FedAvg, model ``cnn``, iid partition, 10 SuperNodes with one CPU each (two Ray actors on two
cores), one round of one local epoch in which every client trains and evaluates (so both
actors load the data set: with a fraction of the clients, Ray may hand them all to one actor),
and the ServerApp's central evaluation on the test split.
Memory: PSS and RSS summed over the SuperLink and every process it starts, sampled every
0.25 s (``process_memory.PeakMemory``; RSS counts a shared page once per process that maps it).

* before: the app in ``--before-app`` (a checkout of the code without the image cache), run
  with ``PYTHONPATH`` pointing there;
* after: this checkout; ``cold`` builds the cache during the run, ``warm`` maps the cache the
  previous run built.

Before needs about 13 GB per process at 90,000 images (the float32 copy plus numpy's
temporaries while it is standardised; the ServerApp and both actors each hold one), more than
a shared 24 GB machine can give, so it runs at ``--before-images`` training images (the test
split keeps its 7,180) and its peak is extrapolated linearly in the number of training images;
after runs at those counts and at the full one. A second table (``--part load``) has the peak
RSS of one process loading the data set (the kernel's high-water mark, ``VmHWM``): before
at ``--before-load-images`` (extrapolated to the full count), after at those and the full one.
Results go to ``benchmarks/results/memory/`` (``runs.md``/``.json``, ``load.md``), and
``table.md``: the runs' table and ratios made from ``runs.json`` alone (``report``,
``--report-only``), which ``docs/benchmarks.md`` includes.

    python benchmarks/memory.py --before-app /work/main [--part runs|load|all] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from process_memory import PeakMemory

from flowerbed.simulation import APP_DIR, local_superlink_pids, simulate

TRAIN, VAL, TEST = 89_996, 10_004, 7_180  # PathMNIST's splits
SIZE, CHANNELS, CLASSES = 64, 3, 9
CLIENTS = 10
RESULTS = Path(__file__).resolve().parent / "results" / "memory"
# what ``report`` reads and writes (the test of published tables reads PUBLISHED), the page
DATA = RESULTS / "runs.json"
TABLE = RESULTS / "table.md"
PUBLISHED = ((DATA, TABLE),)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


@dataclass
class Measurement:
    code: str  # before / after
    train_images: int
    cache: str  # "-" (before), cold, warm, or "extrapolated"
    peak_pss_gib: float
    peak_rss_gib: float
    seconds: float
    status: str


def write_pathmnist_like(data_dir: Path, train_images: int, seed: int = 0) -> Path:
    """``pathmnist_64.npz`` with random uint8 images (module docstring)."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, count in (("train", train_images), ("val", VAL), ("test", TEST)):
        arrays[f"{split}_images"] = rng.integers(
            0, 256, (count, SIZE, SIZE, CHANNELS), dtype=np.uint8
        )
        arrays[f"{split}_labels"] = rng.integers(0, CLASSES, (count, 1), dtype=np.uint8)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"pathmnist_{SIZE}.npz"
    np.savez_compressed(path, **arrays)
    return path


def measure(code: str, app_dir: Path, data_dir: Path, train_images: int, cache: str, out: Path):
    """One ``flwr run`` of the app in ``app_dir`` under ``PeakMemory``."""
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
    completed = result.returncode == 0 and result.run_dir is not None
    if completed:
        status = json.loads((result.run_dir / "status.json").read_text())["status"]
    else:
        status = f"failed (rc {result.returncode}): {result.log[-300:]!r}"
    # which code ran: only the image cache writes <data-dir>/flowerbed-cache
    if (data_dir / "flowerbed-cache").exists() != (code == "after"):
        raise RuntimeError(f"the {code} run did not run the {code} code ({app_dir})")
    return Measurement(
        code,
        train_images,
        cache,
        peak.peak_pss_bytes / 2**30,
        peak.peak_rss_bytes / 2**30,
        result.seconds,
        status,
    )


def extrapolate(points: list[Measurement], train_images: int) -> Measurement | None:
    """The linear fit through the first and last of ``points``, at ``train_images``."""
    if len(points) < 2:
        return None
    first, last = points[0], points[-1]
    span = last.train_images - first.train_images

    def at(a: float, b: float) -> float:
        return a + (b - a) * (train_images - first.train_images) / span

    return Measurement(
        "before",
        train_images,
        "extrapolated",
        at(first.peak_pss_gib, last.peak_pss_gib),
        at(first.peak_rss_gib, last.peak_rss_gib),
        float("nan"),
        f"linear in the training images through {first.train_images:,} and {last.train_images:,}",
    )


def reading_cost(data_dir: Path, share: int, repeats: int) -> str:
    """Seconds per epoch over a client's share of ``share`` images, read from the mapped view
    (per-batch gather from the map + standardisation) and from a float32 tensor of the same
    rows (what a client held before), and of one training epoch of ``cnn`` on each; medians
    of ``repeats``, in this process, one thread."""
    import torch

    from flowerbed.data import load_dataset
    from flowerbed.data.mapped_images import take
    from flowerbed.models import build_model
    from flowerbed.training.loops import minibatches, train_local

    torch.set_num_threads(1)
    data = load_dataset("pathmnist", data_dir, image_size=SIZE)
    rows = np.random.default_rng(0).permutation(len(data.y_train))[:share]
    view, y = take(data.x_train, rows), data.y_train[rows]
    inputs = {"mapped view (after)": view, "float32 tensor (before)": view[:]}

    def median_seconds(work) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
        return float(np.median(times))

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

    read = {name: median_seconds(lambda x=x: read_all(x)) for name, x in inputs.items()}
    trained = {name: median_seconds(lambda x=x: train(x)) for name, x in inputs.items()}
    base = "float32 tensor (before)"
    lines = [
        (
            f"One epoch over a client's {share:,} images (batches of 32, cnn, one thread,"
            f" median of {repeats}):"
        ),
        "",
        "| input | read the batches (s) | ratio | train one epoch (s) | ratio |",
        "|---|---|---|---|---|",
    ]
    for name in inputs:
        lines.append(
            f"| {name} | {read[name]:.3f} | {read[name] / read[base]:.2f} | {trained[name]:.1f}"
            f" | {trained[name] / trained[base]:.2f} |"
        )
    return "\n".join(lines)


def table(rows: list[Measurement]) -> str:
    lines = [
        "| code | training images | cache | peak PSS (GiB) | peak RSS (GiB) | wall s | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        seconds = "-" if np.isnan(r.seconds) else f"{r.seconds:.0f}"
        lines.append(
            f"| {r.code} | {r.train_images:,} | {r.cache} | {r.peak_pss_gib:.2f} |"
            f" {r.peak_rss_gib:.2f} | {seconds} | {r.status} |"
        )
    return "\n".join(lines)


def ratios(rows: list[Measurement]) -> str:
    """before / after (cold) peak PSS at every count where both exist."""
    before = {r.train_images: r for r in rows if r.code == "before"}
    lines = []
    for r in rows:
        if r.code == "after" and r.cache == "cold" and r.train_images in before:
            b = before[r.train_images]
            how = "extrapolated" if b.cache == "extrapolated" else "measured"
            lines.append(
                f"- {r.train_images:,} training images: before ({how}) / after (cold) peak PSS"
                f" = {b.peak_pss_gib / r.peak_pss_gib:.1f}x, peak RSS"
                f" {b.peak_rss_gib / r.peak_rss_gib:.1f}x"
            )
    return "\n".join(lines)


def report(data: Path) -> str:
    """``table.md`` from ``runs.json`` alone: the runs' peaks (``table``) and the before /
    after ratios (``ratios``)."""
    rows = [Measurement(**r) for r in json.loads(data.read_text())]
    caption = (
        "Peak PSS and RSS summed over every process of the run, wall seconds and status, per"
        " code, training images and cache (`runs.json`):"
    )
    return f"{caption}\n\n{table(rows)}\n\n{ratios(rows)}\n"


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


def load_peaks(before_app: Path, counts: list[int], full: int, work: Path) -> str:
    """Table: peak RSS of one process loading the data set, before and after."""
    share = round(full / CLIENTS * 0.8)  # a client's local training split (iid, 10 clients)
    imported, _ = process_peak_gib(APP_DIR, work, "import")
    rows = [("either", 0, "-", imported, "imports only")]
    before = []
    for count in counts:
        data_dir = work / f"data-{count}"
        if not data_dir.exists():
            write_pathmnist_like(data_dir, count)
        before.append((count, process_peak_gib(before_app, data_dir)[0]))
        rows.append(("before", count, "-", before[-1][1], "measured"))
        after, _ = process_peak_gib(APP_DIR, data_dir)
        rows.append(("after", count, "cold", after, "measured"))
    data_dir = work / f"data-{full}"
    if not data_dir.exists():
        write_pathmnist_like(data_dir, full)
    shutil.rmtree(data_dir / "flowerbed-cache", ignore_errors=True)
    rows.append(("after", full, "cold", process_peak_gib(APP_DIR, data_dir)[0], "measured"))
    rows.append(("after", full, "warm", process_peak_gib(APP_DIR, data_dir)[0], "measured"))
    peak, mapped = process_peak_gib(APP_DIR, data_dir, "read", share)
    how = (
        f"measured, then one pass over {share:,} random training images (a client's share):"
        f" {mapped:.2f} GiB of x_train.npy resident in its map (file pages, shared)"
    )
    rows.append(("after", full, "warm", peak, how))
    if len(before) >= 2:
        (n1, p1), (n2, p2) = before[0], before[-1]
        estimate = p1 + (p2 - p1) * (full - n1) / (n2 - n1)
        rows.append(("before", full, "-", estimate, f"linear through {n1:,} and {n2:,}"))
    lines = [
        "Peak RSS (`VmHWM`) of one process that imports flowerbed and loads the data set",
        "(`load_dataset`): the ServerApp and every Ray actor each pay this before training.",
        "",
        "| code | training images | cache | peak RSS (GiB) | how |",
        "|---|---|---|---|---|",
    ]
    for code, count, cache, peak, how in rows:
        lines.append(f"| {code} | {count:,} | {cache} | {peak:.2f} | {how} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before-app", type=Path, help="a checkout without the cache")
    parser.add_argument("--report-only", action="store_true", help="table.md from runs.json")
    parser.add_argument("--before-images", default="5000,10000", help="flwr runs of before")
    parser.add_argument(
        "--before-load-images", default="5000,10000,20000", help="one-process loads of before"
    )
    parser.add_argument("--train-images", type=int, default=TRAIN)
    parser.add_argument("--part", choices=("runs", "load", "all"), default="all")
    parser.add_argument("--quick", action="store_true", help="1,000 / 2,000 / 4,000 images")
    parser.add_argument("--share", type=int, default=2000, help="images of the speed check")
    args = parser.parse_args()
    if args.report_only:
        TABLE.write_text(report(DATA))
        print(TABLE.read_text())
        return
    if args.before_app is None:
        parser.error("--before-app is required (unless --report-only)")
    os.environ["OMP_NUM_THREADS"] = "1"  # one math thread per actor (see overhead.py)
    small = [int(n) for n in args.before_images.split(",")]
    load_counts = [int(n) for n in args.before_load_images.split(",")]
    full = args.train_images
    if args.quick:
        small, load_counts, full = [1000, 2000], [1000, 2000], 4000
    prefix = "quick-" if args.quick else ""
    RESULTS.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="flowerbed-memory-"))
    try:
        if args.part in ("runs", "all"):
            text, rows = flwr_runs(args, small, full, work)
            (RESULTS / f"{prefix}runs.md").write_text(text + "\n")
            (RESULTS / f"{prefix}runs.json").write_text(
                json.dumps([asdict(r) for r in rows], indent=1)
            )
            if not args.quick:
                TABLE.write_text(report(DATA))
            print("\n" + text, flush=True)
        if args.part in ("load", "all"):
            text = load_peaks(args.before_app.resolve(), load_counts, full, work)
            (RESULTS / f"{prefix}load.md").write_text(text + "\n")
            print("\n" + text)
        print(f"\nwritten to {RESULTS}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def flwr_runs(args, small: list[int], full: int, work: Path) -> tuple[str, list[Measurement]]:
    out = work / "runs"
    rows: list[Measurement] = []
    for count in small:
        data_dir = work / f"data-{count}"
        write_pathmnist_like(data_dir, count)
        rows.append(measure("before", args.before_app.resolve(), data_dir, count, "-", out))
        print(table(rows[-1:]), flush=True)
        rows.append(measure("after", APP_DIR, data_dir, count, "cold", out))
        print(table(rows[-1:]), flush=True)
    started = time.perf_counter()
    data_dir = work / f"data-{full}"
    write_pathmnist_like(data_dir, full)
    generated = time.perf_counter() - started
    for cache in ("cold", "warm"):
        rows.append(measure("after", APP_DIR, data_dir, full, cache, out))
        print(table(rows[-1:]), flush=True)
    estimate = extrapolate([r for r in rows if r.code == "before"], full)
    if estimate is not None:
        rows.append(estimate)
    cache_bytes = sum(p.stat().st_size for p in (data_dir / "flowerbed-cache").rglob("*.npy"))
    npz_bytes = (data_dir / f"pathmnist_{SIZE}.npz").stat().st_size
    setting = (
        f"PathMNIST-like at {SIZE} px (random uint8 pixels), {CLIENTS}-client `flwr run`:"
        " FedAvg, cnn, 1 round, 1 local epoch, every client trains and evaluates, 2 Ray"
        f" actors on {os.cpu_count()} CPUs; test split {TEST:,} images. npz"
        f" {npz_bytes / 2**30:.2f} GiB (written in {generated:.0f} s), image cache"
        f" {cache_bytes / 2**30:.2f} GiB on disk."
    )
    speed = reading_cost(data_dir, args.share, 3 if args.quick else 5)
    return "\n\n".join([setting, table(rows), ratios(rows), speed]), rows


if __name__ == "__main__":
    main()
