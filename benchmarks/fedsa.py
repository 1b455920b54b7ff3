"""FedSA ("Federated Selective Aggregation for Knowledge Amalgamation", Xie et al., 2022) on
digits, an offline replication: does saliency-based teacher selection help a
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

Measured: the adapted target model's final test accuracy (and the weak model's: history row
0 of the FedSA runs); FedSA - Scratch per k; the share of the drawn
teachers that were foreign; a Table 3 analogue at k = 10: per teacher, its similarity at the
first selection (``averaged`` and ``per-image``, from the FedSA run's log) and its linear-probe
transfer accuracy (teacher frozen, a new linear head trained on D_T, held-out test set), with
Spearman / Pearson over the 10 teachers; whether the paper's orderings hold.

The runs are one sweep (``flowerbed.sweep``: seed x k x method, as Ray tasks, up to
``--workers`` at a time) in ``<out>/sweep``, plus, when k = 10 is not asked for, a second one
(seed x FedSA at k = 10) in ``<out>/sweep-probe`` for the Table 3 analogue, whose probes are
stored under ``<out>/probes``; a rerun skips what is done, and more seeds, ks or methods are
added to the sweep. Teachers are cached per process (a Ray worker runs many points): a
worker's first teacher-using run of a seed also pays their pre-training (~9 s). ``seconds``
is the sum of a run's rounds. Outputs under ``--out`` (default ``benchmarks/results/fedsa``;
``--quick``: ``<out>/quick``): ``fedsa.md``, ``fedsa.csv`` (one row per run),
``fedsa_curves.png`` (mean accuracy per round at k = 5), and ``table.md``: the accuracy,
paired-difference and foreign-share tables made from ``fedsa.csv`` alone (``report``,
``--report-only``), which ``docs/studies-fedsa.md`` includes. The Table 3 analogue comes from
the probes under ``<out>/probes``, which are not committed: it is in ``fedsa.md`` only.

Usage::

    python benchmarks/fedsa.py --quick          # seed 42, k 1 and 5, 10 rounds (~1.5 min)
    python benchmarks/fedsa.py --seeds 7        # one seed of the full grid
    python benchmarks/fedsa.py --workers 2      # the full grid (~30 min in one process)
    python benchmarks/fedsa.py --report-only    # table.md from fedsa.csv
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
from result_tables import (
    paired_cell,
    percent_cell,
    provenance_line,
    read_runs,
    record_provenance,
    table_head,
    write_table,
)
from scipy import stats

from flowerbed.catalog import parse_run_config
from flowerbed.core.results import round_seconds
from flowerbed.data.federation import load_splits
from flowerbed.experiments.fedsa_transfer import owner_teacher
from flowerbed.inprocess import resolve_run_config
from flowerbed.methods.fedsa.owner import private_client
from flowerbed.methods.fedsa.target import adapt, target_set
from flowerbed.sweep import Axis, SweepSpec, load_history, run_sweep
from flowerbed.training.loops import evaluate

NUM_CLIENTS, FOREIGN = 10, 5
# label -> (file slug, overrides). Every method adapts all parameters at the end (the authors'
# code), as Scratch does: the same final step for all; "FedSA (head)" is the paper's head-only
# adaptation, shown beside it.
METHODS = {
    "FedSA": ("saliency", {"fedsa-selection": "saliency"}),
    "FedSA (head)": ("saliency-head", {"fedsa-selection": "saliency", "fedsa-adapt": "head"}),
    "Scratch": ("scratch", {"fedsa-selection": "scratch"}),
    "FedAvg+": ("all", {"fedsa-selection": "all"}),
    "Random": ("random", {"fedsa-selection": "random"}),
    "Top-K": ("top-k", {"fedsa-selection": "top-k"}),
    "Least-K": ("least-k", {"fedsa-selection": "least-k"}),
}
QUICK_METHODS = ("FedSA", "Scratch", "Random", "Least-K")
PROBE_K, CURVE_K = 10, 5  # the Table 3 analogue's k; the k of the curves


SETTING = {
    "strategy": "fedsa",
    "dataset": "digits",
    "model": "cnn",
    "server-fraction": 0.4,
    "partitioner": "pathological",
    "classes-per-client": 2,
    "fedsa-foreign-teachers": FOREIGN,
    "fedsa-selection-gap": 10,
    "fedsa-num-selected": 3,
    "fedsa-local-epochs": 2,
}
SLUGS = {slug: label for label, (slug, _) in METHODS.items()}
RESULTS = Path(__file__).parent / "results" / "fedsa"
# what ``report`` reads and writes
DATA = RESULTS / "fedsa.csv"
TABLE = RESULTS / "table.md"
# the page that includes table.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-fedsa.md"
# the paired comparisons of the paper's orderings (c): (mine, base)
ORDERINGS = (("FedSA", "FedAvg+"), ("FedSA", "Random"), ("Random", "Least-K"))


def method_overrides(label: str, methods: dict = METHODS) -> dict:
    """A method's keys; every method adapts all parameters unless it says otherwise.
    ``methods``: label -> (slug, keys), ``METHODS`` or another benchmark's."""
    return {"fedsa-adapt": "all", **methods[label][1]}


