"""Why QKT forgets on digits: its noise filter and its lambda, measured on the real code path.

``docs/studies-qkt.md`` reports that QKT (the QKT paper, "Query-based Knowledge Transfer",
ICLR 2025) forgets much of its local classes on digits. This benchmark measures three things,
for QKT on digits, 10 clients, single-class queries, the pathological partition (3 classes per
client) and Dirichlet(0.1), 3 seeds, with the settings of ``benchmarks/qkt.py`` (Appendix A.2:
``flowerbed.experiments.qkt.APPENDIX_A2``, ``kt-query-threshold=10``):

1. **The noise filter (Eq. 2).** Per client, how many of its 9 teachers the filter keeps (the
   run's own ``teachers_kept`` in ``kt_metrics.json``), and whether the kept teachers hold the
   query class: how many of them have at least one training sample of it (and at least
   ``kt-query-threshold``), and how many of the teachers that hold it were kept.
2. **The paper's Fig. 5 analogue.** Per teacher, the mean softmax it predicts on the Gaussian
   noise batches of the filter (B = ``qkt-noise-samples`` inputs per student; the mean over
   the 9 students' batches) against its true training label counts: Spearman's rank
   correlation over the 10 classes, and the paper's MSE between that mean and the normalised
   counts.
3. **The paper's Table 4 analogue.** ``qkt-lambda`` in {1, 1.5, 2, 4}: Acc, Query Acc. Gain and
   Forgetting, each minus lambda = 1.5's (the default), paired by seed.
4. **Summing or averaging the kept teachers.** Eq. 4 sums the KL terms of the kept teachers
   T_Q, so its distillation pull grows with |T_Q|. The same runs at lambda = 1.5 with
   ``qkt-teacher-weight='mean'`` (alpha / |T_Q|: the kept teachers averaged; a diagnostic, not
   the paper's) against the default ``'sum'``: Acc, Query Acc. Gain and Forgetting, mean minus
   sum paired by seed.

Also, per client, the mass the kept teachers put on the query class on the student's own
training images, ``sum_{t in T_Q} p_t(q | x)`` averaged over its images (Eq. 4 weights it by
alpha * lambda), beside the mass they put on the images' true labels.

The runs (QKT only) are two sweeps (``flowerbed.sweep``, not committed): partition x seed x
lambda with the default ``'sum'`` in ``<out>/runs``, and partition x seed at lambda = 1.5 with
``'mean'`` in ``<out>/runs-teacher-mean`` (a sibling folder, so the first sweep's grid and
point names stay those of its earlier runs and a rerun runs only the points it lacks). Each
sweep has its own provenance file, ``measured.json`` and ``measured-teacher-weight.json``,
rewritten only when that sweep ran a point (or the file is missing): rows re-derived from
earlier runs keep the commit they were measured at. The filter quantities are not in the
run folder (a run records only the number of kept teachers), so after the sweep this script
recomputes them in its own process for every run, with the run's ``config.json`` and the
functions of the protocol: ``LocalClient.from_context`` (the client's data), the local-fit
phase's ``train_local_model`` (the teachers), ``client_query``, and QKT's ``_prepare`` (the
teachers' predictions and the filter, with the run's noise generator; ``filter_teachers``'
mean noise probabilities). It checks that the recomputation is the run's: same queries,
same training label counts, same per-class test accuracy of every local model, same number
of kept teachers per client (the ``match`` column; the report says how many runs match). The
filter, the queries and the local models do not depend on lambda or on the teacher weight, so
one recomputation per partition and seed serves all of its runs, the ``'mean'`` ones included.

Each run becomes one row of ``<out>/runs.csv`` (default ``benchmarks/results/qkt-explain``;
per-client and per-teacher values as space-separated lists; ``teacher_weight`` 'sum' or
'mean', a missing value, as in rows written before the column existed, read as 'sum'), and
``table.md`` is made from ``runs.csv`` alone (``--report-only``; the teacher-weight table
only once ``runs.csv`` holds 'mean' rows).

Usage::

    python benchmarks/qkt_explain.py --workers 1     # 24 + 6 runs; only missing ones run
                                                     # (the 6 'mean' ones: about 3 min)
    python benchmarks/qkt_explain.py --quick         # 1 seed, Path, lambda 1.5 and 4, 'mean'
    python benchmarks/qkt_explain.py --report-only   # table.md from runs.csv
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from result_tables import (
    measure_and_report,
    paired_cell,
    percent_cell,
    provenance_line,
    read_runs,
    record_provenance,
    sweep_records,
    table_head,
)

from flowerbed.core.results import round_seconds, write_csv
from flowerbed.experiments.qkt import APPENDIX_A2, PARTITIONS
from flowerbed.sweep import Axis, SweepSpec, run_sweep
from flowerbed.sweep.folder import point_dir, point_state

RESULTS = Path(__file__).parent / "results" / "qkt-explain"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-qkt.md"  # includes table.md
LAMBDAS = (1.0, 1.5, 2.0, 4.0)
DEFAULT_LAMBDA = "1.5"
DEFAULT_WEIGHT = "sum"  # qkt-teacher-weight of Eq. 4; 'mean' is the averaged variant
# Per sweep: its folder under <out> and its provenance file (module doc).
LAMBDA_SWEEP = ("runs", "measured.json")
MEAN_SWEEP = ("runs-teacher-mean", "measured-teacher-weight.json")
FIXED = {
    **APPENDIX_A2,
    "strategy": "qkt",
    "dataset": "digits",
    "kt-query": "single",
    "kt-query-threshold": 10,
}
METRICS = ("acc", "query_gain", "forgetting", "uniform_acc", "acc_pre")
COLUMNS = (
    ("acc", "Acc"),
    ("query_gain", "Query Acc. Gain"),
    ("forgetting", "Forgetting"),
    ("uniform_acc", "Uniform Acc."),
)
# Space-separated lists: per client (students with a query), then per teacher (every client).
CLIENT_LISTS = ("kept", "kept_holding", "kept_substantial", "holding", "query_mass", "label_mass")
TEACHER_LISTS = ("spearman", "spearman_max", "noise_mse")
FIELDS = (
    "partition",
    "seed",
    "lam",
    "teacher_weight",
    *METRICS,
    "seconds",
    "match",
    *CLIENT_LISTS,
    *TEACHER_LISTS,
)


def sweep_spec(partitions: list[str], seeds: int, lambdas: list[float], clients: int) -> SweepSpec:
    """Partition x seed x lambda, QKT on digits with single-class queries (Eq. 4's sum)."""
    return SweepSpec(
        (
            Axis.of_bundles("partition", {k: v for k, v in PARTITIONS if k in partitions}),
            Axis.of_key("seed", list(range(seeds))),
            Axis.of_key("qkt-lambda", lambdas),
        ),
        fixed=FIXED,
        num_clients=clients,
    )


def mean_sweep_spec(partitions: list[str], seeds: int, clients: int) -> SweepSpec:
    """Partition x seed at the default lambda with the kept teachers averaged
    (``qkt-teacher-weight='mean'``); points ``partition-Path_seed-0``, ... in their own folder."""
    return SweepSpec(
        (
            Axis.of_bundles("partition", {k: v for k, v in PARTITIONS if k in partitions}),
            Axis.of_key("seed", list(range(seeds))),
        ),
        fixed={**FIXED, "qkt-lambda": float(DEFAULT_LAMBDA), "qkt-teacher-weight": "mean"},
        num_clients=clients,
    )


# --- the recomputation of the filter -------------------------------------------------------------


def spearman(a, b) -> float:
    """Spearman's rank correlation (ties: mean ranks); NaN when either side is constant."""
    from scipy import stats

    if len(set(a)) < 2 or len(set(b)) < 2:
        return math.nan
    return float(stats.spearmanr(a, b).statistic)


def filter_diagnostics(run_config: dict, num_clients: int) -> dict:
    """The filter of every student of a run, recomputed with the protocol's functions.

    Returns ``clients``: per partition id its query, training label counts, local model's
    per-class test accuracy, kept teacher ids (``_prepare``), and the mean over its training
    images of the kept teachers' summed probability of the query class and of the true label;
    ``noise``: per teacher id the mean over the other students' noise batches of its mean
    softmax (``filter_teachers``)."""
    import numpy as np
    import torch
    from flwr.app import Context, RecordDict

    from flowerbed.catalog import parse_run_config
    from flowerbed.evaluation.metrics import eval_scores, test_accuracies
    from flowerbed.kd.teachers import filter_teachers
    from flowerbed.methods.qkt import _NOISE_TAG, _prepare
    from flowerbed.protocols.exchange import Transfer
    from flowerbed.protocols.local_fit import client_query, train_counts, train_local_model
    from flowerbed.training.local_client import LocalClient

    torch.set_num_threads(1)  # as the sweep's runs: the same local models, bit for bit
    config = parse_run_config(run_config)
    clients, models = [], []
    for pid in range(num_clients):
        context = Context(
            run_id=1,
            node_id=1000 + pid,
            node_config={"partition-id": pid, "num-partitions": num_clients},
            state=RecordDict(),
            run_config=dict(run_config),
        )
        client = LocalClient.from_context(context, config)
        clients.append(client)
        models.append(train_local_model(client)[0].eval())
    result = {"clients": {}, "noise": {}}
    noise_sums = {pid: 0.0 for pid in range(num_clients)}
    for pid, client in enumerate(clients):
        counts = train_counts(client)
        ids = [t for t in range(num_clients) if t != pid]
        job = Transfer(
            client=client,
            student=models[pid],
            query=client_query(client),
            local_classes=[int(j) for j in np.flatnonzero(counts > 0)],
            teachers=[models[t] for t in ids],
            teacher_ids=ids,
        )
        pre, _ = test_accuracies(eval_scores(models[pid]), client.data)
        entry = {
            "query": job.query,
            "train_counts": [int(c) for c in counts],
            "pre_per_class": [float(v) for v in pre],
        }
        data = client.data
        kept_all, mean = filter_teachers(
            job.teachers,
            job.query or [0],
            data.input_shape,
            config.qkt_noise_samples,
            config.qkt_tau,
            job.generator(_NOISE_TAG),
        )
        for i, t in enumerate(ids):
            noise_sums[t] = noise_sums[t] + mean[i].numpy()
        if job.query:
            probs, kept, _ = _prepare(job)
            assert kept == kept_all, "the filter recomputed twice differs"
            mine = probs[kept]  # (K, N, C)
            y = client.y_train.long()
            entry["kept"] = [ids[i] for i in kept]
            entry["query_mass"] = float(mine[:, :, job.query].sum(dim=(0, 2)).mean())
            labels = mine.gather(2, y.view(1, -1, 1).expand(len(kept), -1, 1))
            entry["label_mass"] = float(labels.sum(dim=(0, 2)).mean())
        result["clients"][pid] = entry
    result["noise"] = {t: (s / (num_clients - 1)).tolist() for t, s in noise_sums.items()}
    return result


def same_vector(a, b) -> bool:
    return len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or abs(x - y) < 1e-9 for x, y in zip(a, b)
    )


