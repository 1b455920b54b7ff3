"""CPU vs GPU: seconds per FedAvg round (cnn, resnet18 on CIFAR-sized images) and VQC training
throughput, measured side by side in one run.

    python benchmarks/gpu.py            # every device this machine has
    python benchmarks/gpu.py --quick    # one repeat, fewer clients and samples

A round is flowerbed's own client step and server rule, in this process: each of ``--clients``
clients starts from the global model and trains ``local-epochs=1`` on its 500 images
(``LocalClient.train``: the run's optimiser, batches moved to the run's device), the server
takes the sample-weighted mean of the returned state dicts, and evaluates the new global model
on 2,000 test images (``training.loops.evaluate``). The images are generated (3 x 32 x 32,
10 classes, one random mean image per class plus noise), not CIFAR-10: only their size
matters here. The first round is a warm-up (CUDA context, cuDNN plans); the table gives the
median of ``--repeats`` further rounds.

The VQC rows train flowerbed's VQC (``default.qubit``, backprop, one broadcast simulation per
mini-batch of 32, ``vqc-reduction='linear'`` feeding 2^n amplitudes) through the same
``LocalClient.train`` and report samples per second, for growing registers.

``deterministic`` rows repeat the resnet18 round with cuDNN's autotuned, non-deterministic
algorithms (flowerbed's runs use the deterministic ones, see ``core.device``): the price
of repeatable GPU runs.

Results: ``benchmarks/results/gpu/gpu.csv`` (the measured values) and ``gpu.md``, the table
that ``docs/gpus.md`` includes, made from ``gpu.csv`` alone (``report``; its first line, the
devices, from the first line of the run's log, ``bench.log``, when there is one)::

    python benchmarks/gpu.py | tee benchmarks/results/gpu/bench.log
    python benchmarks/gpu.py --report-only    # gpu.md from gpu.csv
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from flwr.app import Context, RecordDict

from flowerbed.catalog import parse_run_config
from flowerbed.core.results import write_csv
from flowerbed.data import DatasetSplits
from flowerbed.inprocess import resolve_run_config
from flowerbed.models import build_model
from flowerbed.training.local_client import LocalClient
from flowerbed.training.loops import evaluate

OUT = Path(__file__).resolve().parent / "results" / "gpu"
RESULTS = OUT
# what ``report`` reads and writes, and the page that includes the table
DATA = OUT / "gpu.csv"
TABLE = OUT / "gpu.md"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "gpus.md"
SHAPE, CLASSES = (3, 32, 32), 10


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


def report(data: Path, header: str | None = None) -> str:
    """``gpu.md`` from ``gpu.csv`` alone: the devices line (``header``, else the first line of
    ``bench.log`` beside the CSV when it names them) and the table of ``markdown``."""
    import csv

    with data.open() as f:
        rows = [
            {k: (float(v) if k in ("cpu", "cuda") and v else v) for k, v in row.items() if v}
            for row in csv.DictReader(f)
        ]
    log = data.parent / "bench.log"
    if header is None and log.is_file():
        first = log.read_text().splitlines()[0]
        header = first if first.startswith("devices:") else None
    return (f"{header}\n\n" if header else "") + markdown(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--qubits", type=int, nargs="+", default=[6, 10, 14])
    parser.add_argument("--report-only", action="store_true", help="gpu.md from gpu.csv")
    args = parser.parse_args()
    if args.report_only:
        TABLE.write_text(report(DATA))
        print(TABLE.read_text())
        return
    clients, repeats, per_client, test = args.clients, args.repeats, 500, 2000
    qubits, vqc_samples = args.qubits, 512
    if args.quick:
        clients, repeats, per_client, test, qubits, vqc_samples = 2, 1, 64, 128, [6], 64
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    header = (
        f"devices: cpu ({torch.get_num_threads()} torch threads)"
        f" and GPU: {gpu}; torch {torch.__version__}"
    )
    print(header)
    rows = []
    for model_name in ("cnn", "resnet18"):
        row = {"what": f"FedAvg round, {clients} clients x {per_client}", "model": model_name}
        row["unit"] = "s/round"
        for device in devices:
            seconds, accuracy = fedavg_rounds(
                model_name, device, clients, per_client, repeats, test
            )
            row[device] = seconds
            print(f"{model_name} {device}: {seconds:.3f} s/round (accuracy {accuracy:.3f})")
        rows.append(row)
    if "cuda" in devices:
        torch.backends.cudnn.deterministic = False
        torch.backends.cudnn.benchmark = True
        torch.use_deterministic_algorithms(False)
        seconds, _ = fedavg_rounds("resnet18", "cuda", clients, per_client, repeats, test)
        print(f"resnet18 cuda, cuDNN autotuned (not deterministic): {seconds:.3f} s/round")
        rows.append(
            {
                "what": "FedAvg round, cuDNN autotuned, not deterministic",
                "model": "resnet18",
                "unit": "s/round",
                "cuda": seconds,
            }
        )
    for n in qubits:
        row = {"what": f"VQC training, {n} qubits, 4 layers", "model": "vqc", "unit": "samples/s"}
        for device in devices:
            row[device] = vqc_throughput(device, n, 4, vqc_samples, repeats)
            print(f"vqc {n} qubits {device}: {row[device]:.1f} samples/s")
        rows.append(row)
    table = markdown(rows)
    print(table)
    OUT.mkdir(parents=True, exist_ok=True)
    write_csv(DATA, rows, ("what", "model", "unit", "cpu", "cuda"))
    TABLE.write_text(report(DATA, header))
    print(f"wrote {OUT / 'gpu.md'}")


if __name__ == "__main__":
    main()