def overrides(
    label: str, k: int, seed: int, rounds: int, setting: dict = SETTING, methods: dict = METHODS
) -> dict:
    """One (method, k, seed) run's run config (``setting``: the fixed keys, ``SETTING`` or
    another benchmark's variant of it)."""
    return {
        **setting,
        **method_overrides(label, methods),
        "num-server-rounds": rounds,
        "fedsa-labels-per-class": k,
        "seed": seed,
    }


def sweep_spec(
    labels,
    ks: list[int],
    seeds: list[int],
    rounds: int,
    setting: dict = SETTING,
    methods: dict = METHODS,
) -> SweepSpec:
    """Seed x k x method (named by its slug: folder names stay plain)."""
    return SweepSpec(
        (
            Axis.of_key("seed", seeds),
            Axis.of_key("fedsa-labels-per-class", ks),
            Axis.of_bundles(
                "method",
                {methods[label][0]: method_overrides(label, methods) for label in labels},
            ),
        ),
        fixed={**setting, "num-server-rounds": rounds},
        num_clients=NUM_CLIENTS,
    )


def run_records(
    sweep: Path, spec: SweepSpec, workers: int, rounds: int, slugs: dict = SLUGS
) -> list[dict]:
    """The completed runs of ``spec``'s sweep (run now where needed); ``slugs``: slug ->
    method label."""
    records = []
    for result in run_sweep(spec, sweep, workers=workers, extend=True):
        if not result.state.finished:
            continue
        labels, run_dir = result.point.labels, result.run_dir
        history = load_history(run_dir)
        log_path = run_dir / "fedsa_selection.json"
        records.append(
            {
                "method": slugs[labels["method"]],
                "k": int(labels["fedsa-labels-per-class"]),
                "seed": int(labels["seed"]),
                "rounds": rounds,
                "final_accuracy": history[-1]["central_accuracy"],
                "accuracy_per_round": [row["central_accuracy"] for row in history],
                "weak_accuracy": history[0]["central_accuracy"],
                "seconds": sum(round_seconds(run_dir)),
                "run_dir": str(run_dir),
                "selection_log": json.loads(log_path.read_text()) if log_path.is_file() else None,
            }
        )
    return records


def foreign_draws(record: dict) -> tuple[int, int]:
    """(foreign draws, all draws) over the run's selections, multiplicities counted."""
    log = record["selection_log"]
    if not log:
        return 0, 0
    foreign = {t["partition"] for t in log["teachers"] if t["foreign"]}
    draws = [(int(pid), m) for s in log["selections"] for pid, m in s["selected"].items()]
    return sum(m for pid, m in draws if pid in foreign), sum(m for _, m in draws)


def probe_teachers(out: Path, record: dict) -> dict:
    """Table 3 analogue for one seed: first-selection similarity and linear-probe transfer
    accuracy of every teacher, from ``record``, the seed's FedSA run at k = PROBE_K."""
    seed, rounds = record["seed"], record["rounds"]
    path = out / "probes" / f"table3-seed{seed}-r{rounds}.json"
    if path.is_file():
        return json.loads(path.read_text())
    log = record["selection_log"]
    first = log["selections"][0]
    run_config = resolve_run_config(overrides("FedSA", PROBE_K, seed, rounds))
    config = parse_run_config(run_config)
    x, y = target_set(config)
    data = load_splits(config)
    transfer, own_gap = [], 0.0
    for pid in first["candidates"]:
        client, teacher = owner_teacher(run_config, config, pid)
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
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return record