_DIAGNOSTICS: dict[tuple, dict] = {}


def run_record(labels: dict, run_dir: Path, stopped: bool) -> dict:
    """One row of ``runs.csv``: the run's metrics (means over clients) and seconds, and the
    filter quantities, recomputed (``filter_diagnostics``) and checked against the run."""
    from flowerbed.inprocess import default_run_config, resolve_run_config

    result = json.loads((run_dir / "kt_metrics.json").read_text())
    stored = json.loads((run_dir / "config.json").read_text())
    defaults = default_run_config()
    run_config = resolve_run_config({k: v for k, v in stored.items() if k in defaults})
    # the filter does not depend on lambda or the teacher weight: one per partition and seed
    key = (labels["partition"], labels["seed"])
    if key not in _DIAGNOSTICS:
        _DIAGNOSTICS[key] = filter_diagnostics(run_config, len(result["clients"]))
    found = _DIAGNOSTICS[key]
    threshold = int(run_config["kt-query-threshold"])
    counts = {row["partition_id"]: row["train_counts"] for row in result["clients"]}
    lists = {name: [] for name in CLIENT_LISTS}
    match = True
    for row in sorted(result["clients"], key=lambda r: r["partition_id"]):
        mine = found["clients"][row["partition_id"]]
        match &= mine["query"] == row["query"] and mine["train_counts"] == row["train_counts"]
        match &= same_vector(mine["pre_per_class"], row["pre_per_class"])
        if not row["query"]:
            continue
        match &= len(mine["kept"]) == row["teachers_kept"]
        (q,) = row["query"]  # single-class queries
        others = [t for t in counts if t != row["partition_id"]]
        lists["kept"].append(row["teachers_kept"])
        lists["kept_holding"].append(sum(counts[t][q] > 0 for t in mine["kept"]))
        lists["kept_substantial"].append(sum(counts[t][q] >= threshold for t in mine["kept"]))
        lists["holding"].append(sum(counts[t][q] > 0 for t in others))
        lists["query_mass"].append(round(mine["query_mass"], 4))
        lists["label_mass"].append(round(mine["label_mass"], 4))
    spearmans, ceilings, mses = [], [], []
    for t in sorted(counts):
        noise, total = found["noise"][t], sum(counts[t])
        spearmans.append(round(spearman(noise, counts[t]), 4))
        # the highest a prediction without ties can reach: one ranking the classes as the
        # counts do (tied counts in class order)
        order = sorted(range(len(counts[t])), key=lambda j: counts[t][j])
        ceilings.append(round(spearman([order.index(j) for j in range(len(order))], counts[t]), 4))
        share = [c / total for c in counts[t]]
        mses.append(round(statistics.fmean((p - s) ** 2 for p, s in zip(noise, share)), 5))
    summary = result["summary"]
    return {
        "partition": labels["partition"],
        "seed": int(labels["seed"]),
        "lam": str(float(run_config["qkt-lambda"])),  # the sweep's label: "1.0", "1.5", ...
        "teacher_weight": run_config["qkt-teacher-weight"],
        **{key: summary.get(key, math.nan) for key in METRICS},
        "seconds": sum(round_seconds(run_dir)),
        "match": int(match),
        **{name: " ".join(map(str, values)) for name, values in lists.items()},
        "spearman": " ".join(map(str, spearmans)),
        "spearman_max": " ".join(map(str, ceilings)),
        "noise_mse": " ".join(map(str, mses)),
    }


