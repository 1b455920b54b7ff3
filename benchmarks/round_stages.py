"""Where the seconds of one FL round go: flowerbed against a plain PyTorch loop, stage by stage.

The workload of ``benchmarks/overhead.py`` (digits, cnn, 10 clients, 20 local epochs, 4
rounds of FedAvg, one torch thread, one client at a time) run four ways:

* **plain**: ``overhead.plain_fedavg``, the hand-written FedAvg loop over the same
  ``train_local`` / ``evaluate``, its stages timed under flowerbed's stage names where they
  apply (client decode: a fresh model loading the global state; client training; aggregate
  train; client evaluation; central evaluation);
* **bare**: a bare Flower + PyTorch app doing the same job through ``flwr run``
  (``bare_torch_app``: Flower's own ``FedAvg``, a plain PyTorch loop, flowerbed's partition
  of the same data, the same network), with the configuration's features written the way a
  hand-written app would; its rounds are timed, and each client's step with its training or
  evaluation within it. It is the floor of Flower's engine: the
  round time flowerbed adds to it, and the start-up it adds;
* **in process**: flowerbed's ServerApp and ClientApp in this process (``run_in_process``);
* **flwr run**: flowerbed through Flower's Ray simulation (``flowerbed.simulation.simulate``,
  ``client-resources-num-cpus=2``: one Ray actor at a time on 2 cores).

and on two configurations: ``default`` (overhead.py's run: no client evaluation, the per-round
checkpoint and clinical metrics as they are by default) and ``features`` (every feature a user
commonly turns on: clinical metrics as by default, ``checkpoint`` each round, the
``tensorboard`` tracker, which needs no network, and client evaluation with
``fraction-evaluate=1.0``; the plain loop then evaluates the global model on every client's
local test split too). The end-of-run HTML report (``FLOWERBED_REPORT``) is off: it is no
part of a round.

Every run writes its stage times through ``FLOWERBED_STAGE_TIMES`` (``flowerbed.core.stages``:
the ServerApp and every Ray actor append to one file; ``overhead.timed_run``). A round's
seconds are its ``round`` stage: from its first training message to the end of its central
evaluation (history, trackers and checkpoint included). What no stage covers (Flower's
messages, their serialisation, Ray, the mods, building the client) is the round minus its
top-level stages.

Outside client training: every variant trains the same clients on the same data with the same
``train_local``, and that training is most of a round and what this shared machine's load
moves most (the plain loop's rounds themselves ranged from 3.4 to 6.0 s within one
invocation of ``overhead.py``). ``stages.md`` therefore also gives each run's round less its
client training, and what flowerbed adds there to the plain loop, paired by repeat, with the
ratio it makes to the plain loop's round (``outside_training_lines``): what the framework
costs, without the training's noise.

Start-up: the wall seconds of each ``flwr run`` (bare and flowerbed) less its rounds at their
steady pace (the number of rounds times the median of rounds 2..N), so that the actors'
first-round costs (starting Ray workers, imports, the first optimiser) count as start-up, not
as a round.

A study of the study driver (``flowerbed.experiments.study_cli``): the points are
(configuration, variant), the seeds are repeats (numbered from 1), and the points alternate
within each repeat (``alternate``: plain, bare, in process, flwr run on ``default``, then on
``features``, then the next repeat), one at a time, so that load from other work falls on all
of them alike. Budgets: ``full`` (the default: every variant and configuration, 7 repeats,
about 35 minutes on 2 cores), ``startup`` (the start-up alone, with less noise from the rounds:
the two ``flwr run`` apps on ``default``, 2 rounds, 10 repeats; published from
``results/round_stages_startup``, which ``--out`` names, since a budget's own folder,
``round_stages/startup``, is a run folder that git ignores) and ``quick`` (every variant and
configuration, 1 local epoch, 2 rounds, 1 repeat: a few minutes, four of them the ``flwr
run`` start-ups, a check that the measuring path works, not a measurement, into
``round_stages/quick``).

    python benchmarks/round_stages.py                  # table.md and stages.md
    python benchmarks/round_stages.py --budget startup --out benchmarks/results/round_stages_startup
    python benchmarks/round_stages.py --quick
    python benchmarks/round_stages.py --report-only    # the tables from rows.jsonl
    python benchmarks/round_stages.py --budget startup --out benchmarks/results/round_stages_startup --report-only

Writes into ``benchmarks/results/round_stages`` (or ``--out``): ``rows.jsonl`` (one row per
run: what ran, each round's seconds as ``round/<round>``, each stage's seconds summed over a
round as ``stage/<round>/<side>/<stage>/<within>``, and a ``flwr run``'s wall seconds),
``measured.jsonl`` (one line per invocation that measured) and the tables ``table.md``
(seconds per round, the paired ratios and the start-up) and ``stages.md`` (seconds per round
by stage), made from the rows and the provenance beside them alone; ``docs/benchmarks.md``
includes both tables of ``round_stages`` and ``table.md`` of ``round_stages_startup``
(``tests/test_published_tables.py`` checks them). The committed rows of both folders were
measured by this study on 2026-11-28 (``measured.jsonl`` says where); to measure anew, remove
``rows.jsonl`` and ``measured.jsonl``: a rerun adds only what the rows lack.
"""

