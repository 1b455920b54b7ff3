"""``report.html`` (``flowerbed.report``, ``flowerbed.sweep.report``) and the progress lines of
long steps: a fixture run folder gives every section, the page needs no network and its images
decode; failed, interrupted and old runs get a report too; a real run writes one when it ends,
and an interrupted distillation leaves its epochs, logged one line each; a sweep gets bands of
any history column; a cache build reports its progress."""

from __future__ import annotations

import base64
import io
import json
import logging
import math
import re
import time
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from flowerbed import cli
from flowerbed.core.progress import duration, pace
from flowerbed.core.results import write_json, write_partition_table
from flowerbed.data import array_cache
from flowerbed.evaluation.clinical import clinical_summary, site_estimates
from flowerbed.inprocess import run_in_process
from flowerbed.kd import student as kd_student
from flowerbed.report import PARTITIONS_PNG, REPORT_FILE, write_run_report
from flowerbed.report.plots import partition_figure, pyplot
from flowerbed.report.run_folder import RunFolder
from flowerbed.report.sections import clinical_panels
from flowerbed.runtime import context as run_context
from flowerbed.runtime import trackers
from flowerbed.runtime.history import CLIENT_TABLE_FILE, append_client_table, round_pace
from flowerbed.runtime.outcome import write_status
from flowerbed.sweep import Axis, SweepSpec
from flowerbed.sweep.folder import point_dir, prepare

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """What a report references: section ids, image sources, links, and its text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.ids, self.sources, self.links, self.text = [], [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "h2":
            self.ids.append(attrs.get("id"))
        for name in ("src", "href", "data", "srcset", "action"):
            if attrs.get(name):
                (self.sources if name != "href" else self.links).append(attrs[name])
        if tag in ("script", "link", "iframe", "object", "embed"):
            self.sources.append(f"<{tag}>")

    def handle_data(self, data):
        self.text.append(data)

    @property
    def words(self) -> str:
        return " ".join(" ".join(self.text).split())


def parsed(run_dir: Path) -> Page:
    return Page((run_dir / REPORT_FILE).read_text())


def assert_self_contained(page: Page) -> int:
    """No resource from elsewhere; every image an embedded PNG that decodes. The count."""
    for source in page.sources:
        assert source.startswith("data:image/png;base64,"), source[:80]
    for link in page.links:
        assert not re.match(r"[a-z]+:", link), link  # anchors and relative paths only
    for source in page.sources:
        png = base64.b64decode(source.split(",", 1)[1], validate=True)
        assert png.startswith(PNG_SIGNATURE)
        image = matplotlib.image.imread(io.BytesIO(png), format="png")
        assert image.shape[0] > 100 and image.shape[1] > 100
    return len(page.sources)


def binary_history(rounds: int = 3) -> list[dict]:
    rows = [{"round": 0, "central_accuracy": 0.5, "central_loss": 0.7, "central_auroc": 0.5}]
    for r in range(1, rounds + 1):
        row = {"round": r, "central_accuracy": 0.6 + 0.1 * r, "central_loss": 0.7 - 0.1 * r}
        for where in ("central", "federated"):
            for name in ("balanced_accuracy", "auroc", "sensitivity", "specificity"):
                row[f"{where}_{name}"] = 0.55 + 0.1 * r
            row[f"{where}_auroc_positive"] = row[f"{where}_auroc"]
        row.update(
            train_loss=0.8 - 0.1 * r,
            client_accuracy=0.6,
            client_accuracy_std=0.1,
            client_accuracies={"0": 0.5, "1": 0.7, "2": None},
            clients_trained=3,
        )
        rows.append(row)
    return rows


def run_folder(path: Path, status: str = "completed", **config) -> Path:
    path.mkdir(parents=True)
    write_json(path / "config.json", {"strategy": "fedavg", "dataset": "breast-cancer",
                                      "num-partitions": 3, "num-server-rounds": 3, **config})  # fmt: skip
    write_status(path, status, "" if status == "completed" else f"it {status}")
    write_partition_table(path, np.array([[10, 0], [5, 7], [0, 12]]))
    return path


def every_file(path: Path) -> Path:
    run_folder(path, **{"distill-objective": "vanilla", "strategy": "fedavg"})
    write_json(path / "history.json", binary_history())
    sites = {
        "0": site_estimates([0, 25], [0, 20], math.nan, positive=0),
        "1": site_estimates([12, 14], [9, 12], 0.8, positive=0),
        "2": site_estimates([5, 10], [4, 9], 0.9, positive=0),
    }
    for r in (1, 2, 3):
        append_client_table(path / CLIENT_TABLE_FILE, r, sites)
    (path / "timings.csv").write_text("round,seconds\n0,\n1,1.5\n2,2.5\n3,2.0\n")
    write_json(path / "model_best.json", {"round": 3, "central_auroc": 0.85, "selected_on": "test"})
    write_json(path / "classes.json", {"names": ["malignant", "benign"], "positive": 0,
                                       "positive_name": "malignant", "clinical": True})  # fmt: skip
    labels = np.array([0] * 40 + [1] * 60)
    p_malignant = np.clip(0.7 - 0.4 * labels + np.linspace(-0.25, 0.25, 100), 0.01, 0.99)
    probabilities = np.stack([p_malignant, 1 - p_malignant], axis=1)
    summary = clinical_summary(probabilities, labels, ["malignant", "benign"], 0, resamples=50)
    write_json(path / "clinical.json", {"last": {"round": 3, **summary},
                                        "best": {"round": 2, **summary}})  # fmt: skip
    epochs = [{"generation": 1, "epoch": e, "test_accuracy": 0.5 + 0.1 * e, "test_loss": 1 / e,
               "train_loss": 2 / e, "term_ce": 1 / e, "term_kl": 1 / e} for e in (1, 2, 3)]  # fmt: skip
    write_json(path / "distill_history.json", epochs)
    write_json(
        path / "distill.json",
        {"objective": "vanilla", "mode": "labeled", "label_free": False,
         "teacher": {"model": "mlp", "test_accuracy": 0.8, "parameters": 100},
         "student": {"model": "mlp-small", "test_accuracy": 0.8, "parameters": 25}},
    )  # fmt: skip
    clients = [{"partition_id": i, "query": [1], "acc": 0.8, "acc_pre": 0.6, "query_gain": 0.3,
                "forgetting": -0.01, "uniform_acc": 0.7} for i in range(3)]  # fmt: skip
    write_json(path / "kt_metrics.json", {"summary": {"acc": 0.8}, "clients": clients})
    nodes = [{"partition": i, "task-accuracies": [0.9, 0.5, 0.4]} for i in range(3)]
    write_json(
        path / "ctl_metrics.json",
        {"guests": "best", "rounds": [{"round": r, "all-tasks": 0.6, "own-task": 0.9,
                                       "other-tasks": 0.45, "nodes": nodes} for r in (0, 1)]},
    )  # fmt: skip
    write_json(
        path / "fedsa_selection.json",
        {"selection": "saliency", "teachers": [{"partition": i, "model": "cnn", "foreign": False,
                                                "accuracy": 0.6} for i in range(3)],
         "selections": [{"round": r, "candidates": [0, 1, 2], "probabilities": [0.2, 0.3, 0.5],
                         "selected": {"2": 1, "1": 1}} for r in (1, 2)]},
    )  # fmt: skip
    return path


def test_the_report_of_a_run_folder_holds_every_section_and_needs_no_network(tmp_path):
    run_dir = every_file(tmp_path / "run")
    (run_dir / "run.lock").write_text("held while the report is written, gone after")
    write_run_report(run_dir)
    page = parsed(run_dir)
    sections = ["status", "configuration", "curves", "clinical", "clinical-reading"]
    sections += ["partition", "clients", "distill", "protocol", "protocol-2", "protocol-3"]
    sections += ["files"]
    assert page.ids == sections
    # curves, clinical, ROC and calibration, partition, forest plot, distill, QKT, CTL, FedSA
    assert assert_self_contained(page) == 9
    words = page.words
    assert "model_best.pt: round 3, central_auroc 0.8500" in words
    assert "history.json's central_ columns" in words
    assert "sensitivity (recall of malignant)" in words
    # the clinical reading: n, counts per class, the positive class, the intervals' methods
    assert "n = 100 test samples (malignant: 40, benign: 60)" in words
    assert "Positive class: malignant, the disease" in words
    sensitivity = summary_of(run_dir)["metrics"]["sensitivity"]
    low, high = sensitivity["interval"]
    assert f"{sensitivity['value']:.3f} [{low:.3f}, {high:.3f}]" in words
    assert "percentile bootstrap, 50 resamples, seed 0" in words
    assert "predicted class true class malignant benign malignant" in words
    # each site: site 0 has no malignant case, site 2 too few samples; site 1 is estimable
    assert "not estimable: no malignant" in words
    assert "not estimable: 15 test samples (< 20)" in words
    assert "2 of 3 sites are flagged" in words and "malignant: 12, benign: 14" in words
    assert "Absent" not in words
    assert (run_dir / PARTITIONS_PNG).read_bytes().startswith(PNG_SIGNATURE)
    (run_dir / "run.lock").unlink()  # as the run does once its report is written
    assert listed_files(run_dir) == present_files(run_dir)
    assert "history.json" in listed_files(run_dir) and "partitions.png" in listed_files(run_dir)


def listed_files(run_dir: Path) -> list[str]:
    """The names in the report's file list."""
    files = (run_dir / REPORT_FILE).read_text().split('id="files"')[1]
    return re.findall(r'<td class="text">([^<]+)</td>', files)


