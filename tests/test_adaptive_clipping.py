"""Adaptive clipping (flowerbed/privacy/adaptive_clipping.py) against Andrew et al., "Differentially
Private Learning with Adaptive Clipping" (NeurIPS 2021), Algorithm 1: C moves toward the target
quantile of the update norms, the noise is z_update times the C the updates were clipped with,
and the epsilon reported bounds the one spent. The same checks run against Flower 1.42's
classes show the two defects flowerbed replaces them for (C moves away from the quantile; the
noise is scaled by the next round's C)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import numpy as np
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp.mod import adaptiveclipping_mod
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    FedAvg,
)
from scipy import stats

from flowerbed.catalog import parse_run_config
from flowerbed.inprocess import resolve_run_config, run_in_process, use_server_identity
from flowerbed.privacy.adaptive_clipping import (
    KEY_UNCLIPPED,
    AdaptiveClippingClientSide,
    AdaptiveClippingServerSide,
    adaptive_clipping_mod,
)
from flowerbed.privacy.modes import SERVER_FIXED
from flowerbed.privacy.rounds import CLIPPING_NORM, UNCLIPPED_FRACTION
from flowerbed.privacy.server import wrap
from flowerbed.protocols.rounds_hook import Delegating
from flowerbed.strategies.common import flower_kwargs

DELTA = 1e-5
ORDERS = [1 + x / 10 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024]
NORMS = tuple(float(k) for k in range(1, 11))  # ten clients, update norms 1, 2, ..., 10
ETA = 0.2  # Flower's clip_norm_lr, which flowerbed keeps

CLASSES = {
    ("flowerbed", "server"): AdaptiveClippingServerSide,
    ("flowerbed", "client"): AdaptiveClippingClientSide,
    ("flower", "server"): DifferentialPrivacyServerSideAdaptiveClipping,
    ("flower", "client"): DifferentialPrivacyClientSideAdaptiveClipping,
}
MODS = {"flowerbed": adaptive_clipping_mod, "flower": adaptiveclipping_mod}


class Nodes:
    def __init__(self, count: int) -> None:
        self.count = count

    def get_node_ids(self):
        return list(range(100, 100 + self.count))


def fedavg(n: int) -> FedAvg:
    return FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=n)


def unit(dim: int, i: int = 0) -> np.ndarray:
    v = np.zeros(dim, np.float32)
    v[i] = 1.0
    return v


def trained_to(update: np.ndarray):
    """A ClientApp whose reply is the model it received plus ``update``."""

    def call_next(msg: Message, context: Context) -> Message:
        (sent,) = msg.content.array_records.values()
        content = RecordDict(
            {
                "arrays": ArrayRecord({"w": Array(sent["w"].numpy() + update)}),
                "metrics": MetricRecord({"num-examples": 1}),
            }
        )
        return Message(content, reply_to=msg)

    return call_next


def context() -> Context:
    return Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})


def one_round(strategy, side: str, server_round: int, sent: np.ndarray, updates, mod=None):
    """configure_train, the clients (their replies: sent + update; client side: through
    ``mod``), aggregate_train: the aggregate's array."""
    use_server_identity()
    arrays = ArrayRecord({"w": Array(sent)})
    messages = list(
        strategy.configure_train(server_round, arrays, ConfigRecord(), Nodes(len(updates)))
    )
    assert len(messages) == len(updates)
    replies = []
    for message, update in zip(messages, updates, strict=True):
        if side == "client":
            replies.append(mod(message, context(), trained_to(update)))
        else:
            replies.append(trained_to(update)(message, context()))
    aggregated, _ = strategy.aggregate_train(server_round, replies)
    return None if aggregated is None else aggregated["w"].numpy().astype(np.float64)


# --- C moves toward the quantile ----------------------------------------------------------------


def clipping_norms(implementation, side, start, clipped_share, rounds, z=0.0, count_stddev=0.0):
    """C before each round (and after the last) with ten clients whose updates have the norms
    1, ..., 10 every round."""
    strategy = CLASSES[implementation, side](
        fedavg(len(NORMS)),
        z,
        len(NORMS),
        initial_clipping_norm=start,
        target_clipped_quantile=clipped_share,
        clipped_count_stddev=count_stddev,
    )
    dim = len(NORMS)
    sent = np.zeros(dim, np.float32)
    updates = [s * unit(dim, i) for i, s in enumerate(NORMS)]
    norms = [strategy.clipping_norm]
    for r in range(1, rounds + 1):
        one_round(strategy, side, r, sent, updates, MODS[implementation])
        norms.append(strategy.clipping_norm)
    return norms