from __future__ import annotations

import statistics
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from bare_torch_app import check_same_network, write_bare_torch_app
from overhead import (
    FLWR,
    IN_PROCESS,
    PLAIN,
    WORKLOAD,
    by_repeat,
    flwr_seconds,
    repeat_seeds,
    round_values,
    rounds_of,
    run_variant,
    start_up,
    steady_round,
    timed_run,
    variant_cells,
    workload_of,
    workload_values,
)
from overhead import LABELS as TIMED_LABELS
from result_tables import joined, ratio_cell, unrecorded_provenance_line, write_table

from flowerbed.catalog import parse_run_config
from flowerbed.core import stages
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.experiments.stats import paired_ratio
from flowerbed.inprocess import resolve_run_config
from flowerbed.simulation import simulate

RESULTS = Path(__file__).resolve().parent / "results" / "round_stages"
DATA = RESULTS / ROWS
TABLE, STAGES_TABLE = RESULTS / "table.md", RESULTS / "stages.md"
# what stages.md is made of: the stage values of the same rows (report's argument)
STAGE_VALUES = f"{ROWS}:stages"
STARTUP = "startup"  # the start-up budget (module docstring), published from START_UP
START_UP = RESULTS.parent / "round_stages_startup"
PUBLISHED = [
    (DATA, TABLE),
    (RESULTS / STAGE_VALUES, STAGES_TABLE),
    (START_UP / ROWS, START_UP / TABLE.name),
]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"

BARE = "bare"
VARIANTS = (PLAIN, BARE, IN_PROCESS, FLWR)
THROUGH_FLWR_RUN = (BARE, FLWR)  # the variants whose whole run's seconds are start-up's
BARE_LABEL = "bare Flower + PyTorch app through `flwr run` (Ray)"
LABELS = {variant: {**TIMED_LABELS, BARE: BARE_LABEL}[variant] for variant in VARIANTS}
CONFIGS = {
    "default": {},
    "features": {"fraction-evaluate": 1.0, "checkpoint": True, "tracker": "tensorboard"},
}
BUDGETS = {
    "full": {"variants": VARIANTS, "configs": tuple(CONFIGS), **WORKLOAD, "repeats": 7},
    STARTUP: {
        "variants": THROUGH_FLWR_RUN,
        "configs": ("default",),
        **WORKLOAD,
        "rounds": 2,
        "repeats": 10,
    },
    "quick": {
        "variants": VARIANTS,
        "configs": tuple(CONFIGS),
        **WORKLOAD,
        "local_epochs": 1,
        "rounds": 2,
        "repeats": 1,
    },
}
STAGE_KEY = "stage/"  # a row's key of a stage: "stage/<round>/<side>/<stage>/<within>"
NOT_COVERED = "not covered (Flower's messages, serialisation, Ray, mods, other)"


class RoundStages:
    """The study (module docstring): one run per (configuration, variant, repeat)."""

    name = "round_stages"
    budgets = BUDGETS
    default_budget = "full"
    alternate = True

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        points = [
            Point(
                f"{config}/{variant}", {"variant": variant, "config": config} | workload_of(chosen)
            )
            for config in chosen["configs"]
            for variant in chosen["variants"]
        ]
        return points, repeat_seeds(chosen)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        settings = point.settings
        variant = settings["variant"]
        run = run_bare if variant == BARE else partial(run_variant, variant)
        lines, wall = timed_run(run, settings, CONFIGS[settings["config"]])
        return (
            workload_values(settings)
            | {"config": settings["config"]}
            | round_values(lines, settings["rounds"])
            | stage_values(lines)
            | wall
        )

    def report(self, rows: list[dict[str, Value]]) -> dict:
        return {
            TABLE.name: partial(runs_table, rows),
            STAGES_TABLE.name: partial(stages_table, rows),
        }