# --- the report ------------------------------------------------------------------------------------


def read_results(runs_csv: Path) -> list[dict]:
    runs = read_runs(runs_csv, (*METRICS, "seconds"), ("seed", "match"))
    for row in runs:
        # rows written before the teacher weight was a column are Eq. 4's sum
        row["teacher_weight"] = row.get("teacher_weight") or DEFAULT_WEIGHT
        for name in (*CLIENT_LISTS, *TEACHER_LISTS):
            row[name] = [float(v) for v in row[name].split()]
    return runs


def number_cell(values: list[float], digits: int = 2) -> str:
    """mean ± sample std (NaNs left out, their count named)."""
    known = [v for v in values if not math.isnan(v)]
    if not known:
        return "–"
    mean = statistics.fmean(known)
    std = statistics.stdev(known) if len(known) > 1 else 0.0
    note = f" ({len(values) - len(known)} undefined)" if len(known) < len(values) else ""
    return f"{mean:.{digits}f} ± {std:.{digits}f}{note}"


def share_cell(part: float, whole: float) -> str:
    return f"{part:.0f} / {whole:.0f} ({100 * part / whole:.0f} %)" if whole else "–"


def teacher_weight_table(runs: list[dict], folder: Path) -> list[str]:
    """Eq. 4's sum of the kept teachers against their mean (alpha / |T_Q|), at the default
    lambda: per partition a row for each and the paired differences mean minus sum; no lines
    when ``runs`` holds no 'mean' run."""
    averaged = [r for r in runs if r["teacher_weight"] == "mean"]
    if not averaged:
        return []
    seeds = ", ".join(map(str, sorted({r["seed"] for r in averaged})))
    lines = table_head(
        "**Summing or averaging the kept teachers: digits, single-class queries, QKT at lambda ="
        f" {DEFAULT_LAMBDA}** (seeds {seeds}; mean ± sample std over seeds, in %). sum: Eq. 4,"
        " alpha · KL summed over the kept teachers T_Q (the runs above); mean:"
        " `qkt-teacher-weight='mean'`, alpha / |T_Q| (a diagnostic, not the paper's). Δ: mean"
        " minus sum, paired by seed, in percentage points, mean [95 % t interval], **bold** where"
        " the interval excludes 0.",
        "Partition",
        ["Weight", *(c for _, c in COLUMNS[:3]), "Δ Acc", "Δ Query Acc. Gain", "Δ Forgetting"],
    )
    for partition in dict.fromkeys(r["partition"] for r in averaged):
        for weight in (DEFAULT_WEIGHT, "mean"):
            labels = {"partition": partition, "lam": DEFAULT_LAMBDA, "teacher_weight": weight}
            rows = [r for r in runs if all(r[k] == v for k, v in labels.items())]
            cells = [percent_cell([r[key] for r in rows]) for key, _ in COLUMNS[:3]]
            for key in ("acc", "query_gain", "forgetting"):
                base = {**labels, "teacher_weight": DEFAULT_WEIGHT}
                cells.append(
                    "–" if weight == DEFAULT_WEIGHT else paired_cell(runs, labels, base, key)
                )
            lines.append(f"| {partition} | {weight} | " + " | ".join(cells) + " |")
    seconds = statistics.fmean(r["seconds"] for r in averaged)
    return [
        *lines,
        "",
        (
            f"Rounds of one 'mean' run: {seconds:.1f} s on average (each is the only run of its"
            " partition and seed in its sweep, so each trains the local models itself)."
        ),
        "",
        provenance_line(folder, MEAN_SWEEP[1]),
        "",
    ]