def cell(values, scale: float = 100.0, digits: int = 1) -> str:
    """``mean ± sample std (n)`` of ``values`` times ``scale``."""
    v = np.asarray(values, dtype=float) * scale
    if len(v) == 0:
        return "–"
    spread = f"{v.std(ddof=1):.{digits}f}" if len(v) > 1 else "–"
    return f"{v.mean():.{digits}f} ± {spread} ({len(v)})"


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


def finals_by_seed(runs: list[dict], label: str, k: int) -> dict[int, float]:
    return {r["seed"]: r["final_accuracy"] for r in runs if r["method"] == label and r["k"] == k}


def table(header: str, rows: list[str]) -> list[str]:
    return [header, "|---" * header.count(" | ") + "|---|", *rows]


def log_report(runs: list[dict], probes: list[dict], labels, ks, seeds, rounds) -> list[str]:
    """``fedsa.md``, the run's log: the tables from the run's records and the probes."""
    finals = {(m, k): list(finals_by_seed(runs, m, k).values()) for m in labels for k in ks}
    mean = {key: float(np.mean(v)) for key, v in finals.items() if v}
    weak = {
        k: [r["weak_accuracy"] for r in runs if r["k"] == k and r["method"] == "FedSA"] for k in ks
    }
    lines = [
        "# FedSA on digits: selective amalgamation of 5 clean and 5 foreign teachers\n",
        f"Command: `python {shlex.join(sys.argv)}`\n",
        (
            f"{NUM_CLIENTS} teachers (`cnn`, pathological, 2 classes each; {FOREIGN} foreign),"
            f" server-fraction 0.4, {rounds} rounds, selection every 10, K = 3, E = 2; seeds"
            f" {', '.join(map(str, seeds))}. Cells: test accuracy in %, mean ± sample std (n).\n"
        ),
        "## Final accuracy of the adapted target model\n",
        *table(
            "| method | " + " | ".join(f"k = {k}" for k in ks) + " |",
            [f"| {m} | " + " | ".join(cell(finals[m, k]) for k in ks) + " |" for m in labels]
            + ["| weak model (row 0 of FedSA) | " + " | ".join(cell(weak[k]) for k in ks) + " |"],
        ),
        "\n## FedSA − Scratch (paired by seed, points)\n",
    ]
    gaps, rows = {}, []
    for k in ks:
        fedsa, scratch = finals_by_seed(runs, "FedSA", k), finals_by_seed(runs, "Scratch", k)
        diffs = [fedsa[s] - scratch[s] for s in sorted(set(fedsa) & set(scratch))]
        if diffs:
            gaps[k] = float(np.mean(diffs))
        rows.append(f"| {k} | {cell(diffs)} |")
    lines += table("| k | FedSA − Scratch |", rows)
    lines.append("\n## Share of the drawn teachers that were foreign (all selections, k, seeds)\n")
    rows = []
    for label in labels:
        counts = np.array([foreign_draws(r) for r in runs if r["method"] == label]).reshape(-1, 2)
        foreign, draws = counts.sum(axis=0)
        share = f"{100 * foreign / draws:.0f} %" if draws else "– (no teachers)"
        rows.append(f"| {label} | {foreign} / {draws} | {share} |")
    lines += table("| method | foreign draws / draws | share |", rows)

    lines.append(
        f"\n## Table 3 analogue (k = {PROBE_K}): similarity at the first selection vs"
        " linear-probe transfer accuracy of the 10 teachers (mean ± sample std over seeds)\n"
    )
    table3, rows = {}, []
    for kind in ("averaged", "per-image"):
        per_seed = []
        for p in probes:
            sim, acc = np.array(p[f"similarity-{kind}"]), np.array(p["transfer"])
            foreign = np.array(p["foreign"], dtype=bool)
            per_seed.append(
                (
                    stats.spearmanr(sim, acc).statistic,
                    stats.pearsonr(sim, acc).statistic,
                    sim[~foreign].mean(),
                    sim[foreign].mean(),
                )
            )
        cols = list(zip(*per_seed)) if per_seed else [[]] * 4
        table3[kind] = [float(np.mean(c)) if len(c) else float("nan") for c in cols]
        rows.append(f"| {kind} | " + " | ".join(cell(c, 1.0, 3) for c in cols) + " |")
    lines += table("| similarity | Spearman | Pearson | clean (0..4) | foreign (5..9) |", rows)
    for p in probes:
        order = np.argsort(p["teachers"])
        transfer = " ".join(f"{100 * p['transfer'][i]:.0f}" for i in order)
        sims = " ".join(f"{p['similarity-averaged'][i]:.2f}" for i in order)
        lines.append(
            f"\nSeed {p['seed']}: transfer accuracy (%) of teachers 0..9: {transfer}; averaged"
            f" similarity: {sims} (teacher check, largest own-accuracy difference from the run:"
            f" {p['own-accuracy-gap']:.1e})."
        )
    return lines + orderings(gaps, table3, mean, ks, bool(probes))