def bare_overrides(overrides: dict, bare_app: Path) -> dict:
    """The bare app's run config for flowerbed's ``overrides`` (``bare_torch_app``)."""
    return {
        "num-server-rounds": overrides["num-server-rounds"],
        "local-epochs": overrides["local-epochs"],
        "fraction-evaluate": overrides["fraction-evaluate"],
        "checkpoint": bool(overrides.get("checkpoint", False)),
        "tracker": bool(overrides.get("tracker")),
        "data": str(bare_app / "data.npz"),
        "output-dir": str(overrides["output-dir"]),
    }


def run_bare(overrides: dict, clients: int) -> float:
    """One run of the bare app (written for the run, with flowerbed's partition of the data,
    its network checked against flowerbed's) through ``flwr run``: its wall seconds."""
    run_config = parse_run_config(resolve_run_config({}))
    with tempfile.TemporaryDirectory(prefix="bare-app-") as folder:
        bare_app = write_bare_torch_app(Path(folder), run_config, clients)
        check_same_network(bare_app, run_config)
        flwr = simulate(
            bare_overrides(overrides, bare_app),
            num_supernodes=clients,
            num_cpus_per_client=2,
            app_dir=bare_app,
        )
    return flwr_seconds(BARE, flwr)


def stage_values(lines: list[dict]) -> dict[str, float]:
    """Every stage of a run's stage lines but the round, summed per (round, side, stage,
    within), as ``STAGE_KEY`` values."""
    sums: dict[str, float] = defaultdict(float)
    for line in lines:
        if line["stage"] != stages.ROUND and line["round"] is not None:
            within = line["within"] or ""
            sums[f"{STAGE_KEY}{line['round']}/{line['side']}/{line['stage']}/{within}"] += line[
                "seconds"
            ]
    return dict(sums)


def round_rows(rows: list[dict[str, Value]]) -> Iterator[dict]:
    """One record per run and round (variant, config, repeat, round, seconds), runs in the
    rows' order, rounds in order."""
    for row in rows:
        for number, seconds in rounds_of(row).items():
            yield {**labels_of(row), "round": number, "seconds": seconds}


def stage_rows(rows: list[dict[str, Value]]) -> Iterator[dict]:
    """One record per run and ``STAGE_KEY`` value (variant, config, repeat, round, side, stage,
    within, seconds), runs in the rows' order, each run's by (round, side, stage, within)."""
    for row in rows:
        entries = []
        for key, seconds in row.items():
            if key.startswith(STAGE_KEY):
                number, side, name, within = key[len(STAGE_KEY) :].split("/")
                entries.append((int(number), side, name, within, seconds))
        for number, side, name, within, seconds in sorted(entries):
            yield {
                **labels_of(row),
                "round": number,
                "side": side,
                "stage": name,
                "within": within,
                "seconds": seconds,
            }


def labels_of(row: dict[str, Value]) -> dict:
    return {"variant": row["variant"], "config": row["config"], "repeat": row["seed"]}


def per_repeat(rows: list[dict[str, Value]]) -> dict[tuple[str, str], dict[int, float]]:
    """(config, variant) -> repeat -> median seconds per round over rounds 2..N."""
    medians: dict[tuple, dict[int, float]] = defaultdict(dict)
    for key in dict.fromkeys((row["config"], row["variant"]) for row in rows):
        chosen = [row for row in rows if (row["config"], row["variant"]) == key]
        medians[key] = by_repeat(chosen, steady_round)
    return {key: by_seed for key, by_seed in medians.items() if by_seed}


def repeats_of(rows: list[dict[str, Value]]) -> str:
    """How many repeats each point has, its distinct counts joined by "/"."""
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        counts[row["point"]] += 1
    return "/".join(map(str, dict.fromkeys(counts.values())))


def caption(rows: list[dict[str, Value]], what: str) -> str:
    return (
        f"digits, cnn, {joined(rows, 'clients')} clients, {joined(rows, 'local_epochs')} local"
        f" epochs, {joined(rows, 'rounds')} rounds of FedAvg, one torch thread, one client at a"
        f" time; the variants alternate within each of {repeats_of(rows)} repeats; {what}. "
        "Configurations: `default` (overhead.py's run) and `features` (client evaluation "
        "`fraction-evaluate=1.0`, `checkpoint` each round, `tracker=tensorboard`, clinical "
        "metrics as by default; the plain loop evaluates on every client's test split too, and "
        "the bare app has client evaluation, a `torch.save` each round and TensorBoard "
        "scalars)."
    )