@pytest.mark.parametrize("side", ["server", "client"])
@pytest.mark.parametrize("start", [0.1, 100.0])
@pytest.mark.parametrize(("clipped_share", "low", "high"), [(0.5, 5.0, 6.0), (0.2, 8.0, 9.0)])
def test_c_converges_to_the_quantile_of_the_update_norms(side, start, clipped_share, low, high):
    """Without noise (z = 0, count noise 0) the update is deterministic: with norms 1..10, a C
    in [k, k+1) leaves b = k/10 of the updates unclipped, and C <- C exp(-0.2 (b - gamma)) stops
    exactly where b = gamma = 1 - dp-clipped-quantile: C in [5, 6) for gamma 0.5 (the median),
    [8, 9) for gamma 0.8. From 100 it falls by at least exp(-0.02) a round until it is there,
    from 0.1 it grows by at least exp(0.02): 120 rounds are enough (about 60 needed)."""
    norms = clipping_norms(("flowerbed"), side, start, clipped_share, 120)
    assert low <= norms[-1] < high
    assert all(low <= c < high for c in norms[-30:])  # and it stays


@pytest.mark.parametrize("side", ["server", "client"])
def test_c_tracks_the_quantile_with_the_noised_count(side):
    """With the count noised (sigma_count 0.5 for 10 clients: b~ has standard deviation 0.05),
    C jitters by about exp(0.2 x 0.05) = 1 % a round around the median interval [5, 6), and is
    pushed back by at least 2 % a round outside it: from either side, after 100 rounds every C
    of the next 100 is within 10 % of [5, 6). (Seeded: the draw is fixed.)"""
    np.random.seed(0)
    for start in (0.1, 100.0):
        norms = clipping_norms("flowerbed", side, start, 0.5, 200, z=0.5, count_stddev=0.5)
        assert all(5.0 / 1.1 <= c <= 6.0 * 1.1 for c in norms[100:]), norms[100:]


@pytest.mark.parametrize("side", ["server", "client"])
def test_flowers_adaptive_clipping_moves_c_away_from_the_quantile(side):
    """Flower 1.42's wrappers feed the *clipped* fraction into the paper's rule for the
    unclipped one: from above the median (nothing clipped) C grows by exp(0.1) a round, from
    below (everything clipped) it shrinks by exp(-0.1): the quantile is a fixed point that
    repels. The reason flowerbed replaces them."""
    above = clipping_norms("flower", side, 100.0, 0.5, 120)
    below = clipping_norms("flower", side, 0.1, 0.5, 120)
    assert above[-1] == pytest.approx(100.0 * math.exp(0.1 * 120), rel=1e-9)
    assert below[-1] == pytest.approx(0.1 * math.exp(-0.1 * 120), rel=1e-9)


# --- the noise ------------------------------------------------------------------------------

D = 20_000  # noise draws per aggregate


def chi_square_band(draws: int, p: float = 1e-6) -> tuple[float, float]:
    """Bounds of sample std / true std for ``draws`` Gaussian draws (two-sided, probability
    ``p`` outside): (draws - 1) s^2 / sigma^2 is chi-square with draws - 1 degrees."""
    low, high = stats.chi2.ppf([p / 2, 1 - p / 2], draws - 1)
    return math.sqrt(low / (draws - 1)), math.sqrt(high / (draws - 1))