def orderings(gaps: dict, table3: dict, mean: dict, ks, probed: bool) -> list[str]:
    """The paper's orderings, on the means over seeds."""
    small = [k for k in ks if k <= 5 and k in gaps]
    above = all(gaps[k] > 0 for k in small) if small else None
    size = [abs(gaps[k]) for k in ks if k in gaps]
    shrinks = all(b <= a for a, b in itertools.pairwise(size)) if len(size) > 1 else None
    gap_text = ", ".join(f"k={k}: {100 * g:+.1f}" for k, g in gaps.items()) or "no pairs"
    spearman, _, clean, foreign = table3["averaged"]
    lines = [
        "\n## The paper's orderings (on the means over seeds)\n",
        (
            f"* (a) FedSA > Scratch at every k ≤ 5: {yes(above)}; |FedSA − Scratch| shrinks"
            f" (non-increasing) as k grows: {yes(shrinks)} ({gap_text})"
        ),
        (
            f"* (b) clean similarity > foreign similarity: {yes(clean > foreign if probed else None)}"
            f" ({clean:.3f} vs {foreign:.3f}, averaged); Spearman > 0:"
            f" {yes(spearman > 0 if probed else None)} ({spearman:+.3f}; per-image"
            f" {table3['per-image'][0]:+.3f})"
        ),
    ]
    for a, b, op in (
        ("FedSA", "FedAvg+", ">"),
        ("FedSA", "Random", "≥"),
        ("Random", "Least-K", ">"),
    ):
        pairs = [(k, mean[a, k], mean[b, k]) for k in ks if (a, k) in mean and (b, k) in mean]
        holds = all(x > y if op == ">" else x >= y for _, x, y in pairs) if pairs else None
        numbers = ", ".join(f"k={k}: {100 * x:.1f} vs {100 * y:.1f}" for k, x, y in pairs)
        lines.append(f"* (c) {a} {op} {b} at every k: {yes(holds)} ({numbers or 'not run'})")
    return lines


