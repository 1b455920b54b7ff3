"""FedSA ("Federated Selective Aggregation for Knowledge Amalgamation", Xie et al., 2022) on
digits, the offline replication of SEEDS 1.11: does saliency-based teacher selection help a
server's target model learn from k labelled images per class, and does it avoid the teachers
that live in another domain?

Setting: digits, ``cnn`` target and teachers, 10 clients (teachers) on the pathological
partition (2 classes each) of the clients' pool; the server keeps 40 % of the training pool
(``server-fraction``), of which k images per class are its target set D_T; clients 5..9 are
foreign (their private inputs pixel-permuted); 30 rounds, a selection every 10 rounds, K = 3
teachers per selection, 2 hint-distillation epochs. Methods (``fedsa-selection``): FedSA
(``saliency``), Scratch (D_T alone), FedAvg+ (``all``), Random, Top-K, Least-K; k in
{1, 2, 5, 10}; seeds 7, 42, 123. Every run goes through the real ServerApp/ClientApp handlers
in this process (``run_in_process``).

Measured: the adapted target model's final test accuracy (the weak model, history row 0 of
the teacher-using runs, as a row of its own); FedSA - Scratch per k; the share of the drawn
teachers that were foreign; a Table 3 analogue at k = 10: per teacher, its similarity at the
first selection (both ``averaged`` and ``per-image``, from the FedSA run's selection log) and
its linear-probe transfer accuracy (the teacher frozen, a new linear head trained on D_T,
tested on the held-out test set), with Spearman / Pearson over the 10 teachers; and whether the
orderings of SEEDS 1.11 hold.

Resumable and shardable: every (method, k, seed) writes one JSON under ``<out>/runs`` (and
every seed's probe table one more); a rerun skips what exists. Shard by seed (``--seeds 7``
in one process, ``--seeds 42`` in another), then run without ``--seeds`` for the full report.
Teachers are cached per process: a seed's first teacher-using run also pays their
pre-training in its ``seconds``. Outputs under ``--out`` (default ``benchmarks/results/fedsa``;
``--quick`` writes to ``<out>/quick``): ``fedsa.md``, ``fedsa.csv`` (one row per run),
``fedsa_curves.png`` (mean accuracy per round at k = 5).

Usage::

    python benchmarks/fedsa.py --quick          # seed 42, k in {1, 5}, 10 rounds, 4 methods
    python benchmarks/fedsa.py --seeds 7        # one shard of the full grid
    python benchmarks/fedsa.py                  # the full grid (~1 h on 2 cores) and report
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
from flwr.app import Context, RecordDict
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flowerbed.catalog import parse_run_config
from flowerbed.data.federation import load_splits
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.methods.fedsa.owner import private_client, teacher_model
from flowerbed.methods.fedsa.target import adapt, target_set
from flowerbed.training.local_client import LocalClient
from flowerbed.training.loops import evaluate

NUM_CLIENTS, FOREIGN = 10, 5
METHODS = {
    "FedSA": "saliency",
    "Scratch": "scratch",
    "FedAvg+": "all",
    "Random": "random",
    "Top-K": "top-k",
    "Least-K": "least-k",
}
QUICK_METHODS = ("FedSA", "Scratch", "Random", "Least-K")
PROBE_K, CURVE_K = 10, 5  # the Table 3 analogue's k; the k of the curves


def overrides(selection: str, k: int, seed: int, rounds: int, out: Path) -> dict:
    return {
        "strategy": "fedsa",
        "dataset": "digits",
        "model": "cnn",
        "server-fraction": 0.4,
        "partitioner": "pathological",
        "classes-per-client": 2,
        "fedsa-foreign-teachers": FOREIGN,
        "num-server-rounds": rounds,
        "fedsa-selection-gap": 10,
        "fedsa-num-selected": 3,
        "fedsa-local-epochs": 2,
        "fedsa-selection": selection,
        "fedsa-labels-per-class": k,
        "seed": seed,
        "output-dir": str((out / "flwr-runs").resolve()),
        "run-name": f"{selection}-k{k}-seed{seed}-r{rounds}",
    }


def run_point(out: Path, label: str, k: int, seed: int, rounds: int) -> dict:
    """One (method, k, seed) run, or its stored record."""
    path = out / "runs" / f"{METHODS[label]}-k{k}-seed{seed}-r{rounds}.json"
    if path.is_file():
        return json.loads(path.read_text())
    print(f"  run {label}, k={k}, seed {seed}, {rounds} rounds ...", flush=True)
    started = time.perf_counter()
    run_dir = run_in_process(overrides(METHODS[label], k, seed, rounds, out), NUM_CLIENTS)
    seconds = time.perf_counter() - started
    history = json.loads((run_dir / "history.json").read_text())
    log_path = run_dir / "fedsa_selection.json"
    record = {
        "method": label,
        "k": k,
        "seed": seed,
        "rounds": rounds,
        "final_accuracy": history[-1]["central_accuracy"],
        "accuracy_per_round": [row["central_accuracy"] for row in history],
        "weak_accuracy": history[0]["central_accuracy"],
        "seconds": seconds,
        "run_dir": str(run_dir),
        "selection_log": json.loads(log_path.read_text()) if log_path.is_file() else None,
    }
    path.write_text(json.dumps(record))
    return record


def foreign_draws(record: dict) -> tuple[int, int]:
    """(foreign draws, all draws) over the run's selections, multiplicities counted."""
    log = record["selection_log"]
    if not log:
        return 0, 0
    foreign = {t["partition"] for t in log["teachers"] if t["foreign"]}
    draws = [(int(pid), m) for s in log["selections"] for pid, m in s["selected"].items()]
    return sum(m for pid, m in draws if pid in foreign), sum(m for _, m in draws)


