"""``benchmarks/round_stages.py``'s table of the round less its client training, on hand-made
rows whose values are worked out by hand below."""

import pytest
from test_published_tables import load_benchmark

TRAINING = "client training"


def run_row(variant: str, repeat: int, rounds: dict[int, tuple[float, float]]) -> dict:
    """A row of the study: ``rounds`` maps a round to (its seconds, its clients' training)."""
    row = {"point": f"default/{variant}", "variant": variant, "config": "default", "seed": repeat}
    row["rounds"] = len(rounds)
    for number, (seconds, training) in rounds.items():
        row[f"round/{number}"] = seconds
        row[f"stage/{number}/client/client step/"] = training
        row[f"stage/{number}/client/{TRAINING}/client step"] = training
    return row


@pytest.fixture(scope="module")
def round_stages():
    return load_benchmark("round_stages")


def table_rows(lines: list[str]) -> dict[str, list[str]]:
    """The table's rows of ``default`` by variant label: their cells after the label."""
    rows = {}
    for line in lines:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] == "default":
            rows[cells[1]] = cells[2:]
    return rows


def test_outside_training_pairs_each_variant_with_the_plain_loop_by_repeat(round_stages):
    # Round 1 is left out (it starts the actors); rounds 2 and 3 are averaged per run.
    # Repeat 1: plain rounds 4.0 and 4.2 with 3.9 and 4.1 of training: 0.1 outside, round 4.1.
    #   bare: 5.0 and 5.2 less 4.6 and 4.8: 0.4 outside, +0.3 -> (4.1 + 0.3) / 4.1 = 1.0732.
    #   flwr run: 5.5 and 5.3 less 5.0 and 4.8: 0.5 outside, +0.4 -> 4.5 / 4.1 = 1.0976,
    #   and against the bare app's 4.4: 4.5 / 4.4 = 1.0227.
    # Repeat 2: plain 5.0 and 5.0 less 4.8 and 4.8: 0.2 outside, round 5.0.
    #   bare: 0.5 outside, +0.3 -> 5.3 / 5.0 = 1.06; flwr run: 0.8 outside, +0.6 -> 1.12,
    #   against the bare app 5.6 / 5.3 = 1.0566.
    rows = [
        run_row("plain", 1, {1: (9.0, 1.0), 2: (4.0, 3.9), 3: (4.2, 4.1)}),
        run_row("bare", 1, {1: (9.0, 1.0), 2: (5.0, 4.6), 3: (5.2, 4.8)}),
        run_row("flwr run", 1, {1: (9.0, 1.0), 2: (5.5, 5.0), 3: (5.3, 4.8)}),
        run_row("plain", 2, {1: (9.0, 1.0), 2: (5.0, 4.8), 3: (5.0, 4.8)}),
        run_row("bare", 2, {1: (9.0, 1.0), 2: (5.5, 5.0), 3: (5.5, 5.0)}),
        run_row("flwr run", 2, {1: (9.0, 1.0), 2: (5.8, 5.0), 3: (5.8, 5.0)}),
    ]
    table = table_rows(
        round_stages.outside_training_lines(
            {"default": round_stages.stage_means(rows, "default")[0]}
        )
    )
    labels = round_stages.LABELS
    assert table[labels["plain"]] == ["0.150", "0", "1", ""]
    assert table[labels["bare"]] == [
        "0.450",
        "+0.300 (+0.300 – +0.300)",
        "1.07x (1.06x – 1.07x)",
        "",
    ]
    assert table[labels["flwr run"]] == [
        "0.650",
        "+0.500 (+0.400 – +0.600)",
        "1.11x (1.10x – 1.12x)",
        "1.04x (1.02x – 1.06x)",
    ]
    assert labels["in process"] not in table  # a variant without rows has no line


def test_a_bare_app_without_its_training_timed_has_no_line_and_no_floor(round_stages):
    # rows measured before the bare app timed its clients: no training stage, so no line for
    # it, and flowerbed's ratio to it is left empty rather than made up
    bare = {"point": "default/bare", "variant": "bare", "config": "default", "seed": 1}
    bare |= {"rounds": 2, "round/1": 9.0, "round/2": 5.0}
    rows = [
        run_row("plain", 1, {1: (9.0, 1.0), 2: (4.0, 3.9)}),
        bare,
        run_row("flwr run", 1, {1: (9.0, 1.0), 2: (4.5, 3.9)}),
    ]
    table = table_rows(
        round_stages.outside_training_lines(
            {"default": round_stages.stage_means(rows, "default")[0]}
        )
    )
    assert round_stages.LABELS["bare"] not in table
    assert table[round_stages.LABELS["flwr run"]] == [
        "0.600",
        "+0.500 (+0.500 – +0.500)",
        "1.12x (1.12x – 1.12x)",
        "",
    ]