@pytest.mark.parametrize("implementation", ["flowerbed", "flower"])
@pytest.mark.parametrize("side", ["server", "client"])
@pytest.mark.parametrize("start", [1.0, 10.0])
def test_the_noise_is_z_update_times_the_c_the_updates_were_clipped_with(
    implementation, side, start
):
    """Ten updates of norm 3, clipped to C = 1 (all clipped: C grows by about exp(0.1)) or to
    C = 10 (none clipped: C shrinks by about exp(-0.1)). The aggregate minus the mean of the
    clipped updates is D = 20,000 Gaussian draws whose sample std must be z_update C_used / n
    within the chi-square band (1e-6 outside, about ±3.4 %). Flower's is z_update C_next / n,
    about 10 % off, outside the band."""
    np.random.seed(1)
    z, n = 0.5, 10
    strategy = CLASSES[implementation, side](
        fedavg(n), z, n, initial_clipping_norm=start, clipped_count_stddev=0.5
    )
    z_update = strategy.noise_multiplier
    assert z**-2 == pytest.approx(z_update**-2 + (2 * 0.5) ** -2)
    aggregate = one_round(
        strategy, side, 1, np.zeros(D, np.float32), [3 * unit(D)] * n, MODS[implementation]
    )
    used, after = start, strategy.clipping_norm
    assert abs(math.log(after / used)) > 0.05  # a round in which C changes
    noise = aggregate - min(3.0, used) * unit(D)
    low, high = chi_square_band(D)
    ratio = noise.std() / (z_update * used / n)
    if implementation == "flowerbed":
        assert low < ratio < high
    else:
        assert not low < ratio < high
        assert noise.std() / (z_update * after / n) == pytest.approx(1, abs=high - 1)


# --- epsilon --------------------------------------------------------------------------------


class Recorder(Delegating):
    """The inner strategy, recording what the DP wrapper hands it (the clipped updates) and its
    mean before the noise."""

    def configure_train(self, server_round, arrays, config, grid):
        self.sent = arrays["w"].numpy().astype(np.float64)
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        self.clipped_norms = [
            float(np.linalg.norm(r.content["arrays"]["w"].numpy() - self.sent)) for r in replies
        ]
        arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        self.mean = arrays["w"].numpy().astype(np.float64)
        return arrays, metrics


def run_config(**overrides):
    return parse_run_config(
        resolve_run_config({k.replace("_", "-"): v for k, v in overrides.items()})
    )


def private_rounds(implementation: str, population: int, sampled: int, z: float, stddev: float):
    run = run_config(
        dp="central-server-adaptive",
        dp_noise_multiplier=z,
        dp_clipped_count_stddev=stddev,
        fraction_train=sampled / population,
    )
    private = wrap(FedAvg(**flower_kwargs(run)), run, {}, num_nodes=population)
    if implementation == "flower":  # the same accounting around Flower's wrapper (mode: only
        # which steps PrivateRounds takes; Flower's wrapper has no round_clipping_norm to log)
        private.plan = dataclasses.replace(private.plan, mode=SERVER_FIXED)
        mine = private.strategy
        private.strategy = DifferentialPrivacyServerSideAdaptiveClipping(
            mine.strategy,
            z,
            sampled,
            initial_clipping_norm=mine.clipping_norm,
            target_clipped_quantile=mine.target_clipped_quantile,
            clipped_count_stddev=stddev,
        )
    recorder = Recorder(private.strategy.strategy)
    private.strategy.strategy = recorder
    return private, recorder


def epsilon_by_hand(multipliers: list[float]) -> float:
    """Rounds of Gaussian mechanisms with multipliers mu_t (noise / sensitivity), no sampling:
    RDP(a) = sum_t a / (2 mu_t^2), converted as dp-accounting does (Canonne, Kamath and
    Steinke's Proposition 12) over its default orders."""
    return min(
        sum(a / (2 * mu**2) for mu in multipliers)
        + math.log1p(-1 / a)
        - math.log(DELTA * a) / (a - 1)
        for a in ORDERS
    )


def epsilon_sampled(multipliers: list[float], population: int, sampled: int) -> float:
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    accountant = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    for mu in multipliers:
        accountant.compose(
            dp_accounting.SampledWithoutReplacementDpEvent(
                population, sampled, dp_accounting.GaussianDpEvent(mu)
            )
        )
    return float(accountant.get_epsilon(DELTA))


