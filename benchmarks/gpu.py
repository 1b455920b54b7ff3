"""CPU vs GPU: seconds per FedAvg round (cnn, resnet18 on CIFAR-sized images) and VQC training
throughput, measured side by side in one study.

A round is flowerbed's own client step and server rule, in this process: each of the budget's
clients starts from the global model and trains ``local-epochs=1`` on its images
(``LocalClient.train``: the run's optimiser, batches moved to the run's device), the server
takes the sample-weighted mean of the returned state dicts, and evaluates the new global model
on the test images (``training.loops.evaluate``). The images are generated (3 x 32 x 32, 10
classes, one random mean image per class plus noise), not CIFAR-10: only their size matters
here. The first round is a warm-up (CUDA context, cuDNN plans); a run gives the median of the
budget's repeats of further rounds.

The VQC points train flowerbed's VQC (``default.qubit``, backprop, one broadcast simulation per
mini-batch of 32, ``vqc-reduction='linear'`` feeding 2^n amplitudes) through the same
``LocalClient.train`` and give samples per second, for growing registers.

The ``fedavg-autotuned`` point repeats the resnet18 round on cuda with cuDNN's autotuned,
non-deterministic algorithms (flowerbed's runs use the deterministic ones, see
``core.device``): the price of repeatable GPU runs.

A study of the study driver (``flowerbed.experiments.study_cli``): the points are (what, model
or register, device), one run each, in turn (``alternate``), one at a time. The cuda points
need a GPU: on a machine without one they are left out of the grid (the script says so) and
the table shows - for them. Budgets: ``full`` (the default: 10 clients x 500 images, 2,000 test
images, 3 repeats, VQC at 6, 10 and 14 qubits on 512 samples) and ``quick`` (2 clients x 64, 128
test images, 1 repeat, VQC at 6 qubits on 64 samples: a minute or two on a CPU, a check that
the measuring path works, not a measurement, into ``results/gpu/quick``).

    python benchmarks/gpu.py                 # every device this machine has
    python benchmarks/gpu.py --quick
    python benchmarks/gpu.py --report-only   # gpu.md from rows.jsonl

Writes into ``benchmarks/results/gpu`` (or ``--out``): ``rows.jsonl`` (one row per run: the
value, its unit, the device, the torch threads, the GPU and torch's version), ``measured.jsonl``
(one line per invocation that measured) and ``gpu.md``, the table that ``docs/gpus.md``
includes, made from the rows and the provenance beside them alone (its first line, the
devices, from the rows). The committed rows were measured on an H100 by the script before it
became a study, converted from its ``gpu.csv`` and the devices line of its log, ``bench.log``
(kept); to measure anew, remove ``rows.jsonl``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch
from flwr.app import Context, RecordDict
from result_tables import joined, write_table

from flowerbed.catalog import parse_run_config
from flowerbed.core.device import deterministic_cuda
from flowerbed.data import DatasetSplits
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.inprocess import resolve_run_config
from flowerbed.models import build_model
from flowerbed.training.local_client import LocalClient
from flowerbed.training.loops import evaluate

RESULTS = Path(__file__).resolve().parent / "results" / "gpu"
DATA = RESULTS / ROWS
TABLE = RESULTS / "gpu.md"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "gpus.md"
SHAPE, CLASSES = (3, 32, 32), 10
LAYERS = 4  # of the VQC
FEDAVG, AUTOTUNED, VQC = "fedavg", "fedavg-autotuned", "vqc"
BUDGETS = {
    "full": {
        "clients": 10,
        "per_client": 500,
        "test": 2000,
        "repeats": 3,
        "qubits": (6, 10, 14),
        "vqc_samples": 512,
    },
    "quick": {
        "clients": 2,
        "per_client": 64,
        "test": 128,
        "repeats": 1,
        "qubits": (6,),
        "vqc_samples": 64,
    },
}


def devices() -> list[str]:
    """The devices of this machine: cpu, and cuda where torch sees a GPU."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class Gpu:
    """The study (module docstring): one run per (what, model or register, device)."""

    name = "gpu"
    budgets = BUDGETS
    default_budget = "full"
    alternate = True

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        here = devices()
        fedavg = f"FedAvg round, {chosen['clients']} clients x {chosen['per_client']}"
        wanted = [
            (FEDAVG, model, fedavg, "s/round", device)
            for model in ("cnn", "resnet18")
            for device in here
        ]
        if "cuda" in here:
            autotuned = "FedAvg round, cuDNN autotuned, not deterministic"
            wanted.append((AUTOTUNED, "resnet18", autotuned, "s/round", "cuda"))
        wanted += [
            (VQC, f"{n}-qubits", f"VQC training, {n} qubits, {LAYERS} layers", "samples/s", device)
            for n in chosen["qubits"]
            for device in here
        ]
        points = [
            Point(
                f"{part}/{model}/{device}",
                {
                    "part": part,
                    "model": model,
                    "what": what,
                    "unit": unit,
                    "device": device,
                    **chosen,
                },
            )
            for part, model, what, unit, device in wanted
        ]
        return points, [0]

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        s = point.settings
        device = s["device"]
        if s["part"] == VQC:
            qubits = int(s["model"].split("-")[0])
            rate = vqc_throughput(device, qubits, LAYERS, s["vqc_samples"], s["repeats"])
            measured = {"model": VQC, "value": rate}
        else:
            with cudnn_autotuned(s["part"] == AUTOTUNED):
                seconds, accuracy = fedavg_rounds(
                    s["model"], device, s["clients"], s["per_client"], s["repeats"], s["test"]
                )
            measured = {"model": s["model"], "value": seconds, "accuracy": accuracy}
        return {
            "part": s["part"],
            "what": s["what"],
            "unit": s["unit"],
            "device": device,
            "threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
            "torch": torch.__version__,
        } | measured

    def report(self, rows: list[dict[str, Value]]) -> dict:
        return {TABLE.name: partial(table, rows)}


