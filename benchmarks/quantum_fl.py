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
    "model": "vqc", "local-epochs": 1, "batch-size": 32, "optimizer": "adam",
    "learning-rate": 0.05, "fraction-train": 1.0, "fraction-evaluate": 0.0,
    "vqc-layers": 4, "qfedfisher-delta": 0.01,
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
    from flowerbed.simulation import run_in_process

    overrides = {**COMMON, **DATASETS[dataset], **VARIANTS[variant], "seed": seed,
                 "num-server-rounds": rounds, "output-dir": str(out / "runs"),
                 "run-name": f"{variant}-{dataset}-seed{seed}"}
    start = time.perf_counter()
    run_dir = run_in_process(overrides, num_clients=10)
    history = json.loads((run_dir / "history.json").read_text())
    return {
        "dataset": dataset, "variant": variant, "seed": seed, "rounds": rounds,
        "wall_seconds": time.perf_counter() - start,
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
        lines += [f"### {dataset}, Dirichlet({alpha}), 10 clients, {rounds} rounds", "",
                  "| strategy | seeds | final accuracy | final loss | s / round | vs qfedavg |"
                  " KB received / round |", "|---|---|---|---|---|---|---|"]
        base = None
        for variant in variants:
            vr = [r for r in rows if r["variant"] == variant]
            if not vr:
                continue
            acc = np.array([r["accuracy"][-1] for r in vr])
            loss = np.array([r["loss"][-1] for r in vr])
            sec = float(np.mean([np.mean(r["seconds"]) for r in vr]))
            base = sec if variant == "qfedavg" else base
            rel = f"{100 * (sec / base - 1):+.1f}%" if base else ""
            kb = np.mean([np.mean(r["bytes_received"]) for r in vr]) / 1e3
            lines.append(f"| {variant} | {len(vr)} | {100 * acc.mean():.1f} ± {100 * acc.std():.1f}"
                         f" | {loss.mean():.3f} ± {loss.std():.3f} | {sec:.2f} | {rel} | {kb:.1f} |")
        lines += ["", "Mean test accuracy (%) / loss of the global model per round (round 0 ="
                  " initial model):", "",
                  "| strategy | " + " | ".join(str(i) for i in range(rounds + 1)) + " |",
                  "|---|" + "---|" * (rounds + 1)]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, nargs=2, default=[5, 8],
                        metavar=("DIGITS", "BREAST_CANCER"))
    parser.add_argument("--variants", nargs="+", default=["qfedavg", "qfedadam", "qfedfisher",
                                                          "qfedfisher-training"],
                        choices=list(VARIANTS))
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/quantum_fl"))
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    import flowerbed.simulation  # noqa: F401 - configures Flower's logger, then quiet it

    logging.getLogger("flwr").setLevel(logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "runs.json"
    runs = json.loads(store.read_text()) if store.exists() else []
    rounds = dict(zip(DATASETS, args.rounds))
    if not args.report_only:
        for seed in range(args.seeds):
            for dataset in args.datasets:
                for variant in args.variants:
                    if any(r["dataset"] == dataset and r["variant"] == variant and r["seed"] == seed
                           and r["rounds"] == rounds[dataset] for r in runs):
                        continue
                    run = run_one(dataset, variant, seed, rounds[dataset], args.out)
                    runs.append(run)
                    store.write_text(json.dumps(runs, indent=1))
                    print(f"{dataset} {variant} seed {seed}: final accuracy"
                          f" {run['accuracy'][-1]:.3f}, {np.mean(run['seconds']):.2f} s/round,"
                          f" {run['wall_seconds']:.0f} s", flush=True)
    runs = [r for r in runs if r["rounds"] == rounds[r["dataset"]] and r["variant"] in args.variants
            and r["dataset"] in args.datasets and r["seed"] < args.seeds]
    report = summarise(runs, args.variants)
    (args.out / "quantum_fl.md").write_text(report)
    plot(runs, args.variants, args.out / "quantum_fl.png")
    print(report)


if __name__ == "__main__":
    main()