@pytest.mark.parametrize("implementation", ["flowerbed", "flower"])
@pytest.mark.parametrize(("population", "sampled"), [(10, 10), (10, 5)])
def test_the_epsilon_reported_bounds_the_epsilon_of_the_noise_applied(
    implementation, population, sampled
):
    """Six rounds in which every update has norm 3 > C (C = 1 at first): flowerbed's C grows,
    Flower's shrinks. Each round's clipping norm C_t is read off the clipped updates the inner
    strategy receives, and the noise's std off the aggregate minus their mean (D draws); the
    largest std the chi-square band allows gives the smallest update multiplier consistent
    with the noise applied, z_t = n std / C_t. With the count's noise sigma_count (sensitivity
    1 under replace-one) the round is one Gaussian mechanism with multiplier mu_t,
    mu_t^-2 = (z_t / 2)^-2 + sigma_count^-2 (sensitivity 2 C_t of the sum), composed by hand
    (n = N) or with dp-accounting's sampled event (n < N). flowerbed's reported epsilon is at
    least that, and equals the same computation at the nominal z_update, which the measured
    stds match. Flower's reports less than the noise it applied allows."""
    z, stddev, rounds = 0.5, 0.5, 6
    private, recorder = private_rounds(implementation, population, sampled, z, stddev)
    z_update = private.strategy.noise_multiplier
    sent = np.zeros(D, np.float32)
    low, high = chi_square_band(D)
    measured, nominal = [], []
    for r in range(1, rounds + 1):
        use_server_identity()
        arrays = ArrayRecord({"w": Array(sent)})
        messages = private.configure_train(r, arrays, ConfigRecord(), Nodes(population))
        replies = [trained_to(3 * unit(D, 1 + i))(m, context()) for i, m in enumerate(messages)]
        aggregated, _ = private.aggregate_train(r, replies)
        noise = aggregated["w"].numpy().astype(np.float64) - recorder.mean
        clip = max(recorder.clipped_norms)
        assert recorder.clipped_norms == pytest.approx([clip] * sampled, rel=1e-5)
        z_measured = sampled * noise.std() * high / clip  # the largest z the draws allow
        measured.append(((z_measured / 2) ** -2 + stddev**-2) ** -0.5)
        nominal.append(((z_update / 2) ** -2 + stddev**-2) ** -0.5)
        if implementation == "flowerbed":
            assert low < sampled * noise.std() / (z_update * clip) < high
    assert nominal[0] == pytest.approx(z / 2, rel=1e-12)  # z is what is accounted
    if sampled == population:
        spent, calibrated = epsilon_by_hand(measured), epsilon_by_hand(nominal)
    else:
        spent = epsilon_sampled(measured, population, sampled)
        calibrated = epsilon_sampled(nominal, population, sampled)
    reported = private.epsilon()
    assert reported == pytest.approx(calibrated, rel=1e-9)
    if implementation == "flowerbed":
        assert reported >= spent
    else:
        assert reported < spent


# --- the history, privacy.json and resume ----------------------------------------------------


def test_the_history_reports_the_c_each_round_clipped_with_and_resume_restores_c_exactly():
    """Strategy level, central-server-adaptive, every update of norm 3: each round's row has
    the C read off the clipped updates (round 0: the initial C) and the noised unclipped
    fraction b~ from which the next C follows, C_{t+1} = C_t exp(-0.2 (b~_t - 0.5));
    privacy.json's lists hold the same; a PrivateRounds restored from state() clips the next
    round with exactly the C the first would have used."""
    n, z, stddev = 4, 0.5, 0.5
    private, recorder = private_rounds("flowerbed", n, n, z, stddev)
    rows = [private.columns()]
    assert rows[0][CLIPPING_NORM] == 1.0 and UNCLIPPED_FRACTION not in rows[0]
    sent = np.zeros(8, np.float32)

    def round_of(rounds, r):
        use_server_identity()
        messages = rounds.configure_train(
            r, ArrayRecord({"w": Array(sent)}), ConfigRecord(), Nodes(n)
        )
        replies = [trained_to(3 * unit(8, i))(m, context()) for i, m in enumerate(messages)]
        rounds.aggregate_train(r, replies)
        return rounds.columns()

    for r in range(1, 4):
        rows.append(round_of(private, r))
        assert rows[r][CLIPPING_NORM] == pytest.approx(recorder.clipped_norms[0], rel=1e-6)
    for before, after in itertools.pairwise(rows[1:]):
        b = before[UNCLIPPED_FRACTION]
        assert after[CLIPPING_NORM] == pytest.approx(
            before[CLIPPING_NORM] * math.exp(-ETA * (b - 0.5)), rel=1e-12
        )
    record = private.record()
    assert record["rounds"] == [1, 2, 3]
    assert record["clipping_norm_per_round"] == [row[CLIPPING_NORM] for row in rows[1:]]
    assert record["unclipped_fraction_per_round"] == [row[UNCLIPPED_FRACTION] for row in rows[1:]]
    assert record["target_unclipped_quantile"] == 0.5 and record["clip_norm_lr"] == ETA
    state = json.loads(json.dumps(private.state()))  # plain data
    resumed, resumed_recorder = private_rounds("flowerbed", n, n, z, stddev)
    resumed.restore(state)
    assert resumed.record()["clipping_norm_per_round"] == record["clipping_norm_per_round"]
    assert resumed.strategy.clipping_norm == private.strategy.clipping_norm  # exactly
    row = round_of(resumed, 4)
    assert row[CLIPPING_NORM] == record["next_clipping_norm"]
    assert resumed_recorder.clipped_norms[0] == pytest.approx(row[CLIPPING_NORM], rel=1e-6)
    assert resumed.record()["rounds"] == [1, 2, 3, 4]