def probe_teachers(out: Path, seed: int, rounds: int) -> dict:
    """Table 3 analogue for one seed: first-selection similarity and linear-probe transfer
    accuracy of every teacher, at k = PROBE_K."""
    path = out / "runs" / f"table3-seed{seed}-r{rounds}.json"
    if path.is_file():
        return json.loads(path.read_text())
    log = run_point(out, "FedSA", PROBE_K, seed, rounds)["selection_log"]
    first = log["selections"][0]
    run_config = resolve_run_config(overrides("saliency", PROBE_K, seed, rounds, out))
    config = parse_run_config(run_config)
    x, y = target_set(config)
    data = load_splits(config)
    transfer, own_gap = [], 0.0
    for pid in first["candidates"]:
        context = Context(
            run_id=1,
            node_id=1,
            node_config={"partition-id": pid, "num-partitions": NUM_CLIENTS},
            state=RecordDict(),
            run_config=run_config,
        )
        client = LocalClient.from_context(context, config)
        teacher = teacher_model(client)
        transfer.append(
            evaluate(adapt(teacher, x, y, config, "head", 0), data.x_test, data.y_test)[1]
        )
        private = private_client(client)  # the same teacher as the run's: its own accuracy
        own = evaluate(teacher, private.x_test, private.y_test)[1]
        own_gap = max(own_gap, abs(own - log["teachers"][pid]["accuracy"]))
    record = {
        "seed": seed,
        "teachers": first["candidates"],
        "foreign": [log["teachers"][pid]["foreign"] for pid in first["candidates"]],
        "similarity-averaged": first["similarity-averaged"],
        "similarity-per-image": first["similarity-per-image"],
        "transfer": transfer,
        "own-accuracy-gap": own_gap,
    }
    path.write_text(json.dumps(record))
    return record


