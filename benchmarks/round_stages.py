"""Where the seconds of one FL round go: flowerbed against a plain PyTorch loop, stage by stage.

The workload of ``benchmarks/overhead.py`` (digits, cnn, 10 clients, 20 local epochs, 4
rounds of FedAvg, one torch thread, one client at a time) run four ways, alternating within
every repeat (plain, bare, in process, ``flwr run``, plain, bare, ...):

* **plain**: ``overhead.plain_fedavg``, the hand-written FedAvg loop over the same
  ``train_local`` / ``evaluate``, its stages timed under flowerbed's stage names where they
  apply (client decode: a fresh model loading the global state; client training; aggregate
  train; client evaluation; central evaluation);
* **bare**: a bare Flower + PyTorch app doing the same job through ``flwr run``
  (``bare_torch_app``: Flower's own ``FedAvg``, a plain PyTorch loop, flowerbed's partition
  of the same data, the same network), with the configuration's features written the way a
  hand-written app would; only its rounds are timed. It is the floor of Flower's engine: the
  round time flowerbed adds to it, and the start-up it adds (``starts.csv``);
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
the ServerApp and every Ray actor append to one file). A round's seconds are its ``round``
stage: from its first training message to the end of its central evaluation (history,
trackers and checkpoint included). What no stage covers (Flower's messages, their
serialisation, Ray, the mods, building the client) is the round minus its top-level stages.

Start-up: the wall seconds of each ``flwr run`` (bare and flowerbed, ``starts.csv``) less
its rounds at their steady pace (the number of rounds times the median of rounds 2..N), so
that the actors' first-round costs (starting Ray workers, imports, the first optimiser) count
as start-up, not as a round.

Outputs under ``--out`` (default ``benchmarks/results/round_stages``; ``--quick``:
``<out>/quick``): ``runs.csv`` (variant, config, repeat, round, seconds), ``stages.csv``
(variant, config, repeat, round, side, stage, within, seconds summed over the round),
``starts.csv`` (variant, config, repeat, the ``flwr run``'s wall seconds),
``setting.json`` (the workload), ``measured.json`` (provenance) and the tables ``table.md``
(seconds per round, the paired ratios and the start-up) and ``stages.md`` (seconds per round
by stage), made from those files alone by ``report`` (``--report-only``). A run that stops
can be resumed: the (variant, config, repeat) already in ``runs.csv`` are not run again
(``--fresh`` starts over). The start-up alone, with less noise from the rounds, is a slice
of its own in ``round_stages_startup/`` (``START_UP_SLICE``: the two ``flwr run`` apps, 2 rounds, 10
repeats), measured after the rest when the options are the defaults (``parts``).

    python benchmarks/round_stages.py --fresh --repeats 7   # every published table
    python benchmarks/round_stages.py --quick          # 2 repeats of 2 rounds, into quick/
    python benchmarks/round_stages.py --variants "bare,flwr run" --configs features --out DIR
    python benchmarks/round_stages.py --report-only
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch
from bare_torch_app import check_same_network, write_bare_torch_app
from overhead import plain_fedavg
from result_tables import provenance_line, ratio_cell, record_provenance

from flowerbed.catalog import parse_run_config
from flowerbed.core import stages
from flowerbed.core.results import atomic_write, write_csv
from flowerbed.experiments.stats import paired_ratio
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.simulation import simulate

RESULTS = Path(__file__).resolve().parent / "results" / "round_stages"
RUNS, STAGES, STARTS = RESULTS / "runs.csv", RESULTS / "stages.csv", RESULTS / "starts.csv"
TABLE, STAGES_TABLE = RESULTS / "table.md", RESULTS / "stages.md"
# start-up alone, 10 repeats of the two apps through flwr run, 2 rounds (module docstring)
START_UP = RESULTS.parent / "round_stages_startup"
PUBLISHED = [(RUNS, TABLE), (STAGES, STAGES_TABLE), (START_UP / "runs.csv", START_UP / "table.md")]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"

PLAIN, BARE, IN_PROCESS, FLWR = "plain", "bare", "in process", "flwr run"
VARIANTS = (PLAIN, BARE, IN_PROCESS, FLWR)
THROUGH_FLWR_RUN = (BARE, FLWR)  # the variants whose whole run's seconds are start-up's
# the start-up alone: the two flwr run apps, 2 rounds, 10 repeats, into START_UP
START_UP_SLICE = {
    "variants": THROUGH_FLWR_RUN,
    "configs": ("default",),
    "rounds": 2,
    "repeats": 10,
    "out": START_UP,
}
LABELS = {
    PLAIN: "plain PyTorch FedAvg loop",
    BARE: "bare Flower + PyTorch app through `flwr run` (Ray)",
    IN_PROCESS: "flowerbed in process (`run_in_process`)",
    FLWR: "flowerbed through `flwr run` (Ray)",
}
CONFIGS = {
    "default": {},
    "features": {"fraction-evaluate": 1.0, "checkpoint": True, "tracker": "tensorboard"},
}
RUN_FIELDS = ("variant", "config", "repeat", "round", "seconds")
STAGE_FIELDS = ("variant", "config", "repeat", "round", "side", "stage", "within", "seconds")
START_FIELDS = ("variant", "config", "repeat", "seconds")
NOT_COVERED = "not covered (Flower's messages, serialisation, Ray, mods, other)"


def overrides_for(args, config: str) -> dict:
    """The run config of ``config``: overhead.py's workload and the configuration's keys."""
    return {
        "num-server-rounds": args.rounds,
        "local-epochs": args.local_epochs,
        "output-dir": str(args.output_dir),
        "fraction-evaluate": 0.0,
        **CONFIGS[config],
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


def run_variant(variant: str, overrides: dict, clients: int, bare_app: Path) -> float | None:
    """One run of ``variant``; its stages go where ``FLOWERBED_STAGE_TIMES`` says. Returns
    the wall seconds of a ``flwr run`` (``THROUGH_FLWR_RUN``), else None."""
    if variant == PLAIN:
        plain_fedavg(parse_run_config(resolve_run_config(overrides)), clients)
        return None
    if variant == IN_PROCESS:
        run_in_process(overrides, num_clients=clients)
        return None
    if variant == BARE:
        flwr = simulate(
            bare_overrides(overrides, bare_app),
            num_supernodes=clients,
            num_cpus_per_client=2,
            app_dir=bare_app,
        )
    else:
        flwr = simulate(overrides, num_supernodes=clients, num_cpus_per_client=2)
    if flwr.returncode != 0:
        raise SystemExit(f"{variant}: flwr run failed:\n{flwr.log[-3000:]}")
    return flwr.seconds


def stage_rows(lines: list[dict], labels: dict) -> tuple[list[dict], list[dict]]:
    """(runs.csv rows, stages.csv rows) of one run's stage lines: each round's ``round``
    stage, and every other stage summed per (round, side, stage, within)."""
    runs = [
        {**labels, "round": line["round"], "seconds": f"{line['seconds']:.4f}"}
        for line in lines
        if line["stage"] == stages.ROUND
    ]
    sums: dict[tuple, float] = defaultdict(float)
    for line in lines:
        if line["stage"] != stages.ROUND and line["round"] is not None:
            key = (line["round"], line["side"], line["stage"], line["within"] or "")
            sums[key] += line["seconds"]
    rows = [
        {**labels, "round": r, "side": side, "stage": name, "within": within, "seconds": f"{s:.5f}"}
        for (r, side, name, within), s in sorted(sums.items())
    ]
    return sorted(runs, key=lambda row: row["round"]), rows


def read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def measure(args) -> None:
    """Run every (repeat, config, variant) not yet in ``runs.csv``, alternating the variants,
    appending to ``runs.csv`` and ``stages.csv`` after each run."""
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the SuperLink and the Ray actors
    os.environ["FLOWERBED_REPORT"] = "0"  # the end-of-run report is no part of a round
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    runs_path, stages_path = args.out / "runs.csv", args.out / "stages.csv"
    starts_path = args.out / "starts.csv"
    if args.fresh:
        for path in (runs_path, stages_path, starts_path):
            path.unlink(missing_ok=True)
    runs, stage_table = read_csv(runs_path), read_csv(stages_path)
    starts = read_csv(starts_path)
    done = {(r["variant"], r["config"], r["repeat"]) for r in runs}
    setting = {
        "clients": args.clients,
        "local_epochs": args.local_epochs,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "configs": CONFIGS,
    }
    atomic_write(args.out / "setting.json", lambda f: f.write(json.dumps(setting, indent=1) + "\n"))
    with tempfile.TemporaryDirectory(prefix="round-stages-") as folder:
        run_config = parse_run_config(resolve_run_config({}))
        bare_app = write_bare_torch_app(Path(folder) / "bare-app", run_config, args.clients)
        check_same_network(bare_app, run_config)
        for repeat in range(1, args.repeats + 1):
            for config in args.configs:
                for variant in args.variants:
                    labels = {"variant": variant, "config": config, "repeat": str(repeat)}
                    if (variant, config, str(repeat)) in done:
                        continue
                    target = Path(folder) / f"{variant}-{config}-{repeat}.jsonl".replace(" ", "-")
                    args.output_dir = Path(folder) / "runs"
                    os.environ[stages.ENV] = str(target)
                    try:
                        overrides = overrides_for(args, config)
                        seconds = run_variant(variant, overrides, args.clients, bare_app)
                    finally:
                        del os.environ[stages.ENV]
                    shutil.rmtree(args.output_dir, ignore_errors=True)
                    lines = [json.loads(line) for line in target.read_text().splitlines()]
                    new_runs, new_stages = stage_rows(lines, labels)
                    if len(new_runs) != args.rounds:
                        raise SystemExit(f"{labels}: {len(new_runs)} rounds timed of {args.rounds}")
                    runs += new_runs
                    stage_table += new_stages
                    if seconds is not None:
                        starts.append({**labels, "seconds": f"{seconds:.3f}"})
                        write_csv(starts_path, starts, START_FIELDS)
                    write_csv(runs_path, runs, RUN_FIELDS)
                    write_csv(stages_path, stage_table, STAGE_FIELDS)
                    per_round = statistics.median(
                        float(r["seconds"]) for r in new_runs[1:] or new_runs
                    )
                    print(
                        f"repeat {repeat} {config} {variant}: {per_round:.2f} s/round", flush=True
                    )
    record_provenance(args.out, sys.argv)


def per_repeat(runs: list[dict]) -> dict[tuple[str, str], dict[str, float]]:
    """(config, variant) -> repeat -> median seconds per round over rounds 2..N."""
    seconds: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in runs:
        if int(row["round"]) >= 2:
            seconds[row["config"], row["variant"]][row["repeat"]].append(float(row["seconds"]))
    return {
        key: {repeat: statistics.median(s) for repeat, s in by_repeat.items()}
        for key, by_repeat in seconds.items()
    }


def caption(folder: Path, what: str) -> str:
    setting = json.loads((folder / "setting.json").read_text())
    return (
        f"digits, cnn, {setting['clients']} clients, {setting['local_epochs']} local epochs, "
        f"{setting['rounds']} rounds of FedAvg, one torch thread, one client at a time; the "
        f"variants alternate within each of {setting['repeats']} repeats; {what}. "
        "Configurations: `default` (overhead.py's run) and `features` (client evaluation "
        "`fraction-evaluate=1.0`, `checkpoint` each round, `tracker=tensorboard`, clinical "
        "metrics as by default; the plain loop evaluates on every client's test split too, and "
        "the bare app has client evaluation, a `torch.save` each round and TensorBoard "
        "scalars)."
    )


def runs_report(data: Path) -> str:
    """``table.md``: per configuration and variant, the median over repeats of the median
    seconds per round (rounds 2..N), and flowerbed's ratio to the plain loop paired by repeat
    (the median of the per-repeat ratios, their lowest and highest)."""
    medians = per_repeat(read_csv(data))
    lines = [
        caption(data.parent, "seconds per round: the median over rounds 2..N of each run"),
        "",
        (
            "| configuration | variant | s / round (median of repeats) | ratio to plain, paired"
            " by repeat: median | lowest – highest |"
        ),
        "|---|---|---|---|---|",
    ]
    for config in CONFIGS:
        plain = medians.get((config, PLAIN), {})
        for variant in VARIANTS:
            by_repeat = medians.get((config, variant))
            if not by_repeat:
                continue
            cells = [config, LABELS[variant], f"{statistics.median(by_repeat.values()):.2f}"]
            ratio = paired_ratio(by_repeat, plain)
            if variant == PLAIN or ratio is None:
                cells += ["1", ""] if variant == PLAIN else ["", ""]
            else:
                cells += [f"{ratio.median:.2f}x", f"{ratio.low:.2f}x – {ratio.high:.2f}x"]
            lines.append("| " + " | ".join(cells) + " |")
    lines += start_up_lines(data.parent, medians)
    lines += ["", provenance_line(data.parent)]
    return "\n".join(lines) + "\n"


def paired(ours: dict[str, float], floor: dict[str, float]) -> str:
    """``ours`` over ``floor`` paired by repeat: the median ratio (lowest – highest)."""
    return ratio_cell(paired_ratio(ours, floor))


def start_up_lines(folder: Path, medians: dict) -> list[str]:
    """flowerbed through ``flwr run`` against the bare Flower + PyTorch app, from
    ``starts.csv``: each run's wall seconds, its start-up (wall seconds less the number of
    rounds times its steady seconds per round) and its steady round, paired by repeat."""
    starts = read_csv(folder / "starts.csv")
    rounds = json.loads((folder / "setting.json").read_text())["rounds"]
    lines = [
        "",
        (
            "flowerbed through `flwr run` against the bare Flower + PyTorch app doing the same"
            " job (`bare_torch_app.py`), paired by repeat: median ratio (lowest – highest)."
            f" Start-up: the run's wall seconds less {rounds} rounds at its steady pace (the"
            " median of rounds 2..N), so the actors' first-round costs count as start-up."
        ),
        "",
        (
            "| configuration | whole run, bare s | flowerbed s | ratio | start-up, bare s |"
            " flowerbed s | ratio | steady round, ratio |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for config in CONFIGS:
        whole: dict[str, dict[str, float]] = {variant: {} for variant in THROUGH_FLWR_RUN}
        fixed: dict[str, dict[str, float]] = {variant: {} for variant in THROUGH_FLWR_RUN}
        for row in starts:
            steady = medians.get((config, row["variant"]), {}).get(row["repeat"])
            if row["config"] != config or row["variant"] not in whole or steady is None:
                continue
            whole[row["variant"]][row["repeat"]] = float(row["seconds"])
            fixed[row["variant"]][row["repeat"]] = float(row["seconds"]) - rounds * steady
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


def stages_report(data: Path) -> str:
    """``stages.md``: per configuration, the seconds per round of every stage by variant
    (each run's mean over rounds 2..N of the stage's seconds summed per round, then the
    median over repeats), the round, what no top-level stage covers, and each flowerbed
    variant's difference to the plain loop."""
    rows = read_csv(data)
    runs = read_csv(data.parent / "runs.csv")
    lines = [
        caption(
            data.parent,
            "seconds per round of each stage: a run's mean over rounds 2..N of the stage's"
            " seconds summed over the round (every client's included), then the median over"
            " repeats; nested stages (within ...) are part of the stage they name; 0 where a"
            " variant does not have the stage",
        ),
    ]
    for config in CONFIGS:
        # (variant, repeat) -> row label -> seconds per round (mean over rounds 2..N)
        means: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        rounds: dict[tuple, set] = defaultdict(set)
        for row in runs:
            if row["config"] == config and int(row["round"]) >= 2:
                key = (row["variant"], row["repeat"])
                rounds[key].add(row["round"])
                means[key][stages.ROUND] += float(row["seconds"])
        top: dict[tuple, float] = defaultdict(float)
        top_level = {(row["side"], row["stage"]) for row in rows if not row["within"]}
        order: list[str] = []
        for row in rows:
            key = (row["variant"], row["repeat"])
            if row["config"] != config or int(row["round"]) < 2 or key not in rounds:
                continue
            label = stage_label(row["side"], row["stage"], row["within"])
            if label not in order:
                order.append(label)
            means[key][label] += float(row["seconds"])
            if not row["within"]:
                top[key] += float(row["seconds"])
            elif (row["side"], row["within"]) in top_level:  # off its parent's own work
                parent = stage_label(row["side"], row["within"], "")
                means[key][rest_label(parent)] -= float(row["seconds"])
        if not rounds:
            continue
        for key, by_label in means.items():
            by_label[NOT_COVERED] = by_label[stages.ROUND] - top[key]
            for label in [label for label in by_label if rest_label(label) in STAGE_ORDER]:
                by_label[rest_label(label)] += by_label[label]
            for label in by_label:
                by_label[label] /= len(rounds[key])
        order += [rest_label(label) for label in order if rest_label(label) in STAGE_ORDER]
        known = [label for label in STAGE_ORDER if label in order]
        labels = [
            *known,
            *(label for label in order if label not in known),
            NOT_COVERED,
            stages.ROUND,
        ]

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
    lines += ["", provenance_line(data.parent)]
    return "\n".join(lines) + "\n"