# --- the client mod -------------------------------------------------------------------------


def training(clipping_norm: float, dim: int = 4) -> Message:
    use_server_identity()
    content = RecordDict(
        {
            "arrays": ArrayRecord({"w": Array(np.zeros(dim, np.float32))}),
            "config": ConfigRecord({"server-round": 1, "clipping_norm": clipping_norm}),
        }
    )
    return Message(content, dst_node_id=1, message_type=MessageType.TRAIN)


@pytest.mark.parametrize(("size", "unclipped"), [(0.4, 1), (0.5, 1), (4.0, 0)])
def test_the_client_mod_clips_and_reports_whether_the_update_was_left_unclipped(size, unclipped):
    """flowerbed's mod: b_i = 1[norm <= C] (C = 0.5 here, a norm of exactly C counts as
    unclipped); Flower's adaptiveclipping_mod reports norm_bit = 1 when it clipped."""
    reply = adaptive_clipping_mod(training(0.5), context(), trained_to(size * unit(4)))
    assert not reply.has_error()
    assert reply.content["metrics"][KEY_UNCLIPPED] == unclipped
    norm = np.linalg.norm(reply.content["arrays"]["w"].numpy())
    assert norm == pytest.approx(min(size, 0.5), rel=1e-6)
    flower = adaptiveclipping_mod(training(0.5), context(), trained_to(size * unit(4)))
    assert flower.content["metrics"]["norm_bit"] == int(size > 0.5)


def test_the_client_side_wrapper_refuses_replies_of_flowers_mod():
    """A reply carrying Flower's norm_bit (the clipped sense) and no unclipped bit is refused,
    not read with the opposite sense."""
    strategy = AdaptiveClippingClientSide(fedavg(2), 0.5, 2, clipped_count_stddev=0.5)
    with pytest.raises(AggregationError, match="adaptive_clipping_mod"):
        one_round(
            strategy, "client", 1, np.zeros(4, np.float32), [unit(4)] * 2, adaptiveclipping_mod
        )


# --- a run ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["central-server-adaptive", "central-client-adaptive"])
def test_a_run_records_the_clipping_norm_it_used_each_round(tmp_path, one_thread, mode):
    """Three rounds on breast-cancer, three clients: history.json's dp_clipping_norm is the C
    of each round (round 0 and round 1: the initial C), dp_unclipped_fraction the noised
    fraction from which the next round's C follows, and privacy.json holds the same lists."""
    overrides = {
        "dataset": "breast-cancer",
        "model": "mlp",
        "num-server-rounds": 3,
        "local-epochs": 1,
        "fraction-evaluate": 0.0,
        "output-dir": str(tmp_path / "runs"),
        "dp": mode,
        "dp-noise-multiplier": 0.5,
        "dp-clipped-count-stddev": 0.5,
        "dp-clipping-norm": 0.05,
    }
    run_dir = run_in_process(overrides, num_clients=3)
    rows = json.loads((run_dir / "history.json").read_text())
    norms = [row[CLIPPING_NORM] for row in rows]
    fractions = [row.get(UNCLIPPED_FRACTION) for row in rows]
    assert norms[0] == norms[1] == 0.05 and fractions[0] is None
    for t in (1, 2):
        assert norms[t + 1] == pytest.approx(norms[t] * math.exp(-ETA * (fractions[t] - 0.5)))
    record = json.loads((run_dir / "privacy.json").read_text())
    assert record["clipping_norm_per_round"] == norms[1:]
    assert record["unclipped_fraction_per_round"] == fractions[1:]
    assert record["next_clipping_norm"] == pytest.approx(
        norms[3] * math.exp(-ETA * (fractions[3] - 0.5))
    )