def mean_std(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else float("nan")


def cell(values, scale: float = 100.0, digits: int = 1) -> str:
    if len(values) == 0:
        return "–"
    mean, std = mean_std(np.asarray(values) * scale)
    spread = f"{std:.{digits}f}" if len(values) > 1 else "–"
    return f"{mean:.{digits}f} ± {spread} ({len(values)})"


def yes(flag: bool | None) -> str:
    return "n/a" if flag is None else ("yes" if flag else "no")


def plot_curves(runs: list[dict], labels, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in labels:
        curves = [r["accuracy_per_round"] for r in runs if r["method"] == label]
        if not curves:
            continue
        mean = np.mean(curves, axis=0)
        if len(mean) == 1:  # Scratch: the target set alone, one number
            ax.axhline(mean[0], linestyle="--", color="grey", label=label)
        else:
            ax.plot(np.arange(len(mean)), mean, label=label)
    ax.set_xlabel("round (0: the weak model)")
    ax.set_ylabel("adapted target model's test accuracy")
    ax.set_title(f"FedSA on digits, k = {CURVE_K} labels per class, mean over seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def report(runs: list[dict], probes: list[dict], labels, ks, seeds, rounds) -> list[str]:
    finals = {
        (label, k): [r["final_accuracy"] for r in runs if r["method"] == label and r["k"] == k]
        for label in labels
        for k in ks
    }
    mean = {key: float(np.mean(v)) for key, v in finals.items() if v}
    lines = [
        "# FedSA on digits: selective amalgamation of 5 clean and 5 foreign teachers\n",
        f"Command: `python {shlex.join(sys.argv)}`\n",
        (
            f"{NUM_CLIENTS} teachers (`cnn`, pathological, 2 classes each; {FOREIGN} foreign),"
            f" server-fraction 0.4, {rounds} rounds, selection every 10, K = 3, E = 2; seeds"
            f" {', '.join(map(str, seeds))}. Cells: test accuracy in %, mean ± sample std (n).\n"
        ),
        "## Final accuracy of the adapted target model\n",
        "| method | " + " | ".join(f"k = {k}" for k in ks) + " |",
        "|---|" + "---|" * len(ks),
    ]
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(cell(finals[label, k]) for k in ks) + " |")
    weak = {
        k: [r["weak_accuracy"] for r in runs if r["k"] == k and r["method"] == labels[0]]
        for k in ks
    }
    lines.append("| weak model (row 0) | " + " | ".join(cell(weak[k]) for k in ks) + " |")
    lines += ["\n## FedSA − Scratch (paired by seed, points)\n", "| k | gap |", "|---|---|"]
    gaps = {}
    for k in ks:
        by_seed = {
            label: {
                r["seed"]: r["final_accuracy"] for r in runs if r["method"] == label and r["k"] == k
            }
            for label in ("FedSA", "Scratch")
        }
        common = sorted(set(by_seed["FedSA"]) & set(by_seed["Scratch"]))
        diffs = [by_seed["FedSA"][s] - by_seed["Scratch"][s] for s in common]
        if diffs:
            gaps[k] = float(np.mean(diffs))
        lines.append(f"| {k} | {cell(diffs)} |")
    lines += [
        "\n## Share of the drawn teachers that were foreign (all selections, all k and seeds)\n",
        "| method | foreign draws / draws | share |",
        "|---|---|---|",
    ]
    for label in labels:
        counts = [foreign_draws(r) for r in runs if r["method"] == label]
        foreign, draws = sum(c[0] for c in counts), sum(c[1] for c in counts)
        share = f"{100 * foreign / draws:.0f} %" if draws else "– (no teachers)"
        lines.append(f"| {label} | {foreign} / {draws} | {share} |")

    lines += [
        (
            f"\n## Table 3 analogue (k = {PROBE_K}): similarity at the first selection vs"
            " linear-probe transfer accuracy of the 10 teachers\n"
        ),
        "| similarity | Spearman | Pearson | clean (0..4) | foreign (5..9) |",
        "|---|---|---|---|---|",
    ]
    table3 = {}
    for kind in ("averaged", "per-image"):
        rows = []
        for p in probes:
            sim, acc, foreign = (
                np.array(p[key]) for key in (f"similarity-{kind}", "transfer", "foreign")
            )
            rows.append(
                (
                    stats.spearmanr(sim, acc).statistic,
                    stats.pearsonr(sim, acc).statistic,
                    sim[~foreign].mean(),
                    sim[foreign].mean(),
                )
            )
        cols = list(zip(*rows)) if rows else [[]] * 4
        table3[kind] = [float(np.mean(c)) if len(c) else float("nan") for c in cols]
        lines.append(f"| {kind} | " + " | ".join(cell(c, 1.0, 3) for c in cols) + " |")
    for p in probes:
        order = np.argsort(p["teachers"])
        transfer = " ".join(f"{100 * p['transfer'][i]:.0f}" for i in order)
        sims = " ".join(f"{p['similarity-averaged'][i]:.2f}" for i in order)
        lines.append(
            f"\nSeed {p['seed']}: transfer accuracy (%) of teachers 0..9: {transfer}; averaged"
            f" similarity: {sims} (teacher check, largest own-accuracy difference from the run:"
            f" {p['own-accuracy-gap']:.1e})."
        )

    lines.append("\n## Orderings of SEEDS 1.11 (on the means over seeds)\n")
    small = [k for k in ks if k <= 5 and k in gaps]
    above = all(gaps[k] > 0 for k in small) if small else None
    ordered = [gaps[k] for k in ks if k in gaps]
    shrinks = all(b <= a for a, b in itertools.pairwise(ordered)) if len(ordered) > 1 else None
    gap_text = ", ".join(f"k={k}: {100 * g:+.1f}" for k, g in gaps.items())
    lines.append(
        f"* (a) FedSA > Scratch at every k ≤ 5: {yes(above)}; the gap shrinks as k grows"
        f" (non-increasing): {yes(shrinks)} ({gap_text or 'no pairs'})"
    )
    spearman, _, clean, foreign = table3["averaged"]
    lines.append(
        f"* (b) clean similarity > foreign similarity: {yes(None if not probes else clean > foreign)}"
        f" ({clean:.3f} vs {foreign:.3f}, averaged); Spearman > 0:"
        f" {yes(None if not probes else spearman > 0)} ({spearman:+.3f}; per-image"
        f" {table3['per-image'][0]:+.3f})"
    )
    for a, b, strict in (
        ("FedSA", "FedAvg+", True),
        ("FedSA", "Random", False),
        ("Random", "Least-K", True),
    ):
        pairs = [(k, mean[a, k], mean[b, k]) for k in ks if (a, k) in mean and (b, k) in mean]
        holds = all(x > y if strict else x >= y for _, x, y in pairs) if pairs else None
        numbers = ", ".join(f"k={k}: {100 * x:.1f} vs {100 * y:.1f}" for k, x, y in pairs)
        lines.append(
            f"* (c) {a} {'>' if strict else '≥'} {b} at every k: {yes(holds)} ({numbers or 'not run'})"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 42, 123])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 5, 10])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="seed 42, k 1 and 5, 10 rounds")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/fedsa"))
    args = parser.parse_args()
    labels = tuple(METHODS)
    if args.quick:
        args.seeds, args.ks, args.rounds, labels = [42], [1, 5], 10, QUICK_METHODS
        args.out = args.out / "quick"
    logging.getLogger("flwr").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    (args.out / "runs").mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    runs, probes = [], []
    for seed in args.seeds:
        for k in args.ks:
            runs += [run_point(args.out, label, k, seed, args.rounds) for label in labels]
        print(f"  Table 3 analogue, seed {seed} ...", flush=True)
        probes.append(probe_teachers(args.out, seed, args.rounds))

    lines = report(runs, probes, labels, args.ks, args.seeds, args.rounds)
    lines.append(f"\nTotal {time.perf_counter() - started:.0f} s (stored points are not re-run).")
    text = "\n".join(lines) + "\n"
    print(text)
    (args.out / "fedsa.md").write_text(text)
    columns = ("method", "k", "seed", "rounds", "final_accuracy", "weak_accuracy", "seconds")
    csv = [",".join(columns) + ",foreign_draws,draws,run_dir"]
    for r in runs:
        foreign, draws = foreign_draws(r)
        csv.append(",".join(str(r[c]) for c in columns) + f",{foreign},{draws},{r['run_dir']}")
    (args.out / "fedsa.csv").write_text("\n".join(csv) + "\n")
    plot_curves([r for r in runs if r["k"] == CURVE_K], labels, args.out / "fedsa_curves.png")


if __name__ == "__main__":
    main()