def report(data: Path) -> str:
    """The table made from ``data`` alone: ``runs_report`` for ``runs.csv``,
    ``stages_report`` for ``stages.csv``."""
    return stages_report(data) if data.name == "stages.csv" else runs_report(data)


def choices(text: str, valid: tuple[str, ...]) -> tuple[str, ...]:
    """The comma-separated names of ``text``, each one of ``valid``."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in valid]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(valid)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--local-epochs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 repeats of 2 rounds, into quick/")
    parser.add_argument(
        "--variants",
        type=lambda text: choices(text, VARIANTS),
        default=VARIANTS,
        help=f"comma-separated, of {', '.join(VARIANTS)} (default: all)",
    )
    parser.add_argument(
        "--configs",
        type=lambda text: choices(text, tuple(CONFIGS)),
        default=tuple(CONFIGS),
        help=f"comma-separated, of {', '.join(CONFIGS)} (default: all)",
    )
    parser.add_argument("--fresh", action="store_true", help="forget the runs already measured")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--report-only", action="store_true", help="the tables from runs.csv and stages.csv"
    )
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.rounds, args.out = 2, 2, args.out / "quick"
    for part in parts(args):
        if not args.report_only:
            measure(part)
        for data, table in (("runs.csv", "table.md"), ("stages.csv", "stages.md")):
            text = report(part.out / data)
            atomic_write(part.out / table, lambda f, t=text: f.write(t))
            print(text)


def parts(args: argparse.Namespace) -> list[argparse.Namespace]:
    """What one invocation measures: the slice its options name; with the default options
    (every variant and configuration into ``RESULTS``), that and then the start-up alone
    (``START_UP_SLICE`` into ``START_UP``), so that one command regenerates every published
    table."""
    everything = (
        args.out == RESULTS and args.variants == VARIANTS and args.configs == tuple(CONFIGS)
    )
    if not everything:
        return [args]
    return [args, argparse.Namespace(**{**vars(args), **START_UP_SLICE})]


if __name__ == "__main__":
    main()