def provenance(folder: Path) -> str:
    """Where the rows in ``folder`` were measured, one paragraph."""
    return " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder)


def report(data: Path) -> str:
    """The table made from the rows in ``data``'s folder (and the provenance beside them)
    alone: ``stages.md`` for their stage values (``STAGE_VALUES``), else ``table.md``."""
    rows = measured_rows(data.parent)
    if data.name == STAGE_VALUES:
        return stages_table(rows, data.parent)
    return runs_table(rows, data.parent)


def runs_table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``table.md``: per configuration and variant, the median over repeats of the median
    seconds per round (rounds 2..N), and flowerbed's ratio to the plain loop paired by repeat
    (the median of the per-repeat ratios, their lowest and highest)."""
    medians = per_repeat(rows)
    lines = [
        caption(rows, "seconds per round: the median over rounds 2..N of each run"),
        "",
        (
            "| configuration | variant | s / round (median of repeats) | ratio to plain, paired"
            " by repeat: median | lowest – highest |"
        ),
        "|---|---|---|---|---|",
    ]
    for config in CONFIGS:
        steady = {variant: medians.get((config, variant), {}) for variant in VARIANTS}
        for cells in variant_cells(steady, LABELS):
            lines.append("| " + " | ".join([config, *cells]) + " |")
    lines += start_up_lines(rows, medians)
    lines += ["", provenance(folder)]
    return "\n".join(lines) + "\n"


def paired(ours: dict[int, float], floor: dict[int, float]) -> str:
    """``ours`` over ``floor`` paired by repeat: the median ratio (lowest – highest)."""
    return ratio_cell(paired_ratio(ours, floor))


def start_up_lines(rows: list[dict[str, Value]], medians: dict) -> list[str]:
    """flowerbed through ``flwr run`` against the bare Flower + PyTorch app: each run's wall
    seconds, its start-up (``overhead.start_up``) and its steady round, paired by repeat."""
    lines = [
        "",
        (
            "flowerbed through `flwr run` against the bare Flower + PyTorch app doing the same"
            " job (`bare_torch_app.py`), paired by repeat: median ratio (lowest – highest)."
            f" Start-up: the run's wall seconds less {joined(rows, 'rounds')} rounds at its"
            " steady pace (the median of rounds 2..N), so the actors' first-round costs count"
            " as start-up."
        ),
        "",
        (
            "| configuration | whole run, bare s | flowerbed s | ratio | start-up, bare s |"
            " flowerbed s | ratio | steady round, ratio |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for config in CONFIGS:
        whole: dict[str, dict[int, float]] = {variant: {} for variant in THROUGH_FLWR_RUN}
        fixed: dict[str, dict[int, float]] = {variant: {} for variant in THROUGH_FLWR_RUN}
        for row in rows:
            steady = medians.get((config, row["variant"]), {}).get(row["seed"])
            if row["config"] != config or row["variant"] not in whole or steady is None:
                continue
            whole[row["variant"]][row["seed"]] = float(row["wall_seconds"])
            fixed[row["variant"]][row["seed"]] = start_up(row, steady)
        if not whole[BARE] or not whole[FLWR]:
            continue
        lines.append(
            f"| {config} | {statistics.median(whole[BARE].values()):.1f}"
            f" | {statistics.median(whole[FLWR].values()):.1f} | {paired(whole[FLWR], whole[BARE])}"
            f" | {statistics.median(fixed[BARE].values()):.1f}"
            f" | {statistics.median(fixed[FLWR].values()):.1f} | {paired(fixed[FLWR], fixed[BARE])}"
            f" | {paired(medians[config, FLWR], medians[config, BARE])} |"
        )
    return lines


def median_over_repeats(means: dict[tuple, dict[str, float]], variant: str, label: str) -> float:
    """The median over ``variant``'s repeats of its seconds per round at ``label`` (0 where a
    repeat has no such stage)."""
    values = [by.get(label, 0.0) for (v, _), by in means.items() if v == variant]
    return statistics.median(values) if values else 0.0


def stage_label(side: str, name: str, within: str) -> str:
    return f"{side}: {name}" + (f" (within {within})" if within else "")


REST = ": outside the stages within it"


def rest_label(label: str) -> str:
    """The row of a stage's own work: its seconds less those of the stages within it."""
    return label + REST