def report(runs_csv: Path) -> str:
    """The tables of ``table.md`` from ``runs.csv`` (and the provenance files) alone: the
    filter (at the default lambda; it does not depend on lambda), Fig. 5's analogue, the lambda
    sweep paired by seed against lambda = 1.5, all with Eq. 4's sum, and, once ``runs.csv``
    holds them, the averaged teachers against the sum (``teacher_weight_table``)."""
    everything = read_results(runs_csv)
    runs = [r for r in everything if r["teacher_weight"] == DEFAULT_WEIGHT]
    partitions = list(dict.fromkeys(r["partition"] for r in runs))
    lambdas = sorted({r["lam"] for r in runs}, key=float)
    seeds = sorted({r["seed"] for r in runs})
    seed_text = ", ".join(map(str, seeds))
    default = [r for r in runs if r["lam"] == DEFAULT_LAMBDA] or runs
    lines = table_head(
        f"**QKT's noise filter (Eq. 2) on digits, single-class queries** (seeds {seed_text};"
        " 10 clients, 9 teachers each; pooled over students and seeds). Kept: teachers kept per"
        " student, mean (min–max). Holding q: kept teachers with at least 1 (at least"
        " `kt-query-threshold` = 10) training samples of the student's query class, and the"
        " share of the teachers holding q that were kept. Query mass: over a student's own"
        " training images, the mean of the kept teachers' summed probability of the query class"
        " (Eq. 4 weights it by alpha · lambda); label mass: the same for the images' true labels.",
        "Partition",
        [
            "Students",
            "Kept",
            "Kept holding q (≥ 1)",
            "Kept holding q (≥ 10)",
            "Holders of q kept",
            "Query mass",
            "Label mass",
        ],
    )
    for partition in partitions:
        rows = [r for r in default if r["partition"] == partition]
        kept = [v for r in rows for v in r["kept"]]
        total = sum(kept)
        holding = sum(v for r in rows for v in r["kept_holding"])
        substantial = sum(v for r in rows for v in r["kept_substantial"])
        holders = sum(v for r in rows for v in r["holding"])
        mean_kept = f"{statistics.fmean(kept):.1f} ({min(kept):.0f}–{max(kept):.0f})"
        lines.append(
            f"| {partition} | {len(kept)} | {mean_kept} | {share_cell(holding, total)} | "
            f"{share_cell(substantial, total)} | {share_cell(holding, holders)} | "
            f"{number_cell([v for r in rows for v in r['query_mass']])} | "
            f"{number_cell([v for r in rows for v in r['label_mass']])} |"
        )
    lines += [""]
    lines += table_head(
        "**Fig. 5 analogue**: per teacher, its mean softmax on the filter's Gaussian-noise"
        " inputs (B = 20 per student, averaged over the 9 students' batches) against its"
        " training label counts, over the 10 classes: Spearman's rank correlation and the"
        " paper's MSE against the normalised counts; mean ± std over teachers and seeds."
        " Ceiling: the Spearman of a prediction that ranks the classes exactly as the counts"
        " do (a teacher's absent classes tie in the counts, not in a prediction, so 1 is out"
        " of reach).",
        "Partition",
        ["Teachers", "Spearman", "Ceiling", "MSE"],
    )
    for partition in partitions:
        rows = [r for r in default if r["partition"] == partition]
        rho = [v for r in rows for v in r["spearman"]]
        ceiling = [v for r in rows for v in r["spearman_max"]]
        mse = [v for r in rows for v in r["noise_mse"]]
        lines.append(
            f"| {partition} | {len(rho)} | {number_cell(rho)} | {number_cell(ceiling)} |"
            f" {number_cell(mse, 3)} |"
        )
    lines += [""]
    for partition in partitions:
        lines += table_head(
            f"**Table 4 analogue: digits, {partition}, single-class queries, QKT with lambda**"
            f" (seeds {seed_text}; mean ± sample std over seeds, in %; Δ: minus lambda ="
            f" {DEFAULT_LAMBDA}, paired by seed, in percentage points, mean [95 % t interval],"
            " **bold** where the interval excludes 0)",
            "lambda",
            [*(c for _, c in COLUMNS), "Δ Acc", "Δ Query Acc. Gain", "Δ Forgetting"],
        )
        for lam in lambdas:
            rows = [r for r in runs if (r["partition"], r["lam"]) == (partition, lam)]
            cells = [percent_cell([r[key] for r in rows]) for key, _ in COLUMNS]
            for key in ("acc", "query_gain", "forgetting"):
                if lam == DEFAULT_LAMBDA:
                    cells.append("–")
                    continue
                cells.append(
                    paired_cell(
                        runs,
                        {"partition": partition, "lam": lam},
                        {"partition": partition, "lam": DEFAULT_LAMBDA},
                        key=key,
                    )
                )
            lines.append(f"| {lam} | " + " | ".join(cells) + " |")
        pre = [r["acc_pre"] for r in runs if (r["partition"], r["lam"]) == (partition, lambdas[0])]
        lines += ["", f"Local model's Acc before the transfer: {percent_cell(pre)}.", ""]
    lines += teacher_weight_table(everything, runs_csv.parent)
    matched = sum(r["match"] for r in everything)
    seconds = statistics.fmean(r["seconds"] for r in runs)
    lines += [
        (
            f"The recomputed filter is the runs' own in {matched} of {len(everything)} runs (same"
            " queries, label counts, local models' per-class test accuracy and number of kept"
            f" teachers per student). Rounds of one run: {seconds:.1f} s on average, on a"
            " shared machine (the first lambda of a partition and seed trains the local"
            " models; the later ones find them in the process's cache)."
        ),
        "",
        provenance_line(runs_csv.parent),
    ]
    return "\n".join(lines) + "\n"