@contextmanager
def cudnn_autotuned(on: bool) -> Iterator[None]:
    """With ``on``: cuDNN's autotuned, non-deterministic algorithms inside the block (after
    flowerbed's deterministic settings were made, so that they do not replace these), and
    flowerbed's deterministic ones again after it; without, nothing."""
    if not on:
        yield
        return
    deterministic_cuda()
    set_deterministic(False)
    try:
        yield
    finally:
        set_deterministic(True)


def set_deterministic(on: bool) -> None:
    """cuDNN's and torch's deterministic algorithms on (as ``core.device`` sets them) or off."""
    torch.backends.cudnn.deterministic = on
    torch.backends.cudnn.benchmark = not on
    torch.use_deterministic_algorithms(on, warn_only=on)


def synthetic_images(num: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    means = torch.randn(CLASSES, *SHAPE, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, CLASSES, (num,), generator=generator)
    return means[y] + 2.0 * torch.randn(num, *SHAPE, generator=generator), y


def client(config, data: DatasetSplits, pid: int, num_clients: int, x, y) -> LocalClient:
    context = Context(
        run_id=1,
        node_id=pid + 1,
        node_config={"partition-id": pid, "num-partitions": num_clients},
        state=RecordDict(),
        run_config={},
    )
    return LocalClient(config, context, pid, num_clients, data, x, y, x[:0], y[:0])


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def fedavg_rounds(
    model_name: str, device: str, clients: int, per_client: int, repeats: int, test: int
):
    """Median seconds of a FedAvg round (after one warm-up round) and the final accuracy."""
    config = parse_run_config(
        resolve_run_config({"model": model_name, "device": device, "local-epochs": 1})
    )
    x_test, y_test = synthetic_images(test, seed=1)
    data = DatasetSplits("synthetic-cifar", x_test, y_test, x_test, y_test, CLASSES)
    shards = [synthetic_images(per_client, seed=10 + pid) for pid in range(clients)]
    nodes = [client(config, data, pid, clients, *shard) for pid, shard in enumerate(shards)]
    torch.manual_seed(0)
    global_model = build_model(model_name, SHAPE, CLASSES, config=config)
    seconds, accuracy = [], float("nan")
    for server_round in range(1, repeats + 2):
        sync(device)
        start = time.perf_counter()
        weighted, total = None, 0
        for node in nodes:
            model = node.new_model()
            model.load_state_dict(global_model.state_dict())
            result = node.train(model, server_round)
            state = model.state_dict()
            n = result.num_examples
            if weighted is None:
                weighted = {k: v.double() * n for k, v in state.items()}
            else:
                for k, v in state.items():
                    weighted[k] += v.double() * n
            total += n
        global_model.load_state_dict(
            {k: (v / total).to(state[k].dtype) for k, v in weighted.items()}
        )
        _, accuracy = evaluate(global_model, x_test, y_test)
        sync(device)
        if server_round > 1:  # round 1: warm-up
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), accuracy


