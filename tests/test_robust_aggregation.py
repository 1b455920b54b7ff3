"""Flower's robust aggregators as flowerbed registers them: Krum, MultiKrum, Bulyan
(``strategies/krum.py``) and FedTrimmedAvg (``strategies/trimmed_mean.py``).

Each rule on hand-built replies against values worked out by hand (with outliers, so that the
choice matters); the keys reach Flower's classes and their bad values are refused; the
requirements that depend on the federation stop a run before any training; each name runs a
tiny in-process federation.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flowerbed.catalog import parse_run_config
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.settings import ConfigError
from flowerbed.strategies import get_strategy
from flowerbed.strategies.common import flower_kwargs
from flowerbed.strategies.krum import clients_per_round
from flowerbed.strategies.trimmed_mean import nothing_trimmed


def build(name: str, **overrides):
    config = parse_run_config(resolve_run_config({"strategy": name, **overrides}))
    return get_strategy(name).build_server(config, **flower_kwargs(config))


def aggregate(fl, strategy, clients: list[dict], num_examples: list[int]) -> dict:
    """``aggregate_train`` on fresh replies (Flower's Bulyan and FedTrimmedAvg empty them)."""
    replies = fl.replies([(c, {"num-examples": n}) for c, n in zip(clients, num_examples)])
    arrays, metrics = strategy.aggregate_train(1, replies)
    assert arrays is not None and metrics is not None
    return fl.arrays_of(arrays)


def krum_scores_by_hand(points: list[list[float]], f: int) -> list[float]:
    """Sum of the squared distances to the n - f - 2 nearest other points."""
    n = len(points)
    scores = []
    for i, p in enumerate(points):
        d = sorted(sum((a - b) ** 2 for a, b in zip(p, q)) for j, q in enumerate(points) if j != i)
        scores.append(sum(d[: n - f - 2]))
    return scores


# Five clients; the model is w (2 values) and b (1 value); client 4 is an outlier in both.
# As points (w0, w1, b): w0 = 0, 1, 1.5, 3, 100; w1 = 0; b = 0 but for the outlier's 50.
KRUM_W0 = [0.0, 1.0, 1.5, 3.0, 100.0]
KRUM_CLIENTS = [
    {"w": np.array([x, 0.0], np.float32), "b": np.array([50.0 if x == 100 else 0.0], np.float32)}
    for x in KRUM_W0
]
KRUM_EXAMPLES = [10, 20, 30, 40, 50]


def test_krum_scores_by_hand():
    # f = 1, n = 5: each score sums the 2 nearest squared distances
    # 0: 1 + 2.25; 1: 0.25 + 1; 1.5: 0.25 + 2.25; 3: 2.25 + 4; outlier: 97^2 + 98.5^2 + 2 * 50^2
    points = [[x, 0.0, 50.0 if x == 100 else 0.0] for x in KRUM_W0]
    expected = [3.25, 1.25, 2.5, 6.25, 97.0**2 + 98.5**2 + 2 * 50.0**2]
    assert krum_scores_by_hand(points, f=1) == pytest.approx(expected)


def test_krum_keeps_the_model_of_lowest_score(fl):
    krum = build("krum", **{"num-malicious-clients": 1})
    out = aggregate(fl, krum, KRUM_CLIENTS, KRUM_EXAMPLES)
    # lowest score 1.25: client 1, as it is (the FedAvg value would be pulled to w0 = 52.2)
    np.testing.assert_array_equal(out["w"], [1.0, 0.0])
    np.testing.assert_array_equal(out["b"], [0.0])


def test_multikrum_averages_the_m_lowest_scores_weighted_by_num_examples(fl):
    multikrum = build("multikrum", **{"num-malicious-clients": 1, "multikrum-selected": 3})
    out = aggregate(fl, multikrum, KRUM_CLIENTS, KRUM_EXAMPLES)
    # scores 1.25, 2.5, 3.25: clients 1, 2, 0 with 20, 30, 10 examples (Flower weighs by
    # num-examples; the paper's mean is uniform: 2.5 / 3)
    np.testing.assert_allclose(out["w"], [(20 * 1.0 + 30 * 1.5 + 10 * 0.0) / 60, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(out["b"], [0.0])


# Seven clients, f = 1: theta = 7 - 2 = 5 selected by Krum scores (4 nearest), beta = 5 - 2 = 3
# values per coordinate. Client 5 is off in w0, client 6 in w1.
BULYAN_POINTS = [
    [0.0, 0.1],
    [1.0, 0.0],
    [0.2, 1.0],
    [0.9, 0.8],
    [0.5, 0.3],
    [10.0, 0.0],
    [0.0, -20.0],
]


def bulyan_by_hand(points: list[list[float]], f: int) -> list[float]:
    """The theta lowest Krum scores, then per coordinate the mean of the beta values nearest
    the median of the selected ones."""
    theta = len(points) - 2 * f
    beta = theta - 2 * f
    scores = krum_scores_by_hand(points, f)
    selected = sorted(range(len(points)), key=lambda i: scores[i])[:theta]
    out = []
    for c in range(len(points[0])):
        values = sorted(points[i][c] for i in selected)
        median = values[len(values) // 2]
        out.append(sum(sorted(values, key=lambda v: abs(v - median))[:beta]) / beta)
    return out


def test_bulyan_selects_by_krum_scores_then_averages_around_the_median(fl):
    # selected: clients 0-4. w0: 0, 1, 0.2, 0.9, 0.5, median 0.5, nearest 0.5, 0.2, 0.9;
    # w1: 0.1, 0, 1, 0.8, 0.3, median 0.3, nearest 0.3, 0.1, 0
    expected = [(0.5 + 0.2 + 0.9) / 3, (0.3 + 0.1 + 0.0) / 3]
    assert bulyan_by_hand(BULYAN_POINTS, f=1) == pytest.approx(expected)
    bulyan = build("bulyan", **{"num-malicious-clients": 1})
    clients = [{"w": np.array(p, np.float32)} for p in BULYAN_POINTS]
    # uniform: the num-examples do not weigh it
    out = aggregate(fl, bulyan, clients, [1, 1, 1, 1, 1000, 1, 1])
    np.testing.assert_allclose(out["w"], expected, rtol=1e-6)


def test_bulyan_skips_a_round_with_fewer_than_4f_plus_3_replies(fl):
    bulyan = build("bulyan", **{"num-malicious-clients": 1})
    replies = fl.replies(
        [({"w": np.array(p, np.float32)}, {"num-examples": 1}) for p in [[0.0]] * 6]
    )
    assert bulyan.aggregate_train(1, replies) == (None, None)


def test_trimmed_mean_drops_the_extremes_per_coordinate_unweighted(fl):
    trimmed = build("trimmedavg", **{"trim-fraction": 0.2})
    # per coordinate: w0 = 1, 2, 3, 4, 100; w1 = 3, -50, 2, 0, 1; int(0.2 * 5) = 1 each side
    columns = [[1.0, 2.0, 3.0, 4.0, 100.0], [3.0, -50.0, 2.0, 0.0, 1.0]]
    clients = [{"w": np.array(v, np.float32)} for v in zip(*columns)]
    out = aggregate(fl, trimmed, clients, [1, 1000, 1, 1, 1])
    np.testing.assert_allclose(out["w"], [(2 + 3 + 4) / 3, (0 + 1 + 2) / 3], rtol=1e-6)
    # the default 0.25 on 4 replies: int(1.0) = 1 each side, the mean of the middle two
    four = [{"w": np.array([v], np.float32)} for v in (7.0, -9.0, 1.0, 2.0)]
    out = aggregate(fl, build("trimmedavg"), four, [1, 1, 1, 1])
    np.testing.assert_allclose(out["w"], [1.5])


def test_keys_reach_flowers_strategies():
    assert build("krum", **{"num-malicious-clients": 2}).num_malicious_nodes == 2
    assert build("krum").num_nodes_to_select == 1
    multikrum = build("multikrum", **{"num-malicious-clients": 1, "multikrum-selected": 4})
    assert (multikrum.num_malicious_nodes, multikrum.num_nodes_to_select) == (1, 4)
    assert build("multikrum").num_nodes_to_select == 2
    assert build("bulyan", **{"num-malicious-clients": 3}).num_malicious_nodes == 3
    assert build("bulyan").num_malicious_nodes == 0
    assert build("trimmedavg").beta == 0.25
    assert build("trimmedavg", **{"trim-fraction": 0.1}).beta == 0.1


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num-malicious-clients": -1}, "num-malicious-clients must be at least 0, got -1"),
        ({"num-malicious-clients": 1.5}, "num-malicious-clients=1.5 is not a valid int"),
        ({"multikrum-selected": 0}, "multikrum-selected must be at least 1, got 0"),
        ({"trim-fraction": 0.5}, r"trim-fraction must be in \[0, 0.5\), got 0.5"),
        ({"trim-fraction": -0.1}, r"trim-fraction must be in \[0, 0.5\), got -0.1"),
        ({"trim-fraction": math.nan}, r"trim-fraction must be a finite number in \[0, 0.5\)"),
    ],
)
def test_bad_values_are_rejected(overrides, message):
    with pytest.raises(ConfigError, match=message):
        parse_run_config(resolve_run_config(overrides))


def check(name: str, num_clients: int, **overrides) -> str | None:
    config = parse_run_config(resolve_run_config({"strategy": name, **overrides}))
    return get_strategy(name).check_federation(config, num_clients)


def test_clients_per_round_is_flowers_sample_size():
    def n(fraction: float, clients: int) -> int:
        config = parse_run_config(resolve_run_config({"fraction-train": fraction}))
        return clients_per_round(config, clients)

    # Flower: max(int(N * fraction-train), min_train_nodes = 1), truncated (not rounded)
    assert [n(1.0, 10), n(0.35, 10), n(0.39, 10), n(0.7, 10), n(0.01, 10)] == [10, 3, 3, 7, 1]


BULYAN_F2_ON_10 = (
    "strategy='bulyan' with num-malicious-clients=2 needs at least 4f + 3 = 11 sampled clients"
    " per round, and fraction-train=1.0 of 10 clients samples 10 per round: set"
    " num-malicious-clients to at most 1, or sample at least 11 clients (more clients or a"
    " larger fraction-train)"
)


SAMPLES = "fraction-train=1.0 of {} clients samples {} per round"
MORE = "(more clients or a larger fraction-train)"


@pytest.mark.parametrize(
    "name, clients, overrides, message",
    [
        ("bulyan", 10, {"num-malicious-clients": 2}, BULYAN_F2_ON_10),
        (
            "krum",
            4,
            {"num-malicious-clients": 1},
            (
                "strategy='krum' with num-malicious-clients=1 needs at least 2f + 3 = 5 sampled"
                f" clients per round, and {SAMPLES.format(4, 4)}: set num-malicious-clients to at"
                f" most 0, or sample at least 5 clients {MORE}"
            ),
        ),
        (
            "krum",
            2,
            {},
            (
                "strategy='krum' with num-malicious-clients=0 needs at least 2f + 3 = 3 sampled"
                f" clients per round, and {SAMPLES.format(2, 2)}: sample at least 3 clients {MORE}"
            ),
        ),
        (  # fraction-train=0.65 of 10: int(6.5) = 6 sampled, 2f + 3 = 7 needed
            "multikrum",
            10,
            {"num-malicious-clients": 2, "fraction-train": 0.65},
            (
                "strategy='multikrum' with num-malicious-clients=2 needs at least 2f + 3 = 7"
                " sampled clients per round, and fraction-train=0.65 of 10 clients samples 6 per"
                " round: set num-malicious-clients to at most 1, or sample at least 7 clients"
                f" {MORE}"
            ),
        ),
        (
            "multikrum",
            10,
            {"num-malicious-clients": 2, "multikrum-selected": 9},
            (
                "strategy='multikrum' with multikrum-selected=9 and num-malicious-clients=2"
                " averages more models than the n - f = 8 honest ones"
                f" ({SAMPLES.format(10, 10)}): set multikrum-selected to at most 8"
            ),
        ),
    ],
)
def test_federation_checks_refuse_what_cannot_work(name, clients, overrides, message):
    assert check(name, clients, **overrides) == message


@pytest.mark.parametrize(
    "name, clients, overrides",
    [
        ("bulyan", 11, {"num-malicious-clients": 2}),
        ("bulyan", 3, {}),
        ("krum", 5, {"num-malicious-clients": 1}),
        ("krum", 3, {}),
        ("multikrum", 10, {"num-malicious-clients": 2, "multikrum-selected": 8}),
        ("multikrum", 10, {"num-malicious-clients": 1, "fraction-train": 0.5}),
        ("trimmedavg", 4, {}),
        ("trimmedavg", 2, {"trim-fraction": 0.0}),
        ("trimmedavg", 3, {"trim-fraction": 0.334}),
    ],
)
def test_federation_checks_accept_what_works(name, clients, overrides):
    assert check(name, clients, **overrides) is None


def test_a_refused_federation_stops_the_run_before_any_training(tmp_path):
    overrides = {
        "strategy": "bulyan",
        "num-malicious-clients": 2,
        "model": "mlp",
        "output-dir": str(tmp_path),
    }
    with pytest.raises(ConfigError) as refused:
        run_in_process(overrides, 10)
    assert str(refused.value) == BULYAN_F2_ON_10
    assert not list(tmp_path.rglob("history.json"))


@pytest.mark.parametrize(
    "name, clients, overrides",
    [
        ("krum", 5, {"num-malicious-clients": 1}),
        ("multikrum", 5, {"num-malicious-clients": 1, "multikrum-selected": 2}),
        ("bulyan", 7, {"num-malicious-clients": 1}),
        ("trimmedavg", 5, {"trim-fraction": 0.2}),
    ],
)
def test_each_robust_strategy_runs_a_round(name, clients, overrides, tmp_path):
    run_dir = run_in_process(
        {
            "strategy": name,
            **overrides,
            "output-dir": str(tmp_path),
            "num-server-rounds": 1,
            "local-epochs": 1,
            "model": "mlp",
        },
        clients,
    )
    rows = {row["round"]: row for row in json.loads((run_dir / "history.json").read_text())}
    assert rows[1]["clients_trained"] == clients and rows[1]["clients_failed"] == 0
    assert 0.0 <= rows[1]["central_accuracy"] <= 1.0


@pytest.mark.parametrize(
    "name, clients, overrides, message",
    [
        (
            "trimmedavg",
            4,
            {"trim-fraction": 0.2},
            (
                "strategy='trimmedavg' with trim-fraction=0.2 trims int(0.2 * 4) = 0 values each"
                f" side ({SAMPLES.format(4, 4)}), an unweighted mean: set trim-fraction in"
                " [0.25, 0.5), or 0"
            ),
        ),
        (
            "trimmedavg",
            7,
            {"trim-fraction": 0.1},
            (
                "strategy='trimmedavg' with trim-fraction=0.1 trims int(0.1 * 7) = 0 values each"
                f" side ({SAMPLES.format(7, 7)}), an unweighted mean: set trim-fraction in"
                " [0.143, 0.5), or 0"
            ),
        ),
        (
            "trimmedavg",
            2,
            {},
            (
                "strategy='trimmedavg' with trim-fraction=0.25 trims int(0.25 * 2) = 0 values each"
                f" side ({SAMPLES.format(2, 2)}), an unweighted mean: set trim-fraction=0 or sample"
                " at least 3 clients"
            ),
        ),
    ],
)
def test_a_trimmed_mean_that_trims_nothing_is_named_in_a_warning(name, clients, overrides, message):
    """Not refused (``trimmedavg`` runs from its name on any federation), but said."""
    config = parse_run_config(resolve_run_config({"strategy": name, **overrides}))
    assert nothing_trimmed(config, clients) == message
    assert check(name, clients, **overrides) is None
