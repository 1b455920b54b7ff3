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
The load part also times reading a client's ``--share`` images in batches from the map against
a float32 tensor of the same rows (and one cnn epoch on each), and measures the bytes of the
image cache at 64, 128 and 224 px (``--size-images`` random training images at each size).
Results go to ``--out`` (default ``benchmarks/results/memory/``): ``runs.md``/``.json`` and
``table.md``, the runs' table and ratios made from ``runs.json`` alone; ``load.json`` (every
load-part measurement, one record per repeat; the before extrapolation is made from its
measured points by the report), ``load-measured.json`` (its provenance) and ``load.md``, made
from ``load.json`` alone. ``report`` / ``--report-only`` makes both tables from their data.

    python benchmarks/memory.py --before-app <checkout without the cache> [--part runs|load|all]
    python benchmarks/memory.py --before-app <checkout> --load-only    # the load part only
    python benchmarks/memory.py --report-only
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
from result_tables import provenance_line, record_provenance

from flowerbed.core.processes import local_superlink_pids
from flowerbed.simulation import APP_DIR, simulate

TRAIN, VAL, TEST = 89_996, 10_004, 7_180  # PathMNIST's splits
SIZE, CHANNELS, CLASSES = 64, 3, 9
CLIENTS = 10
RESULTS = Path(__file__).resolve().parent / "results" / "memory"
# what ``report`` reads and writes (the test of published tables reads PUBLISHED), the page
DATA = RESULTS / "runs.json"
TABLE = RESULTS / "table.md"
# ``--load-only``: one process's load peaks, the batch-reading times and the cache sizes per
# image size (one record per measurement), its table, and where they were measured
LOAD_DATA = "load.json"
LOAD_TABLE = "load.md"
LOAD_PROVENANCE = "load-measured.json"
PUBLISHED = ((DATA, TABLE), (RESULTS / LOAD_DATA, RESULTS / LOAD_TABLE))
# Before holds a float32 copy and numpy's temporaries: about 13 GB per process at 89,996
# training images. Its counts are refused where the processes holding it would pass
# BEFORE_LIMIT_GIB (the machine is shared; the full count is extrapolated, never run).
BEFORE_GIB_PER_IMAGE = 13 / 1.0737 / TRAIN  # 13 GB in GiB, per training image
BEFORE_LIMIT_GIB = 8.0
# image sizes whose cache bytes are measured (at --size-images training images each)
CACHE_SIZES = (64, 128, 224)
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


def reading_times(data_dir: Path, share: int, repeats: int) -> list[dict]:
    """Seconds per epoch over a client's share of ``share`` images, read from the mapped view
    (per-batch gather from the map + standardisation) and from a float32 tensor of the same
    rows (what a client held before), and of one training epoch of ``cnn`` on each; one
    record per input and repeat (the inputs alternate), in this process, one thread."""
    import torch

    from flowerbed.data import load_dataset
    from flowerbed.data.mapped_images import take
    from flowerbed.models import build_model
    from flowerbed.training.loops import minibatches, train_local

    torch.set_num_threads(1)
    data = load_dataset("pathmnist", data_dir, image_size=SIZE)
    rows = np.random.default_rng(0).permutation(len(data.y_train))[:share]
    view, y = take(data.x_train, rows), data.y_train[rows]
    inputs = {MAPPED_INPUT: view, TENSOR_INPUT: view[:]}

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

    return [
        {
            "input": name,
            "repeat": repeat,
            "images": share,
            "read_s": round(seconds(lambda x=x: read_all(x)), 4),
            "train_s": round(seconds(lambda x=x: train(x)), 4),
        }
        for repeat in range(1, repeats + 1)
        for name, x in inputs.items()
    ]


MAPPED_INPUT = "mapped view (after)"
TENSOR_INPUT = "float32 tensor (before)"


