"""QFedAvg vs QFedAdam vs QFedFisher on the VQC (the comparison of the QFedFisher paper, Table I,
on data available offline): digits with Dirichlet(0.5) and breast-cancer with Dirichlet(0.1),
10 clients each, several seeds; accuracy and loss of the global model per round, seconds per
round; a markdown table and a plot.

    python benchmarks/quantum_fl.py                       # the default comparison (~15 min)
    python benchmarks/quantum_fl.py --seeds 1 --rounds 2 2 --out /tmp/qfl   # a smoke run
    python benchmarks/quantum_fl.py --report-only --out benchmarks/results/quantum_fl

Every run is the real ServerApp job with the real ClientApp handlers in this process
(``run_in_process``); clients train one after another, so a round's seconds are the sum of the
clients' work plus the evaluations. Results accumulate in ``<out>/runs.json`` (a rerun skips
what is there); ``<out>/quantum_fl.md`` and ``<out>/quantum_fl.png`` are rewritten at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

# The paper: Adam, E = 1, B = 32, delta = 0.01, all clients every round on ADNI. Our learning
# rate is higher than the paper's 1e-3 because we run a few rounds, not hundreds. Only the global
# model is evaluated (on the held-out test split), as in the paper's Table I.
COMMON = {
    "model": "vqc",
    "local-epochs": 1,
    "batch-size": 32,
    "optimizer": "adam",
    "learning-rate": 0.05,
    "fraction-train": 1.0,
    "fraction-evaluate": 0.0,
    "vqc-layers": 4,
    "qfedfisher-delta": 0.01,
}
DATASETS = {
    "digits": {"dataset": "digits", "dirichlet-alpha": 0.5},
    # Dir(0.1) over 10 clients leaves some clients (almost) empty on 455 samples: no minimum
    "breast-cancer": {"dataset": "breast-cancer", "dirichlet-alpha": 0.1, "min-partition-size": 0},
}
VARIANTS = {
    "qfedavg": {"strategy": "qfedavg"},
    "qfedadam": {"strategy": "qfedadam"},
    "qfedfisher": {"strategy": "qfedfisher"},
    # the same rule with the Fisher taken from the training steps' gradients (no extra pass)
    "qfedfisher-training": {"strategy": "qfedfisher", "qfedfisher-fisher-pass": "training"},
    # server rule only, without the client-side rule of Fig. 3
    "qfedfisher-server-only": {"strategy": "qfedfisher", "qfedfisher-client-rule": False},
}


def run_one(dataset: str, variant: str, seed: int, rounds: int, out: Path) -> dict:
    from flowerbed.inprocess import run_in_process

    overrides = {
        **COMMON,
        **DATASETS[dataset],
        **VARIANTS[variant],
        "seed": seed,
        "num-server-rounds": rounds,
        "output-dir": str(out / "runs"),
        "run-name": f"{variant}-{dataset}-seed{seed}",
    }
    start, cpu_start = time.perf_counter(), time.process_time()
    run_dir = run_in_process(overrides, num_clients=10)
    cpu = time.process_time() - cpu_start
    history = json.loads((run_dir / "history.json").read_text())
    return {
        "dataset": dataset,
        "variant": variant,
        "seed": seed,
        "rounds": rounds,
        "wall_seconds": time.perf_counter() - start,
        # CPU seconds of this process per round (setup and evaluations included, the same for
        # every variant): steadier than wall-clock seconds on a machine shared with others
        "cpu_seconds_per_round": cpu / rounds,
        "accuracy": [row["central_accuracy"] for row in history],
        "loss": [row["central_loss"] for row in history],
        "seconds": [row["seconds"] for row in history[1:]],
        "bytes_received": [row["bytes_received"] for row in history[1:]],
        "bytes_sent": [row["bytes_sent"] for row in history[1:]],
    }


def summarise(runs: list[dict], variants: list[str]) -> str:
    lines = []
    for dataset in DATASETS:
        rows = [r for r in runs if r["dataset"] == dataset]
        if not rows:
            continue
        rounds = rows[0]["rounds"]
        alpha = DATASETS[dataset]["dirichlet-alpha"]
        lines += [
            f"### {dataset}, Dirichlet({alpha}), 10 clients, {rounds} rounds",
            "",
            (
                "| strategy | seeds | final accuracy (%) | final loss | wall s / round |"
                " CPU s / round | time vs qfedavg (wall / CPU) | KB received / round |"
            ),
            "|---|---|---|---|---|---|---|---|",
        ]
        base = None
        for variant in variants:
            vr = [r for r in rows if r["variant"] == variant]
            if not vr:
                continue
            acc = np.array([r["accuracy"][-1] for r in vr])
            loss = np.array([r["loss"][-1] for r in vr])
            sec = float(np.mean([np.mean(r["seconds"]) for r in vr]))
            cpu = float(np.mean([r["cpu_seconds_per_round"] for r in vr]))
            if variant == "qfedavg":
                base = (sec, cpu)
            rel = (
                f"{100 * (sec / base[0] - 1):+.1f}% / {100 * (cpu / base[1] - 1):+.1f}%"
                if base
                else ""
            )
            kb = np.mean([np.mean(r["bytes_received"]) for r in vr]) / 1e3
            lines.append(
                f"| {variant} | {len(vr)} | {100 * acc.mean():.1f} ± {100 * acc.std():.1f}"
                f" | {loss.mean():.3f} ± {loss.std():.3f} | {sec:.2f} | {cpu:.2f} | {rel}"
                f" | {kb:.1f} |"
            )
        lines += [
            "",
            (
                "Mean test accuracy (%) / loss of the global model per round (round 0 ="
                " initial model):"
            ),
            "",
            "| strategy | " + " | ".join(str(i) for i in range(rounds + 1)) + " |",
            "|---|" + "---|" * (rounds + 1),
        ]
        for variant in variants:
            vr = [r for r in rows if r["variant"] == variant]
            if vr:
                acc = np.mean([r["accuracy"] for r in vr], axis=0)
                loss = np.mean([r["loss"] for r in vr], axis=0)
                cells = " | ".join(f"{100 * a:.1f} / {l:.2f}" for a, l in zip(acc, loss))
                lines.append(f"| {variant} | {cells} |")
        lines.append("")
    return "\n".join(lines)


def plot(runs: list[dict], variants: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = [d for d in DATASETS if any(r["dataset"] == d for r in runs)]
    fig, axes = plt.subplots(2, len(datasets), figsize=(5.5 * len(datasets), 7), squeeze=False)
    for col, dataset in enumerate(datasets):
        for variant in variants:
            vr = [r for r in runs if r["dataset"] == dataset and r["variant"] == variant]
            if not vr:
                continue
            for row, metric in enumerate(("accuracy", "loss")):
                values = np.array([r[metric] for r in vr])
                mean, std = values.mean(0), values.std(0)
                x = np.arange(len(mean))
                axes[row, col].plot(x, mean, label=variant)
                axes[row, col].fill_between(x, mean - std, mean + std, alpha=0.2)
                axes[row, col].set_xlabel("round")
                axes[row, col].set_ylabel(f"test {metric}")
        axes[0, col].set_title(f"{dataset}, Dir({DATASETS[dataset]['dirichlet-alpha']})")
        axes[0, col].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def client_overhead(dataset: str, repeats: int) -> str:
    """Median seconds of one client's local work on the VQC (E = 1), measured back to back in
    this process so that the load of other jobs hits every variant alike: plain training
    (QFedAvg), training + the Fisher pass after it (QFedFisher, 'final'), training with the
    squared-gradient hook (QFedFisher, 'training')."""
    import torch

    from flowerbed.catalog import parse_run_config
    from flowerbed.data.federation import load_splits
    from flowerbed.models import build_model
    from flowerbed.strategies.qfedfisher import SquaredGradients, empirical_fisher
    from flowerbed.training.loops import build_optimizer, train_local

    config = parse_run_config({**COMMON, **DATASETS[dataset]})
    data = load_splits(config)
    x, y = data.x_train[:160], data.y_train[:160]  # a client of 160 samples: 5 batches

    def train(model, **hooks):
        return train_local(
            model,
            x,
            y,
            epochs=1,
            batch_size=32,
            generator=torch.Generator().manual_seed(0),
            optimizer=build_optimizer(model.parameters(), config),
            **hooks,
        )

    def plain(model):
        train(model)

    def final(model):
        train(model)
        empirical_fisher(model, x, y, 32, torch.Generator().manual_seed(1))

    def during(model):
        hook = SquaredGradients()
        train(model, after_backward=hook)
        hook.mean(model)

    variants = {
        "qfedavg (train)": plain,
        "qfedfisher final (train + Fisher pass)": final,
        "qfedfisher training (train + hook)": during,
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            model = build_model("vqc", data.input_shape, data.num_classes, config=config)
            start = time.perf_counter()
            fn(model)
            times[name].append(time.perf_counter() - start)
    base = float(np.median(times["qfedavg (train)"]))
    lines = [
        f"### client work per round, {dataset} VQC, 160 samples, E = 1, median of {repeats}",
        "",
        "| client step | seconds | vs qfedavg |",
        "|---|---|---|",
    ]
    for name, values in times.items():
        med = float(np.median(values))
        lines.append(f"| {name} | {med:.3f} | {100 * (med / base - 1):+.1f}% |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--rounds", type=int, nargs=2, default=[5, 8], metavar=("DIGITS", "BREAST_CANCER")
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["qfedavg", "qfedadam", "qfedfisher", "qfedfisher-training"],
        choices=list(VARIANTS),
    )
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/quantum_fl"))
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument(
        "--client-overhead",
        type=int,
        default=0,
        metavar="REPEATS",
        help="only measure one client's local work per variant, REPEATS times",
    )
    args = parser.parse_args()
    import flowerbed.inprocess  # noqa: F401 - configures Flower's logger, then quiet it

    logging.getLogger("flwr").setLevel(logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.client_overhead:
        report = "\n".join(client_overhead(d, args.client_overhead) for d in args.datasets)
        (args.out / "client_overhead.md").write_text(report)
        print(report)
        return
    store = args.out / "runs.json"
    runs = json.loads(store.read_text()) if store.exists() else []
    rounds = dict(zip(DATASETS, args.rounds))
    if not args.report_only:
        for seed in range(args.seeds):
            for dataset in args.datasets:
                for variant in args.variants:
                    if any(
                        r["dataset"] == dataset
                        and r["variant"] == variant
                        and r["seed"] == seed
                        and r["rounds"] == rounds[dataset]
                        for r in runs
                    ):
                        continue
                    run = run_one(dataset, variant, seed, rounds[dataset], args.out)
                    runs.append(run)
                    store.write_text(json.dumps(runs, indent=1))
                    print(
                        f"{dataset} {variant} seed {seed}: final accuracy"
                        f" {run['accuracy'][-1]:.3f}, {np.mean(run['seconds']):.2f} s/round,"
                        f" {run['wall_seconds']:.0f} s",
                        flush=True,
                    )
    runs = [
        r
        for r in runs
        if r["rounds"] == rounds[r["dataset"]]
        and r["variant"] in args.variants
        and r["dataset"] in args.datasets
        and r["seed"] < args.seeds
    ]
    report = summarise(runs, args.variants)
    (args.out / "quantum_fl.md").write_text(report)
    plot(runs, args.variants, args.out / "quantum_fl.png")
    print(report)


if __name__ == "__main__":
    main()
