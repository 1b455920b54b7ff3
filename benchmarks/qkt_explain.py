"""Why QKT forgets on digits: its noise filter and its lambda, measured on the real code path.

``docs/studies-qkt.md`` reports that QKT (the QKT paper, "Query-based Knowledge Transfer",
ICLR 2025) forgets much of its local classes on digits. This benchmark measures four things,
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

A study of the study driver (``flowerbed.experiments.study_cli``): a point is QKT with one
partition, lambda and teacher weight (``'sum'``, Eq. 4's, at every lambda; ``'mean'`` at lambda =
1.5), a run one seed of it, the run config run in this process in a temporary folder
(``sweep_study.run_cell``, one torch thread) and read before the folder goes. The filter
quantities are not in the run folder (a run records only the number of kept teachers), so the
row recomputes them in this process, with the run's ``config.json`` and the functions of the
protocol: ``LocalClient.from_context`` (the client's data), the local-fit phase's
``train_local_model`` (the teachers), ``client_query``, and QKT's ``_prepare`` (the teachers'
predictions and the filter, with the run's noise generator; ``filter_teachers``' mean noise
probabilities). It checks that the recomputation is the run's: same queries, same training
label counts, same per-class test accuracy of every local model, same number of kept teachers
per client (the ``match`` column; the report says how many runs match). The filter, the queries
and the local models do not depend on lambda or on the teacher weight, so one recomputation per
partition and seed serves all of its runs in a process, the ``'mean'`` ones included.

A row holds the run's metrics (means over clients), ``round_seconds`` (the sum of its rounds),
``match``, and the per-client and per-teacher values as space-separated lists. Budgets
(``BUDGETS``): ``full`` (the default: both partitions, seeds 0, 1, 2, the four lambdas with
``'sum'`` and lambda = 1.5 with ``'mean'``: 30 runs) and ``quick`` (Path, seed 0, lambda 1.5 and
4 with ``'sum'``, 1.5 with ``'mean'``: 3 runs, a check that the measuring path works, into
``results/qkt-explain/quick``).

    python benchmarks/qkt_explain.py                 # what rows.jsonl lacks of the 30 runs
    python benchmarks/qkt_explain.py --quick         # 3 runs, into qkt-explain/quick
    python benchmarks/qkt_explain.py --report-only   # table.md from rows.jsonl

Writes into ``benchmarks/results/qkt-explain``: ``rows.jsonl`` (one row per run: the committed
record), ``measured.jsonl`` (one line per invocation that measured) and, from the rows and the
provenance beside them alone, ``table.md`` (the teacher-weight table only once the rows hold
'mean' runs), which ``docs/studies-qkt.md`` includes. The committed rows were measured by the
script when it was two sweeps, the lambdas with ``'sum'`` and then the ``'mean'`` runs, each
with its provenance file (``measured.json`` and ``measured-teacher-weight.json``, kept), into
``runs.csv``, converted once into ``rows.jsonl``: to measure anew, remove ``rows.jsonl`` and the
two provenance files.
"""

from __future__ import annotations

import json
import math
import statistics
from functools import partial
from pathlib import Path

import numpy as np
from flwr.app import Context, RecordDict
from result_tables import (
    paired_cell,
    percent_cell,
    provenance_line,
    table_head,
    unrecorded_provenance_line,
    write_table,
)
from scipy import stats
from sweep_study import run_cell

from flowerbed.catalog import parse_run_config
from flowerbed.core.results import round_seconds
from flowerbed.evaluation.metrics import eval_scores, test_accuracies
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.experiments.qkt import APPENDIX_A2, PARTITIONS
from flowerbed.inprocess import default_run_config, resolve_run_config
from flowerbed.kd.teachers import filter_teachers
from flowerbed.methods.qkt import _NOISE_TAG, _prepare
from flowerbed.protocols.exchange import Transfer
from flowerbed.protocols.local_fit import client_query, train_counts, train_local_model
from flowerbed.training.local_client import LocalClient

RESULTS = Path(__file__).parent / "results" / "qkt-explain"
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-qkt.md"  # includes table.md
LAMBDAS = (1.0, 1.5, 2.0, 4.0)
DEFAULT_LAMBDA = "1.5"
DEFAULT_WEIGHT = "sum"  # qkt-teacher-weight of Eq. 4; 'mean' is the averaged variant
WEIGHTS = (DEFAULT_WEIGHT, "mean")
# the provenance of the committed 'mean' rows, measured by a sweep of their own (module doc)
MEAN_PROVENANCE = "measured-teacher-weight.json"
NUM_CLIENTS = 10
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
LISTS = (*CLIENT_LISTS, *TEACHER_LISTS)
# partitions, seeds, lambdas with Eq. 4's sum ('mean' runs at the default lambda)
BUDGETS = {
    "full": ([name for name, _ in PARTITIONS], 3, LAMBDAS),
    "quick": (["Path"], 1, (1.5, 4.0)),
}


class QktExplain:
    """The study (module docstring): a row per partition, lambda, teacher weight and seed."""

    name = "qkt_explain"
    budgets = BUDGETS
    default_budget = "full"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        partitions, seeds, lambdas = budget_of(BUDGETS, budget)
        cells = [(p, str(lam), DEFAULT_WEIGHT) for p in partitions for lam in lambdas]
        cells += [(p, DEFAULT_LAMBDA, "mean") for p in partitions]
        return [qkt_point(*cell) for cell in cells], list(range(seeds))

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        key = (point.settings["labels"]["partition"], seed)
        return run_cell(point, seed, NUM_CLIENTS, partial(run_record, key))

    def report(self, rows: list[dict[str, Value]]) -> dict:
        if not rows:  # nothing measured yet: no table
            return {}
        return {TABLE.name: partial(table_text, rows)}