def present_files(run_dir: Path) -> list[str]:
    """The run folder's files now, as the file list names them (a folder with its slash), but
    the report itself and hidden ones."""
    return sorted(
        p.name + ("/" if p.is_dir() else "")
        for p in run_dir.iterdir()
        if p.name != REPORT_FILE and not p.name.startswith(".")
    )


def test_a_binary_run_draws_its_auroc_once_named_by_its_positive_class(tmp_path):
    run = RunFolder(every_file(tmp_path / "run"))  # history: auroc and auroc_positive
    labels = [label for _, label in clinical_panels(run)]
    assert [label for label in labels if "AUROC" in label] == ["AUROC of P(malignant)"]


def test_the_clinical_table_by_round_keeps_two_columns_a_metric_under_its_name(tmp_path):
    run_dir = every_file(tmp_path / "run")
    write_run_report(run_dir)
    text = (run_dir / REPORT_FILE).read_text()
    grid = text.split('id="clinical"')[1].split("</table>")[0]
    groups, header = re.findall(r"<tr[^>]*>(.*?)</tr>", grid)[:2]
    assert re.findall(r'<th colspan="2">([^<]+)</th>', groups) == [
        "balanced accuracy",
        "AUROC of P(malignant)",
        "sensitivity (recall of malignant)",
        "specificity (recall of benign)",
    ]
    assert re.findall(r"<th[^>]*>([^<]*)</th>", header) == ["round"] + ["server", "clients"] * 4