# the order of a round: the clients' work, then the server's
STAGE_ORDER = [
    stage_label(side, name, within)
    for side, name, within in (
        (stages.CLIENT, stages.CLIENT_STATE, ""),
        (stages.CLIENT, stages.CLIENT_STEP, ""),
        (stages.CLIENT, stages.CLIENT_STEP + REST, ""),
        (stages.CLIENT, stages.CLIENT_DECODE, stages.CLIENT_STEP),
        (stages.CLIENT, stages.CLIENT_TRAINING, stages.CLIENT_STEP),
        (stages.CLIENT, stages.CLIENT_ENCODE, stages.CLIENT_STEP),
        (stages.CLIENT, stages.CLIENT_EVALUATION, stages.CLIENT_STEP),
        (stages.CLIENT, stages.CLINICAL_METRICS, stages.CLIENT_EVALUATION),
        (stages.SERVER, stages.REPLY_CHECKS, ""),
        (stages.SERVER, stages.AGGREGATE_TRAIN, ""),
        (stages.SERVER, stages.AGGREGATE_EVALUATE, ""),
        (stages.SERVER, stages.CENTRAL_EVALUATION, ""),
        (stages.SERVER, stages.CENTRAL_EVALUATION + REST, ""),
        (stages.SERVER, stages.CLINICAL_METRICS, stages.CENTRAL_EVALUATION),
        (stages.SERVER, stages.BEST_MODEL, ""),
        (stages.SERVER, stages.HISTORY, ""),
        (stages.SERVER, stages.TRACKERS, ""),
        (stages.SERVER, stages.CHECKPOINT, ""),
    )
]


def stage_means(rows: list[dict[str, Value]], config: str) -> tuple[dict, list[str]]:
    """``config``'s seconds per round by stage: (variant, repeat) -> row label -> the run's
    mean over rounds 2..N of the stage's seconds summed per round (a nested stage's seconds
    taken off its parent's own work, ``rest_label``; ``NOT_COVERED``: the round less its
    top-level stages; ``stages.ROUND``: the whole round), and the labels in a round's order."""
    runs = list(round_rows(rows))
    stage_table = list(stage_rows(rows))
    means: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    rounds: dict[tuple, set] = defaultdict(set)
    for row in runs:
        if row["config"] == config and row["round"] >= 2:
            key = (row["variant"], row["repeat"])
            rounds[key].add(row["round"])
            means[key][stages.ROUND] += row["seconds"]
    top: dict[tuple, float] = defaultdict(float)
    top_level = {(row["side"], row["stage"]) for row in stage_table if not row["within"]}
    order: list[str] = []
    for row in stage_table:
        key = (row["variant"], row["repeat"])
        if row["config"] != config or row["round"] < 2 or key not in rounds:
            continue
        label = stage_label(row["side"], row["stage"], row["within"])
        if label not in order:
            order.append(label)
        means[key][label] += row["seconds"]
        if not row["within"]:
            top[key] += row["seconds"]
        elif (row["side"], row["within"]) in top_level:  # off its parent's own work
            parent = stage_label(row["side"], row["within"], "")
            means[key][rest_label(parent)] -= row["seconds"]
    for key, by_label in means.items():
        by_label[NOT_COVERED] = by_label[stages.ROUND] - top[key]
        for label in [label for label in by_label if rest_label(label) in STAGE_ORDER]:
            by_label[rest_label(label)] += by_label[label]
        for label in by_label:
            by_label[label] /= len(rounds[key])
    order += [rest_label(label) for label in order if rest_label(label) in STAGE_ORDER]
    known = [label for label in STAGE_ORDER if label in order]
    labels = [*known, *(label for label in order if label not in known), NOT_COVERED, stages.ROUND]
    return means, labels if means else []