def qkt_point(partition: str, lam: str, weight: str) -> Point:
    """QKT on digits with single-class queries at one partition, lambda and teacher weight, as
    ``sweep_study.run_cell`` runs it; Eq. 4's sum is the run config's default, left unset."""
    labels = {"partition": partition, "lam": lam, "teacher_weight": weight}
    config = {**FIXED, **dict(PARTITIONS)[partition], "qkt-lambda": float(lam)}
    if weight != DEFAULT_WEIGHT:
        config["qkt-teacher-weight"] = weight
    return Point("/".join(labels.values()), {"labels": labels, "config": config})


# --- the recomputation of the filter -------------------------------------------------------------


def spearman(a, b) -> float:
    """Spearman's rank correlation (ties: mean ranks); NaN when either side is constant."""
    if len(set(a)) < 2 or len(set(b)) < 2:
        return math.nan
    return float(stats.spearmanr(a, b).statistic)


def filter_diagnostics(run_config: dict, num_clients: int) -> dict:
    """The filter of every student of a run, recomputed with the protocol's functions.

    Returns ``clients``: per partition id its query, training label counts, local model's
    per-class test accuracy, kept teacher ids (``_prepare``), and the mean over its training
    images of the kept teachers' summed probability of the query class and of the true label;
    ``noise``: per teacher id the mean over the other students' noise batches of its mean
    softmax (``filter_teachers``). Called while the run's one torch thread is set
    (``sweep_study.run_and_read``), so the local models are the run's, bit for bit."""
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


# the filter of every (partition, seed) recomputed in this process (``run_record``)
_DIAGNOSTICS: dict[tuple, dict] = {}


def run_record(key: tuple[str, int], run_dir: Path, stopped: bool) -> dict[str, Value]:
    """What the tables read of one run of the (partition, seed) ``key``: its metrics (means
    over clients) and the seconds of its rounds, and the filter quantities, recomputed
    (``filter_diagnostics``, once per ``key`` in a process) and checked against the run."""
    result = json.loads((run_dir / "kt_metrics.json").read_text())
    stored = json.loads((run_dir / "config.json").read_text())
    defaults = default_run_config()
    run_config = resolve_run_config({k: v for k, v in stored.items() if k in defaults})
    # the filter does not depend on lambda or the teacher weight: one per partition and seed
    if key not in _DIAGNOSTICS:
        _DIAGNOSTICS[key] = filter_diagnostics(run_config, len(result["clients"]))
    found = _DIAGNOSTICS[key]
    threshold = int(run_config["kt-query-threshold"])
    counts = {row["partition_id"]: row["train_counts"] for row in result["clients"]}
    lists: dict[str, list] = {name: [] for name in CLIENT_LISTS}
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
        **{name: summary.get(name, math.nan) for name in METRICS},
        "round_seconds": sum(round_seconds(run_dir)),
        "match": int(match),
        **{name: " ".join(map(str, values)) for name, values in lists.items()},
        "spearman": " ".join(map(str, spearmans)),
        "spearman_max": " ".join(map(str, ceilings)),
        "noise_mse": " ".join(map(str, mses)),
    }


# --- the report ------------------------------------------------------------------------------------


def grid_order(row: dict) -> tuple:
    """Where a row's run is (teacher weight, partition, seed, lambda): the order the two sweeps
    wrote ``runs.csv`` in, which the tables' sums follow."""
    partitions = [name for name, _ in PARTITIONS]
    return (
        WEIGHTS.index(row["teacher_weight"]),
        partitions.index(row["partition"]),
        row["seed"],
        float(row["lam"]),
    )


def runs_of(rows: list[dict[str, Value]]) -> list[dict]:
    """The rows in grid order, each list column as a list of numbers."""
    return [
        {**row, **{name: [float(v) for v in str(row[name]).split()] for name in LISTS}}
        for row in sorted(rows, key=grid_order)
    ]


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
    seconds = statistics.fmean(r["round_seconds"] for r in averaged)
    if not (folder / MEAN_PROVENANCE).is_file():  # measured by the study, with the 'sum' runs
        return [*lines, "", f"Rounds of one 'mean' run: {seconds:.1f} s on average.", ""]
    return [
        *lines,
        "",
        (
            f"Rounds of one 'mean' run: {seconds:.1f} s on average (each is the only run of its"
            " partition and seed in its sweep, so each trains the local models itself)."
        ),
        "",
        provenance_line(folder, MEAN_PROVENANCE),
        "",
    ]


def report(data: Path) -> str:
    """``table.md``, from the rows in ``data``'s folder and the provenance beside them alone."""
    return table_text(measured_rows(data.parent), data.parent)


def table_text(rows: list[dict[str, Value]], folder: Path) -> str:
    """The tables of ``table.md`` from the rows and where they were measured: the filter (at
    the default lambda; it does not depend on lambda), Fig. 5's analogue, the lambda sweep
    paired by seed against lambda = 1.5, all with Eq. 4's sum, and, once the rows hold them,
    the averaged teachers against the sum (``teacher_weight_table``)."""
    everything = runs_of(rows)
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
    lines += teacher_weight_table(everything, folder)
    matched = sum(r["match"] for r in everything)
    seconds = statistics.fmean(r["round_seconds"] for r in runs)
    lines += [
        (
            f"The recomputed filter is the runs' own in {matched} of {len(everything)} runs (same"
            " queries, label counts, local models' per-class test accuracy and number of kept"
            f" teachers per student). Rounds of one run: {seconds:.1f} s on average, on a"
            " shared machine (the first lambda of a partition and seed trains the local"
            " models; the later ones find them in the process's cache)."
        ),
        "",
        " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(QktExplain(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