@pytest.mark.parametrize("clients, classes", [(1, 2), (3, 2), (100, 2), (10, 10), (40, 100)])
def test_the_partition_heatmap_keeps_its_title_and_labels_inside_the_figure(clients, classes):
    title = "Label counts per client: fedprox-adaptive-clipping on pneumoniamnist, run name"
    title += " sweep-of-the-clipping-norm-point-7 (100 clients)"  # longer than a line
    counts = np.arange(clients * classes).reshape(clients, classes)
    fig = partition_figure(counts, title, ["normal", "pneumonia"] if classes == 2 else None)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    (heading,) = fig.texts  # the title, over the heatmap and its colour bar
    texts = [heading, *(ax.xaxis.label for ax in fig.axes), *(ax.yaxis.label for ax in fig.axes)]
    for text in texts:
        extent = text.get_window_extent(renderer)
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1, text.get_text()
        assert box.y0 <= extent.y0 and extent.y1 <= box.y1, text.get_text()
    lines = heading.get_text().split("\n")
    assert "".join(lines).replace(" ", "") == title.replace(" ", "")  # wrapped, not cut
    assert len(lines) > 1 or classes > 2  # a two-class heatmap is too narrow for one line
    pyplot().close(fig)


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "clinical.json").read_text())["last"]


def test_a_failed_run_gets_a_report_with_its_reason_and_the_end_of_its_traceback(
    fast_run, monkeypatch
):
    monkeypatch.setenv("FLOWERBED_REPORT", "1")
    with pytest.raises(Exception, match="ctl-tasks=5 but"):  # CTL's check, before round 0
        run_in_process({**fast_run, "strategy": "ctl", "ctl-tasks": 5}, 2)
    (run_dir,) = Path(fast_run["output-dir"]).iterdir()
    page = parsed(run_dir)
    assert listed_files(run_dir) == present_files(run_dir)  # not run.lock, removed after
    assert "Status: failed" in page.words and "ctl-tasks=5 but" in page.words
    assert "The end of error.log" in page.words and "ConfigError" in page.words
    assert "Absent: history.json (no round was recorded)" in page.words
    assert "Absent: ctl_metrics.json" in page.words
    assert assert_self_contained(page) == 1  # the partition, known before the failure