def report(fedsa_csv: Path) -> str:
    """The tables of ``table.md``, from ``fedsa.csv`` alone: final accuracy (mean ± sample std
    over seeds), every method minus Scratch and the orderings (c) as paired per-seed differences
    with 95 % t intervals (``result_tables.paired_cell``), the share of foreign draws."""
    runs = read_runs(
        fedsa_csv,
        ("final_accuracy", "weak_accuracy", "seconds"),
        ("k", "seed", "rounds", "foreign_draws", "draws"),
    )
    labels = [m for m in METHODS if any(r["method"] == m for r in runs)]
    ks = sorted({r["k"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    columns = [f"k = {k}" for k in ks]

    def finals(method: str, k: int, key: str = "final_accuracy") -> list[float]:
        return [r[key] for r in runs if r["method"] == method and r["k"] == k]

    lines = table_head(
        f"Final test accuracy of the adapted target model in %, mean ± sample std over seeds"
        f" {', '.join(map(str, seeds))} (`fedsa.csv`; weak model: history row 0 of the FedSA"
        " runs).",
        "method",
        columns,
    )
    for m in labels:
        lines.append(f"| {m} | " + " | ".join(percent_cell(finals(m, k)) for k in ks) + " |")
    weak = [percent_cell(finals("FedSA", k, "weak_accuracy")) for k in ks]
    lines.append("| weak model (row 0 of FedSA) | " + " | ".join(weak) + " |")

    def pair(mine: str, base: str, k: int) -> str:
        return paired_cell(
            runs, {"method": mine, "k": k}, {"method": base, "k": k}, "final_accuracy"
        )

    lines += [""] + table_head(
        "Each method minus Scratch, paired by seed, in points: mean [95 % t interval], bold"
        " where the interval excludes 0.",
        "method − Scratch",
        columns,
    )
    for m in labels:
        if m != "Scratch":
            lines.append(f"| {m} | " + " | ".join(pair(m, "Scratch", k) for k in ks) + " |")
    lines += [""] + table_head(
        "The paper's orderings (c), paired by seed, in points: mean [95 % t interval], bold"
        " where the interval excludes 0.",
        "difference",
        columns,
    )
    for mine, base in ORDERINGS:
        if mine in labels and base in labels:
            lines.append(
                f"| {mine} − {base} | " + " | ".join(pair(mine, base, k) for k in ks) + " |"
            )
    lines += [""] + table_head(
        "Share of the drawn teachers that were foreign (all selections, k and seeds); minus"
        " Random's: per seed (over k), paired by seed, in points, mean [95 % t interval], bold"
        " where the interval excludes 0.",
        "method",
        ["foreign draws / draws", "share", "share − Random's"],
    )
    shares = []  # one row per (method, seed): the seed's share over k
    for m in labels:
        for seed in seeds:
            mine = [r for r in runs if r["method"] == m and r["seed"] == seed]
            draws = sum(r["draws"] for r in mine)
            if draws:
                foreign = sum(r["foreign_draws"] for r in mine)
                shares.append({"method": m, "seed": seed, "share": foreign / draws})
    for m in labels:
        foreign = sum(r["foreign_draws"] for r in runs if r["method"] == m)
        draws = sum(r["draws"] for r in runs if r["method"] == m)
        share = f"{100 * foreign / draws:.0f} %" if draws else "– (no teachers)"
        gap = (
            paired_cell(shares, {"method": m}, {"method": "Random"}, "share")
            if m != "Random"
            else "–"
        )
        lines.append(f"| {m} | {foreign} / {draws} | {share} | {gap} |")
    lines += ["", provenance_line(fedsa_csv.parent)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 42, 123])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 5, 10])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="seed 42, k 1 and 5, 10 rounds")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/fedsa"))
    parser.add_argument("--workers", type=int, default=1, help="runs at the same time")
    parser.add_argument("--report-only", action="store_true", help="table.md from fedsa.csv")
    args = parser.parse_args()
    if args.report_only:
        text = write_table(args.out / "table.md", lambda: report(args.out / "fedsa.csv"))
        print(text)
        return
    labels = tuple(METHODS)
    if args.quick:
        args.seeds, args.ks, args.rounds, labels = [42], [1, 5], 10, QUICK_METHODS
        args.out = args.out / "quick"
    torch.set_num_threads(1)  # the probes train linear heads in this process
    started = time.perf_counter()
    runs = run_records(
        args.out / "sweep",
        sweep_spec(labels, args.ks, args.seeds, args.rounds),
        args.workers,
        args.rounds,
    )
    runs = [
        r for r in runs if r["method"] in labels and r["k"] in args.ks and r["seed"] in args.seeds
    ]
    probe_runs = [r for r in runs if r["method"] == "FedSA" and r["k"] == PROBE_K]
    if PROBE_K not in args.ks:
        spec = sweep_spec(("FedSA",), [PROBE_K], args.seeds, args.rounds)
        probe_runs = run_records(args.out / "sweep-probe", spec, args.workers, args.rounds)
        probe_runs = [r for r in probe_runs if r["seed"] in args.seeds]
    probes = []
    for record in sorted(probe_runs, key=lambda r: args.seeds.index(r["seed"])):
        print(f"  Table 3 analogue, seed {record['seed']} ...", flush=True)
        probes.append(probe_teachers(args.out, record))

    lines = log_report(runs, probes, labels, args.ks, args.seeds, args.rounds)
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
    if not args.quick:
        record_provenance(args.out, sys.argv)
    write_table(args.out / "table.md", lambda: report(args.out / "fedsa.csv"))
    plot_curves([r for r in runs if r["k"] == CURVE_K], labels, args.out / "fedsa_curves.png")


if __name__ == "__main__":
    main()