def measure(out: Path, sweeps: list[tuple[SweepSpec, tuple[str, str]]], workers: int) -> None:
    """Run each sweep in its folder under ``out`` (a rerun runs only the unfinished points) and
    write one row per run of all of them into ``<out>/runs.csv`` (``run_record``). A sweep's
    provenance file is written when it ran a point or has none, so rows re-derived from earlier
    runs keep the commit they were measured at."""
    records = []
    for spec, (folder, provenance) in sweeps:
        sweep = out / folder
        ran = any(not point_state(point_dir(sweep, point)).finished for point in spec.points())
        run_sweep(spec, sweep, workers=workers, extend=True)
        records += sweep_records(spec, sweep, run_record)
        if ran or not (out / provenance).is_file():
            record_provenance(out, sys.argv, provenance)
    write_csv(out / "runs.csv", records, FIELDS)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument(
        "--lambdas",
        default=",".join(map(str, LAMBDAS)),
        help="comma-separated qkt-lambda values (with Eq. 4's sum)",
    )
    parser.add_argument(
        "--partitions", default=",".join(k for k, _ in PARTITIONS), help="Path, Dir or both"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        help="the results folder: runs.csv, measured*.json, table.md, and the sweeps in runs/"
        " (lambda, Eq. 4's sum) and runs-teacher-mean/ ('mean' at lambda 1.5)",
    )
    parser.add_argument("--workers", type=int, default=1, help="runs at the same time")
    parser.add_argument("--report-only", action="store_true", help="table.md from runs.csv")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 seed, Path, lambda 1.5 and 4, and 'mean' at 1.5 (in <out>/quick)",
    )
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.lambdas, args.partitions = 1, "1.5,4", "Path"
        args.out = args.out / "quick"
    lambdas = [float(v) for v in args.lambdas.split(",")]
    if DEFAULT_LAMBDA not in {str(v) for v in lambdas}:
        parser.error(f"--lambdas must hold the default {DEFAULT_LAMBDA}, the pairs' baseline")
    partitions = args.partitions.split(",")
    unknown = sorted(set(partitions) - {k for k, _ in PARTITIONS})
    if unknown:
        parser.error(f"--partitions: unknown {unknown}; valid: {[k for k, _ in PARTITIONS]}")
    if not args.report_only:
        sweeps = [
            (sweep_spec(partitions, args.seeds, lambdas, args.clients), LAMBDA_SWEEP),
            (mean_sweep_spec(partitions, args.seeds, args.clients), MEAN_SWEEP),
        ]
        measure(args.out, sweeps, args.workers)
    text = measure_and_report(args.out, None, run_record, FIELDS, report)
    runs_csv = args.out / "runs.csv"
    print(text)
    print(f"written: {runs_csv}, {args.out / 'table.md'}")


if __name__ == "__main__":
    main()
