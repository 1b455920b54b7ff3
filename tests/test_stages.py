"""Stage timers (``core.stages``): nothing written when off; one JSON line per stage when on,
nested stages inheriting round and side; and a run that writes every stage of every round."""

import json
import os

import pytest

from flowerbed.core import stages
from flowerbed.core.stages import CLIENT, SERVER, stage
from flowerbed.inprocess import run_in_process


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(stages.ENV, raising=False)
    with stage("anything", 1, CLIENT):
        stages.record("other", 0.5, 1)
    assert list(tmp_path.iterdir()) == []


def test_on_writes_one_line_per_stage_with_its_fields(tmp_path, monkeypatch):
    target = tmp_path / "stages.jsonl"
    monkeypatch.setenv(stages.ENV, str(target))
    with stage("outer", 3, CLIENT), stage("inner"):
        pass
    with stage("alone"):
        pass
    with pytest.raises(ValueError), stage("failed", 4):  # an interrupted stage is not timed
        raise ValueError
    inner, outer, alone = lines(target)
    assert inner == {
        "stage": "inner",
        "seconds": inner["seconds"],
        "round": 3,
        "pid": os.getpid(),
        "side": CLIENT,
        "within": "outer",
    }
    assert outer["stage"] == "outer" and outer["within"] is None and outer["round"] == 3
    assert 0 <= inner["seconds"] <= outer["seconds"]
    assert alone["side"] == SERVER and alone["round"] is None and alone["within"] is None


def test_a_run_writes_every_stage_of_every_round(tmp_path, monkeypatch, fast_run, one_thread):
    target = tmp_path / "stages.jsonl"
    monkeypatch.setenv(stages.ENV, str(target))
    run_in_process({**fast_run, "fraction-evaluate": 1.0}, num_clients=2)
    written = lines(target)
    for server_round in (1, 2):
        seen = {(r["side"], r["stage"]) for r in written if r["round"] == server_round}
        expected = {(SERVER, name) for name in (stages.ROUND, *stages.SERVER_STAGES)}
        expected |= {(CLIENT, name) for name in stages.CLIENT_STAGES}
        expected |= {(SERVER, stages.CLINICAL_METRICS), (CLIENT, stages.CLINICAL_METRICS)}
        missing = expected - seen
        # the best model is saved only in the rounds that improve on it
        assert missing <= {(SERVER, stages.BEST_MODEL)}, missing
        (round_line,) = [r for r in written if r["round"] == server_round and r["stage"] == "round"]
        top = [r for r in written if r["round"] == server_round and r["within"] is None]
        covered = sum(r["seconds"] for r in top if r["stage"] != stages.ROUND)
        assert 0 < covered <= round_line["seconds"]
    trained = [r for r in written if r["stage"] == stages.CLIENT_TRAINING]
    assert len(trained) == 4 and {r["within"] for r in trained} == {stages.CLIENT_STEP}