def test_an_old_run_folder_lacking_newer_files_gets_the_sections_it_can(tmp_path):
    run_dir = run_folder(tmp_path / "old", status="interrupted")
    (run_dir / "partitions.json").unlink()
    old = ("round", "central_accuracy", "central_loss", "train_loss", "client_accuracies")
    history = [{k: v for k, v in row.items() if k in old} for row in binary_history(2)]
    write_json(run_dir / "history.json", history)
    write_run_report(run_dir)
    page = parsed(run_dir)
    assert "Status: interrupted (stopped by a signal)" in page.words
    assert "Absent: clinical metrics (a run from before they existed)" in page.words
    assert "Absent: partitions.json" in page.words
    assert "distill" not in page.ids  # not asked for: no section
    assert assert_self_contained(page) == 1  # the curves; the clients' accuracies are a table
    assert "carry no test-set counts, so no interval or estimability flag" in page.words


def fail_on_call(function, call: int):
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt("stopped in the test")
        return function(*args, **kwargs)

    return wrapped


def test_a_run_interrupted_in_its_distillation_keeps_its_rounds_epochs_and_a_report(
    fast_run, monkeypatch, caplog
):
    monkeypatch.setenv("FLOWERBED_REPORT", "1")
    logged: list[tuple[int, dict]] = []  # what a tracker receives

    class Recorder:
        def log(self, step, metrics):
            logged.append((step, metrics))

        def close(self, outcome):
            logged.append((-1, {"outcome": outcome}))

    monkeypatch.setattr(
        run_context, "open_trackers", lambda *args: trackers.Trackers({"recorder": Recorder()})
    )
    # the student's evaluation after epoch 3 of 4 is interrupted (SIGINT)
    monkeypatch.setattr(kd_student, "evaluate", fail_on_call(kd_student.evaluate, 3))
    overrides = {**fast_run, "dataset": "breast-cancer", "model": "mlp", "checkpoint": False}
    overrides.update({"distill-objective": "vanilla", "distill-epochs": 4})
    overrides["best-model-metric"] = "auroc"
    with caplog.at_level(logging.INFO, logger="flwr"), pytest.raises(KeyboardInterrupt):
        run_in_process(overrides, 3)
    (run_dir,) = Path(fast_run["output-dir"]).iterdir()
    # the FL rounds' clinical metrics (two classes), central and federated
    rows = json.loads((run_dir / "history.json").read_text())
    for name in ("balanced_accuracy", "auroc", "sensitivity", "specificity", "auroc_positive"):
        assert 0 <= rows[-1][f"central_{name}"] <= 1
        assert 0 <= rows[-1][f"federated_{name}"] <= 1
        assert f"federated_{name}" not in rows[0]  # round 0: no client evaluation
    assert rows[-1]["central_auroc"] == pytest.approx(rows[-1]["central_auroc_positive"])
    best = json.loads((run_dir / "model_best.json").read_text())  # picked on central_auroc
    assert best["round"] == max(rows, key=lambda r: (r["central_auroc"], -r["round"]))["round"]
    assert best["central_auroc"] == max(row["central_auroc"] for row in rows)
    header = (run_dir / "history.csv").read_text().splitlines()[0].split(",")
    assert "central_auroc" in header and "federated_sensitivity" in header
    epochs = json.loads((run_dir / "distill_history.json").read_text())
    assert [row["epoch"] for row in epochs] == [1, 2]
    lines = [r.getMessage() for r in caplog.records if "flowerbed distill" in r.getMessage()]
    assert [line.split(":")[0] for line in lines] == [
        "flowerbed distill epoch 1/4",
        "flowerbed distill epoch 2/4",
    ]
    assert re.search(r"train loss [\d.]+ \(ce [\d.]+, kl [\d.]+\) \| test acc [\d.]+", lines[0])
    assert re.search(
        r"[\d.]+ s/epoch, (under 1 s|about \d+ s|about \d+ min \d\d s) left$", lines[0]
    )
    distilled = [(step, m) for step, m in logged if "distill_test_accuracy" in m]
    assert [step for step, _ in distilled] == [1, 2]
    assert distilled[0][1]["distill_test_accuracy"] == epochs[0]["test_accuracy"]
    assert {"distill_term_ce", "distill_term_kl", "distill_train_loss"} <= set(distilled[1][1])
    assert logged[-1] == (-1, {"outcome": "interrupted"})
    rounds = [r.getMessage() for r in caplog.records if "flowerbed round 1/2" in r.getMessage()]
    assert re.search(
        r"\| [\d.]+ s/round, (under 1 s|about \d+ s|about \d+ min \d\d s) left$", rounds[0]
    )
    page = parsed(run_dir)
    assert "Status: interrupted" in page.words and "stopped in the test" in page.words
    assert {"curves", "clinical", "distill"} <= set(page.ids)
    assert "Absent: distill.json (the distillation did not finish)" in page.words
    # curves, clinical, ROC and calibration, partition, the sites' forest plot, distill
    assert assert_self_contained(page) == 6