def vqc_throughput(device: str, qubits: int, layers: int, samples: int, repeats: int) -> float:
    """Median samples per second of VQC local training (one epoch of batches of 32)."""
    config = parse_run_config(
        resolve_run_config(
            {
                "model": "vqc",
                "device": device,
                "local-epochs": 1,
                "vqc-qubits": qubits,
                "vqc-layers": layers,
                "vqc-reduction": "linear",
                "vqc-readout": "linear",
                "optimizer": "adam",
                "learning-rate": 0.01,
            }
        )
    )
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 64, generator=generator)
    y = torch.randint(0, CLASSES, (samples,), generator=generator)
    data = DatasetSplits("synthetic-vectors", x, y, x, y, CLASSES)
    node = client(config, data, 0, 1, x, y)
    model = node.new_model()
    rates = []
    for server_round in range(repeats + 1):
        sync(device)
        start = time.perf_counter()
        node.train(model, server_round)
        sync(device)
        if server_round > 0:  # the first epoch is a warm-up
            rates.append(samples / (time.perf_counter() - start))
    return statistics.median(rates)


def _cell(value: float | None) -> str:
    """Three significant digits, without an exponent (1082, 281, 89.2, 0.521)."""
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def markdown(rows: list[dict]) -> str:
    lines = [
        "| what | model | cpu | cuda | cuda speed-up |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        cpu, cuda = row.get("cpu"), row.get("cuda")
        ratio = (cpu / cuda if row["unit"] == "s/round" else cuda / cpu) if cpu and cuda else None
        lines.append(
            f"| {row['what']} ({row['unit']}) | {row['model']} | {_cell(cpu)} | {_cell(cuda)} |"
            f" {'-' if ratio is None else f'{ratio:.1f}x'} |"
        )
    return "\n".join(lines)


def report(data: Path) -> str:
    """``gpu.md`` from the rows in ``data``'s folder (and the provenance beside them) alone."""
    return table(measured_rows(data.parent), data.parent)


def table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``gpu.md``: the devices line, one table row per (what, model, unit) in the rows' order
    with its cpu and cuda values (``markdown``), and where the rows were measured (none is
    said for the rows converted from ``gpu.csv``, whose provenance was not recorded)."""
    merged: dict[tuple, dict] = {}
    for r in rows:
        key = (r["what"], r["model"], r["unit"])
        merged.setdefault(key, {"what": r["what"], "model": r["model"], "unit": r["unit"]})
        merged[key][r["device"]] = r["value"]
    cpu = [r for r in rows if r["device"] == "cpu"] or rows
    header = (
        f"devices: cpu ({joined(cpu, 'threads')} torch threads)"
        f" and GPU: {joined(rows, 'gpu')}; torch {joined(rows, 'torch')}"
    )
    measured = measurement_lines(folder)
    lines = [header, "", markdown(list(merged.values()))]
    return "\n".join(lines + (["", " ".join(measured)] if measured else [])) + "\n"


def main(argv: list[str] | None = None) -> int:
    if not torch.cuda.is_available():
        print("no GPU here: the cuda points need one and are left out of the grid")
    return study_cli.main(Gpu(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