def stages_table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``stages.md``: per configuration, the seconds per round of every stage by variant
    (``stage_means``, then the median over repeats), the round, what no top-level stage
    covers, and each flowerbed variant's difference to the plain loop; then the round less
    its client training (``outside_training_lines``)."""
    lines = [
        caption(
            rows,
            "seconds per round of each stage: a run's mean over rounds 2..N of the stage's"
            " seconds summed over the round (every client's included), then the median over"
            " repeats; nested stages (within ...) are part of the stage they name; 0 where a"
            " variant does not have the stage",
        ),
    ]
    by_config = {config: stage_means(rows, config) for config in CONFIGS}
    for config, (means, labels) in by_config.items():
        if not means:
            continue
        lines += [
            "",
            f"**{config}**",
            "",
            (
                "| stage | plain | bare app | in process | flwr run | in process − plain |"
                " flwr run − plain | flwr run − bare app |"
            ),
            "|---|---|---|---|---|---|---|---|",
        ]
        for label in labels:
            plain, bare, inproc, flwr = (median_over_repeats(means, v, label) for v in VARIANTS)
            name = "**whole round**" if label == stages.ROUND else label
            lines.append(
                f"| {name} | {plain:.3f} | {bare:.3f} | {inproc:.3f} | {flwr:.3f}"
                f" | {inproc - plain:+.3f} | {flwr - plain:+.3f} | {flwr - bare:+.3f} |"
            )
    lines += outside_training_lines({config: means for config, (means, _) in by_config.items()})
    lines += ["", provenance(folder)]
    return "\n".join(lines) + "\n"


TRAINING = stage_label(stages.CLIENT, stages.CLIENT_TRAINING, stages.CLIENT_STEP)


def outside_training(means: dict[tuple, dict[str, float]], variant: str) -> dict[int, float]:
    """repeat -> ``variant``'s seconds per round outside client training: the whole round
    less the clients' training (``TRAINING``), from ``stage_means``."""
    return {
        repeat: by_label[stages.ROUND] - by_label[TRAINING]
        for (v, repeat), by_label in means.items()
        if v == variant and TRAINING in by_label
    }


def outside_training_lines(means_by_config: dict[str, dict[tuple, dict[str, float]]]) -> list[str]:
    """The round less its client training, by configuration (``stage_means`` of each) and
    variant, paired by repeat with the plain loop: the seconds each variant adds to a round
    and the ratio to plain they make, (plain's round + added) / plain's round, and flowerbed's ratio to the bare app's
    (its round with the plain loop's training over the bare app's): the median over repeats
    (lowest – highest). The bare app is in it where it timed its clients' training.

    Every variant trains the same clients on the same samples with the same network and
    optimiser (flowerbed and the plain loop with the same ``train_local``), so the training is
    the same work; its seconds are also most of a round and what this machine's load moves
    most (the whole-round ratios of ``table.md`` carry it). Taking the training out leaves
    what the framework does around it."""
    lines = [
        "",
        (
            "Outside client training: each run's mean over rounds 2..N of the round less the"
            " clients' training (the same work in every variant: the same network, optimiser"
            " and samples), and what each variant adds to the plain loop's, paired by repeat, as"
            " seconds and as the ratio it makes to the plain loop's round, (plain round +"
            " added) / plain round, and flowerbed's to the bare app's, (plain round + added)"
            " / (plain round + the bare app's added) through `flwr run`: median over repeats"
            " (lowest – highest)."
        ),
        "",
        (
            "| configuration | variant | s / round outside training (median) | added to plain's,"
            " s | ratio to plain | ratio to the bare app |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for config, means in means_by_config.items():
        plain = outside_training(means, PLAIN)
        plain_round = {r: by[stages.ROUND] for (v, r), by in means.items() if v == PLAIN}
        # repeat -> the round each variant would take with the plain loop's training
        rounds = {
            variant: {
                r: plain_round[r] + seconds - plain[r]
                for r, seconds in outside_training(means, variant).items()
                if r in plain
            }
            for variant in VARIANTS  # the bare app's where it timed its training
        }
        for variant in VARIANTS:
            if not rounds[variant]:
                continue
            added = {r: seconds - plain_round[r] for r, seconds in rounds[variant].items()}
            cells = ["0", "1", ""]
            if variant != PLAIN:
                floor = rounds[BARE] if variant == FLWR else {}
                cells = [
                    spread_cell(added),
                    ratio_cell(paired_ratio(rounds[variant], plain_round)),
                    ratio_cell(paired_ratio(rounds[variant], floor)) if floor else "",
                ]
            ours = outside_training(means, variant)
            lines.append(
                f"| {config} | {LABELS[variant]} | {statistics.median(ours.values()):.3f}"
                f" | {' | '.join(cells)} |"
            )
    return lines


def spread_cell(values: dict[int, float]) -> str:
    """``+0.123 (+0.100 – +0.150)``: the median of ``values`` and their lowest and highest."""
    if not values:
        return "–"
    low, high = min(values.values()), max(values.values())
    return f"{statistics.median(values.values()):+.3f} ({low:+.3f} – {high:+.3f})"


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(RoundStages(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