def test_the_pace_of_rounds_and_durations_read_as_words():
    rows = [{"round": 0}, {"round": 1, "seconds": 9.0}, {"round": 2, "seconds": 3.0}]
    rows.append({"round": 3, "seconds": 2.0})  # the median, 3 s, not the mean
    assert round_pace(rows, 13) == " | 3.0 s/round, about 30 s left"
    assert round_pace(rows, 3) == " | 3.0 s/round"
    assert round_pace(rows[:1], 2) == ""
    assert [duration(s) for s in (0.3, 4.4, 185, 7620)] == [
        "under 1 s",
        "4 s",
        "3 min 05 s",
        "2 h 07 min",
    ]
    assert pace(0.034, 3, "epoch") == "0.034 s/epoch, under 1 s left"


def test_a_cache_build_reports_its_progress_at_least_every_period(monkeypatch, caplog):
    def build():
        for done in (1, 2, 3):
            array_cache.build_progress(done, 4, "clients")
            time.sleep(0.12)

    with (
        caplog.at_level(logging.INFO, logger="flwr"),
        array_cache._progress_lines("synthetic", every=0.05),
    ):
        build()
    lines = [r.getMessage() for r in caplog.records if "data cache of synthetic" in r.getMessage()]
    assert len(lines) >= 5  # about 0.36 s at a line per 0.05 s, and the closing one
    assert re.search(
        r"[123] of 4 clients \(\d+ %\), (under 1 s|about \d+ s) left for them", lines[-2]
    )
    assert lines[-1].startswith("flowerbed: built the data cache of synthetic in")
    array_cache.build_progress(1, 2, "clients")  # outside a build: nothing, no error


def fake_sweep_run(sweep: Path, point, history: list[dict]) -> Path:
    run_dir = point_dir(sweep, point) / f"20250101-000000-{point.name}"
    run_dir.mkdir(parents=True)
    write_json(run_dir / "history.json", history)
    write_status(run_dir, "completed")
    return run_dir


def test_a_sweep_report_draws_any_history_column_with_mean_and_std(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    spec = SweepSpec(
        (Axis.of_key("strategy", ["fedavg", "fedprox"]), Axis.of_key("seed", [0, 1])), {}, 2
    )
    prepare(sweep, spec)
    a0, a1, b0, _ = spec.points()
    for point, final in ((a0, 0.6), (a1, 0.8), (b0, 0.7)):
        history = [{"round": 0, "central_accuracy": 0.1, "central_auroc": 0.5},
                   {"round": 1, "central_accuracy": final, "central_auroc": final + 0.1}]  # fmt: skip
        fake_sweep_run(sweep, point, history)
        if point is a0:
            assert cli.main(["report", str(point_dir(sweep, point) / next(
                p.name for p in point_dir(sweep, point).iterdir()))]) == 0  # fmt: skip
    assert cli.main(["report", str(sweep), "--metric", "central_auroc"]) == 0
    page = Page((sweep / REPORT_FILE).read_text())
    assert assert_self_contained(page) == 1
    words = page.words
    # fedavg: finals 0.7 and 0.9: mean 0.8, sample std sqrt(2 x 0.01 / 1) = 0.1414
    assert "strategy=fedavg 2/2 0.8000 ± 0.1414" in words
    assert "strategy=fedprox 1/2 0.8000" in words  # one seed completed, one pending
    assert "± -" not in words and "strategy=fedprox 1/2 0.8000 ±" not in words
    assert [link.split("/")[-1] for link in page.links if not link.startswith("#")] == [
        REPORT_FILE
    ]  # the run report of the one point that has one, by a relative path
    assert cli.main(["report", str(sweep), "--metric", "no_such_column"]) == 2
    assert "valid choices: central_accuracy, central_auroc" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path)]) == 2  # neither a run nor a sweep folder