def reading_table(records: list[dict]) -> str:
    """Median read and train seconds per input of ``reading_times`` and their ratios to the
    float32 tensor's."""
    inputs = list(dict.fromkeys(r["input"] for r in records))

    def median(name: str, key: str) -> float:
        return float(np.median([r[key] for r in records if r["input"] == name]))

    repeats = len({r["repeat"] for r in records})
    lines = [
        (
            f"One epoch over a client's {records[0]['images']:,} images (batches of 32, cnn,"
            f" one thread, median of {repeats}):"
        ),
        "",
        "| input | read the batches (s) | ratio | train one epoch (s) | ratio |",
        "|---|---|---|---|---|",
    ]
    for name in inputs:
        read, trained = median(name, "read_s"), median(name, "train_s")
        lines.append(
            f"| {name} | {read:.3f} | {read / median(TENSOR_INPUT, 'read_s'):.2f} |"
            f" {trained:.1f} | {trained / median(TENSOR_INPUT, 'train_s'):.2f} |"
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


def runs_report(data: Path) -> str:
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


def check_before_counts(counts: list[int], processes: int, option: str) -> None:
    """Refuse before counts whose float32 copies in ``processes`` processes would pass
    ``BEFORE_LIMIT_GIB`` (one line, naming the option)."""
    for count in counts:
        need = count * BEFORE_GIB_PER_IMAGE * processes
        if need > BEFORE_LIMIT_GIB:
            raise SystemExit(
                f"{option}: {count:,} images would need about {need:.1f} GiB for before"
                f" ({processes} process(es)), over the {BEFORE_LIMIT_GIB:.0f} GiB this"
                " benchmark allows; its peak at larger counts is extrapolated"
            )


def load_peaks(
    before_app: Path, counts: list[int], full: int, work: Path, repeats: int, share: int
) -> list[dict]:
    """Peak RSS of one fresh process loading the data set (``process_peak_gib``), one record
    per measurement: imports only; before and after (cold: the cache is built by that
    process) at ``counts`` training images; after at ``full``, cold, warm, and warm then
    reading ``share`` random training images (with the resident pages of its map). The
    repeats alternate; before is never run at ``full`` (``load_report`` extrapolates it)."""
    records = []

    def record(code, count, cache, mode, repeat, peak_and_mapped):
        peak, mapped = peak_and_mapped
        records.append(
            {
                "code": code,
                "train_images": count,
                "cache": cache,
                "mode": mode,
                "repeat": repeat,
                "peak_rss_gib": round(peak, 4),
                "mapped_gib": round(mapped, 4),
            }
        )

    folders = {}
    for count in [*counts, full]:
        folders[count] = work / f"data-{count}"
        if not folders[count].exists():
            write_pathmnist_like(folders[count], count)
    for repeat in range(1, repeats + 1):
        record("either", 0, "-", "import", repeat, process_peak_gib(APP_DIR, work, "import"))
        for count in counts:
            record(
                "before", count, "-", "load", repeat, process_peak_gib(before_app, folders[count])
            )
            shutil.rmtree(folders[count] / "flowerbed-cache", ignore_errors=True)
            record(
                "after", count, "cold", "load", repeat, process_peak_gib(APP_DIR, folders[count])
            )
        shutil.rmtree(folders[full] / "flowerbed-cache", ignore_errors=True)
        record("after", full, "cold", "load", repeat, process_peak_gib(APP_DIR, folders[full]))
        record("after", full, "warm", "load", repeat, process_peak_gib(APP_DIR, folders[full]))
        peak = process_peak_gib(APP_DIR, folders[full], "read", share)
        record("after", full, "warm", f"read {share}", repeat, peak)
        print(f"load peaks: repeat {repeat} of {repeats} done", flush=True)
    return records


def cache_sizes(work: Path, images: int) -> list[dict]:
    """Bytes of the image cache per image at each of ``CACHE_SIZES``: a PathMNIST-like set of
    ``images`` training images (and a tenth of that for val and test) loaded once at each
    size, the cache's ``.npy`` files summed; the npz's bytes beside them."""
    from flowerbed.data import load_dataset

    records = []
    held_out = (max(images // 10, 1), max(images // 10, 1))
    for size in CACHE_SIZES:
        data_dir = work / f"sizes-{size}"
        npz = write_pathmnist_like(data_dir, images, size=size, held_out=held_out)
        load_dataset("pathmnist", data_dir, image_size=size)
        cache = sum(f.stat().st_size for f in (data_dir / "flowerbed-cache").rglob("*.npy"))
        records.append(
            {
                "image_size": size,
                "train_images": images,
                "val_images": held_out[0],
                "test_images": held_out[1],
                "cache_bytes": cache,
                "npz_bytes": npz.stat().st_size,
            }
        )
        shutil.rmtree(data_dir, ignore_errors=True)
    return records


def load_report(data: Path) -> str:
    """``load.md`` from ``load.json`` alone: the median one-process peaks (before at the full
    count: the line through the medians of its smallest and largest measured counts), the
    batch-reading times (``reading_table``) and the cache bytes per image size."""
    measured = json.loads(data.read_text())
    peaks, full = measured["load_peaks"], measured["full_train_images"]
    groups = list(
        dict.fromkeys((r["code"], r["train_images"], r["cache"], r["mode"]) for r in peaks)
    )

    def median(group, key: str = "peak_rss_gib") -> float:
        chosen = [
            r[key] for r in peaks if (r["code"], r["train_images"], r["cache"], r["mode"]) == group
        ]
        return float(np.median(chosen))

    repeats = len({r["repeat"] for r in peaks})
    lines = [
        (
            "Peak RSS (`VmHWM`) of one process that imports flowerbed and loads the data set"
            " (`load_dataset`): the ServerApp and every Ray actor each pay this before"
            f" training; median of {repeats} alternating repeats (`{data.name}`)."
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
    before = sorted((g[1], median(g)) for g in groups if g[0] == "before")
    if len(before) >= 2:
        (n1, p1), (n2, p2) = before[0], before[-1]
        estimate = p1 + (p2 - p1) * (full - n1) / (n2 - n1)
        lines.append(
            f"| before | {full:,} | - | {estimate:.2f} | extrapolated: linear through the"
            f" medians at {n1:,} and {n2:,} |"
        )
    lines += ["", reading_table(measured["reading"]), ""]
    sizes = measured["cache_sizes"]
    base = next(r for r in sizes if r["image_size"] == SIZE)["cache_bytes"]
    first = sizes[0]
    lines += [
        (
            f"Image cache on disk per image size, the same random set at each ({first['train_images']:,}"
            f" training, {first['val_images']:,} val and {first['test_images']:,} test images;"
            " the cache's `.npy` files summed):"
        ),
        "",
        f"| image size (px) | cache MiB | ratio to {SIZE} px | npz MiB |",
        "|---|---|---|---|",
        *(
            f"| {r['image_size']} | {r['cache_bytes'] / 2**20:.1f} |"
            f" {r['cache_bytes'] / base:.2f} | {r['npz_bytes'] / 2**20:.1f} |"
            for r in sizes
        ),
        "",
        # a quick run's data and provenance carry the same prefix (quick-load.json, ...)
        provenance_line(data.parent, data.name.removesuffix(LOAD_DATA) + LOAD_PROVENANCE),
    ]
    return "\n".join(lines) + "\n"


def report(data: Path) -> str:
    """The table made from ``data`` alone: ``load_report`` for ``load.json``, else
    ``runs_report`` (``runs.json``)."""
    return load_report(data) if data.name.endswith(LOAD_DATA) else runs_report(data)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before-app", type=Path, help="a checkout without the cache")
    parser.add_argument(
        "--report-only", action="store_true", help="the tables from runs.json and load.json"
    )
    parser.add_argument("--before-images", default="5000,10000", help="flwr runs of before")
    parser.add_argument(
        "--before-load-images", default="5000,10000,20000", help="one-process loads of before"
    )
    parser.add_argument("--train-images", type=int, default=TRAIN)
    parser.add_argument("--part", choices=("runs", "load", "all"), default="all")
    parser.add_argument(
        "--load-only", action="store_true", help="only the load part (same as --part load)"
    )
    parser.add_argument("--quick", action="store_true", help="1,000 / 2,000 / 4,000 images")
    parser.add_argument("--share", type=int, default=2000, help="images of the speed check")
    parser.add_argument(
        "--load-repeats", type=int, default=3, help="repeats of every load-part measurement"
    )
    parser.add_argument(
        "--size-images", type=int, default=1000, help="training images of the cache-size check"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where results are written")
    args = parser.parse_args()
    out = args.out
    if args.report_only:
        for data, table in ((DATA.name, TABLE.name), (LOAD_DATA, LOAD_TABLE)):
            if (out / data).is_file():
                (out / table).write_text(report(out / data))
                print((out / table).read_text())
        return
    if args.before_app is None:
        parser.error("--before-app is required (unless --report-only)")
    if args.load_repeats < 1:
        parser.error(f"--load-repeats must be at least 1, not {args.load_repeats}")
    part = "load" if args.load_only else args.part
    os.environ["OMP_NUM_THREADS"] = "1"  # one math thread per actor (see overhead.py)
    small = [int(n) for n in args.before_images.split(",")]
    load_counts = [int(n) for n in args.before_load_images.split(",")]
    full = args.train_images
    if args.quick:
        small, load_counts, full = [1000, 2000], [1000, 2000], 4000
    # the ServerApp and both Ray actors each hold before's copy; a load is one process
    check_before_counts(small if part != "load" else [], 3, "--before-images")
    check_before_counts(load_counts if part != "runs" else [], 1, "--before-load-images")
    prefix = "quick-" if args.quick else ""
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="flowerbed-memory-"))
    try:
        if part in ("runs", "all"):
            text, rows = flwr_runs(args, small, full, work)
            (out / f"{prefix}runs.md").write_text(text + "\n")
            (out / f"{prefix}runs.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
            if not args.quick:
                (out / TABLE.name).write_text(report(out / DATA.name))
            print("\n" + text, flush=True)
        if part in ("load", "all"):
            repeats = 1 if args.quick else args.load_repeats
            share = min(args.share, full)
            measured = {
                "full_train_images": full,
                "load_peaks": load_peaks(
                    args.before_app.resolve(), load_counts, full, work, repeats, share
                ),
                "reading": reading_times(work / f"data-{full}", share, max(repeats, 3)),
                "cache_sizes": cache_sizes(work, args.size_images),
            }
            data = out / f"{prefix}{LOAD_DATA}"
            data.write_text(json.dumps(measured, indent=1) + "\n")
            record_provenance(out, sys.argv, file=f"{prefix}{LOAD_PROVENANCE}")
            text = report(data)
            (out / f"{prefix}{LOAD_TABLE}").write_text(text)
            print("\n" + text)
        print(f"\nwritten to {out}")
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
    return "\n\n".join([setting, table(rows), ratios(rows)]), rows


if __name__ == "__main__":
    main()
