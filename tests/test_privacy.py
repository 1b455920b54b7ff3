"""Differential privacy (flowerbed/privacy/): the epsilon reported against a hand computation,
the noise and clipping Flower's wrappers and mods apply against what the accounting assumes,
the budget, the sampling, resume, and what composes. Bad values: tests/test_bad_inputs.py;
adaptive clipping against Andrew et al.: tests/test_adaptive_clipping.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

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
from flwr.serverapp.strategy import FedAvg

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.inprocess import resolve_run_config, run_in_process, use_server_identity
from flowerbed.privacy.accounting import central_epsilon, local_epsilon
from flowerbed.privacy.client import privacy_mod
from flowerbed.privacy.modes import check_run_config
from flowerbed.privacy.rounds import STATE_KEY
from flowerbed.privacy.server import averages_models, wrap
from flowerbed.protocols.rounds_strategy import RoundsStrategy
from flowerbed.runtime.checkpoint import read_checkpoint
from flowerbed.runtime.client_state import RECORD, RUN_DIR_KEY
from flowerbed.runtime.recording_grid import RecordingGrid
from flowerbed.settings import ConfigError
from flowerbed.strategies.common import flower_kwargs

DELTA = 1e-5
# dp-accounting's default Renyi orders (rdp_privacy_accountant.DEFAULT_RDP_ORDERS), written out
ORDERS = [1 + x / 10 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024]


def config(**overrides):
    return parse_run_config(
        resolve_run_config({k.replace("_", "-"): v for k, v in overrides.items()})
    )


# --- the accounting ---------------------------------------------------------------------------


def test_epsilon_without_sampling_is_t_compositions_of_the_gaussian_mechanism():
    """T rounds, every client every round: T Gaussian mechanisms of sensitivity 2C (replace-one)
    and noise zC, i.e. multiplier z/2, RDP(a) = T a / (2 (z/2)^2). dp-accounting converts with
    Canonne, Kamath and Steinke's bound, the classic one RDP(a) + log(1/delta)/(a-1) minus
    log(a)/(a-1) - log(1 - 1/a) > 0 at each order: equal to the first, below the second."""
    z, rounds = 1.5, 7
    rdp = [rounds * a / (2 * (z / 2) ** 2) for a in ORDERS]
    classic = min(r + math.log(1 / DELTA) / (a - 1) for r, a in zip(rdp, ORDERS))
    tighter = min(
        r + math.log1p(-1 / a) - math.log(DELTA * a) / (a - 1) for r, a in zip(rdp, ORDERS)
    )
    epsilon = central_epsilon(z, rounds, 10, 10, DELTA)
    assert epsilon == pytest.approx(tighter, rel=1e-9)
    assert epsilon < classic < 1.1 * epsilon  # the classic conversion: 5 % looser here
    # local DP: one client's T releases are the same mechanism
    assert local_epsilon(z, rounds, DELTA) == pytest.approx(epsilon, rel=1e-12)
    assert central_epsilon(z, 0, 10, 10, DELTA) == 0.0


def test_sampling_without_replacement_amplifies_and_composition_adds():
    one_round = central_epsilon(1.0, 1, 5, 10, DELTA)
    assert 0 < one_round < central_epsilon(1.0, 1, 10, 10, DELTA)
    assert one_round < central_epsilon(1.0, 2, 5, 10, DELTA)


def test_adaptive_clipping_splits_the_accounted_noise_as_andrew_et_al():
    """flowerbed's adaptive wrapper (Flower's subclassed, tests/test_adaptive_clipping.py) gets
    the z that is accounted and noises the update with z_update,
    z^-2 = z_update^-2 + (2 sigma_count)^-2: the pair is as private as z."""
    run = config(dp="central-server-adaptive", dp_noise_multiplier=0.5)
    strategy = FedAvg(**flower_kwargs(run))
    private = wrap(strategy, run, {}, num_nodes=10)
    flower = private.strategy
    assert flower.clipped_count_stddev == pytest.approx(10 / 20)  # Flower's default, n/20
    assert 0.5**-2 == pytest.approx(flower.noise_multiplier**-2 + (2 * 0.5) ** -2)
    assert private.plan.noise_multiplier == 0.5 and flower.noise_multiplier > 0.5


# --- the noise and clipping against the accounting's assumptions ------------------------------

D = 40_000  # entries per block: the sample standard deviation is within about 0.4 %


def directions(count: int) -> list[np.ndarray]:
    """Unit vectors on disjoint blocks of one long float32 array."""
    out = []
    for i in range(count):
        v = np.zeros(count * D, dtype=np.float32)
        v[i * D : (i + 1) * D] = 1 / math.sqrt(D)
        out.append(v)
    return out


def test_central_dp_noises_the_unweighted_mean_of_clipped_updates(fl):
    """Server-side fixed clipping: four clients with updates of norm 10, 0.5, 3 and 0.2 and
    unequal num-examples. The aggregate minus the unweighted mean of the updates clipped to C
    is Gaussian noise of standard deviation z C / n, and no direction keeps a client's weight
    or its unclipped size. Two aggregations from the same NumPy seed draw different noise."""
    z, clip, n = 0.2, 1.0, 4
    run = config(dp="central-server-fixed", dp_noise_multiplier=z, dp_clipping_norm=clip)
    private = wrap(FedAvg(**flower_kwargs(run)), run, {}, num_nodes=n)
    v = directions(n)
    sizes, counts = (10.0, 0.5, 3.0, 0.2), (1, 100, 5, 50)
    expected = sum(min(s, clip) * u for s, u in zip(sizes, v)) / n
    noises = []
    for _ in range(2):
        np.random.seed(0)
        fl.configure(private, {"w": np.zeros(n * D, np.float32)}, n)
        clients = [({"w": s * u}, {"num-examples": c}) for s, u, c in zip(sizes, v, counts)]
        arrays, _ = private.aggregate_train(1, fl.replies(clients))
        noises.append(arrays["w"].numpy().astype(np.float64) - expected)
    noise = noises[0]
    assert noise.std() == pytest.approx(z * clip / n, rel=0.02)
    for u in v:  # 5 standard deviations of the noise's projection
        assert abs(noise @ u) < 5 * z * clip / n
    assert not np.allclose(noises[0], noises[1])  # not a function of NumPy's seed


def test_a_client_whose_update_is_exactly_zero_does_not_stop_the_round(fl):
    """Flower's clipping divides by the update's norm: a reply equal to the model sent gets
    one ulp (``avoid_zero_update``), and the round aggregates."""
    run = config(dp="central-server-fixed", dp_noise_multiplier=0.1)
    private = wrap(FedAvg(**flower_kwargs(run)), run, {}, num_nodes=2)
    sent = {"w": np.full(4, 0.5, np.float32)}
    fl.configure(private, sent, 2)
    moved = {"w": sent["w"] + 0.1}
    replies = fl.replies([(sent, {"num-examples": 3}), (moved, {"num-examples": 3})])
    arrays, _ = private.aggregate_train(1, replies)
    assert arrays is not None and np.all(np.isfinite(arrays["w"].numpy()))
    zero = replies[0].content["arrays"]["w"].numpy() - sent["w"]
    assert 0 < np.abs(zero).sum() < 1e-6


def client_context(**overrides) -> Context:
    return Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": 0, "num-partitions": 1},
        state=RecordDict(),
        run_config=resolve_run_config(overrides),
    )


def training(sent: np.ndarray, clipping_norm: float | None = None) -> Message:
    use_server_identity()
    config = ConfigRecord({"server-round": 1})
    if clipping_norm is not None:  # what Flower's client-side wrappers add
        config["clipping_norm"] = clipping_norm
    content = RecordDict({"arrays": ArrayRecord({"w": Array(sent)}), "config": config})
    content[RECORD] = ConfigRecord({RUN_DIR_KEY: "/nowhere"})  # flowerbed's bookkeeping
    return Message(content, dst_node_id=1, message_type=MessageType.TRAIN)


def trained_to(update: np.ndarray):
    def call_next(msg: Message, context: Context) -> Message:
        sent = msg.content["arrays"]["w"].numpy()
        content = RecordDict(
            {
                "arrays": ArrayRecord({"w": Array(sent + update)}),
                "metrics": MetricRecord({"num-examples": 10}),
            }
        )
        return Message(content, reply_to=msg)

    return call_next


def test_local_dp_clips_each_update_to_c_and_adds_noise_of_z_c_from_fresh_entropy():
    z, clip = 0.5, 2.0
    context = client_context(**{"dp": "local", "dp-noise-multiplier": z, "dp-clipping-norm": clip})
    (u,) = directions(1)
    sent = np.full(D, 3.0, dtype=np.float32)
    noises = []
    for _ in range(2):
        np.random.seed(0)
        reply = privacy_mod(training(sent), context, trained_to(7 * u))
        after = np.random.rand()
        noises.append(reply.content["arrays"]["w"].numpy() - sent - clip * u)
        np.random.seed(0)
        assert after == np.random.rand()  # NumPy's global state is as the mod found it
    assert noises[0].std() == pytest.approx(z * clip, rel=0.02)
    assert abs(noises[0] @ u) < 5 * z * clip
    assert not np.allclose(noises[0], noises[1])


def test_client_side_clipping_runs_despite_the_bookkeeping_record_and_none_passes_through():
    (u,) = directions(1)
    sent = np.zeros(D, dtype=np.float32)
    context = client_context(dp="central-client-fixed")
    reply = privacy_mod(training(sent, clipping_norm=0.5), context, trained_to(4 * u))
    assert not reply.has_error()
    update = reply.content["arrays"]["w"].numpy() - sent
    assert np.linalg.norm(update) == pytest.approx(0.5, rel=1e-5)
    message = training(sent)
    untouched = trained_to(4 * u)(message, context)
    passed = privacy_mod(message, client_context(), lambda m, c: untouched)
    assert passed is untouched and RECORD in message.content


# --- runs -------------------------------------------------------------------------------------


def run_config(tmp_path: Path, **overrides) -> dict:
    return {  # the smallest bundled data set: each run takes a second or two
        "dataset": "breast-cancer",
        "model": "mlp",
        "num-server-rounds": 3,
        "local-epochs": 1,
        "fraction-evaluate": 0.0,
        "output-dir": str(tmp_path / "runs"),
        **{k.replace("_", "-"): v for k, v in overrides.items()},
    }


def history(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "history.json").read_text())


def test_the_budget_stops_the_run_cleanly_before_the_round_that_would_exceed_it(
    tmp_path, one_thread
):
    z = 4.0
    budget = (central_epsilon(z, 2, 2, 2, DELTA) + central_epsilon(z, 3, 2, 2, DELTA)) / 2
    overrides = run_config(
        tmp_path,
        dp="central-server-fixed",
        dp_noise_multiplier=z,
        dp_epsilon_budget=budget,
        dp_clipping_norm=0.01,  # noise of standard deviation 0.02: the model stays finite
    )
    run_dir = run_in_process({**overrides, "num-server-rounds": 5}, num_clients=2)
    rows = history(run_dir)
    assert [row["round"] for row in rows] == [0, 1, 2]
    assert [row["dp_epsilon"] for row in rows] == pytest.approx(
        [central_epsilon(z, r, 2, 2, DELTA) for r in range(3)]
    )
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "completed"
    assert status["reason"].startswith("privacy budget: stopped before round 3")
    record = json.loads((run_dir / "privacy.json").read_text())
    assert record["stopped"].startswith("privacy budget: stopped before round 3")
    assert record["releases"] == 2 and (run_dir / "model.pt").is_file()
    assert "dp_epsilon" in (run_dir / "history.csv").read_text().splitlines()[0]


def test_local_dp_reports_the_worst_clients_releases(tmp_path, one_thread):
    """Half the clients a round: each row's epsilon is that of the client sampled most often."""
    trained: list[tuple[int, int]] = []  # (round, partition)

    def recording_app(msg: Message, context: Context) -> Message:
        if msg.metadata.message_type == MessageType.TRAIN:
            server_round = int(msg.content["config"]["server-round"])
            trained.append((server_round, int(context.node_config["partition-id"])))
        return client_app(msg, context)

    z = 8.0
    overrides = run_config(
        tmp_path, dp="local", dp_noise_multiplier=z, dp_clipping_norm=0.001, fraction_train=0.5
    )
    run_dir = run_in_process(overrides, num_clients=4, app=recording_app)
    worst = [
        max([sum(1 for r, p in trained if r <= t and p == q) for q in range(4)]) for t in range(4)
    ]
    assert [row["dp_epsilon"] for row in history(run_dir)] == pytest.approx(
        [local_epsilon(z, k, DELTA) for k in worst]
    )
    assert json.loads((run_dir / "privacy.json").read_text())["releases"] == worst[-1]


def test_central_dp_samples_clients_from_entropy_and_accounts_for_the_sampling(fl):
    """Seeded sampling (RoundsStrategy) repeats its draws; with central DP the draw is secret,
    so two runs of the same seed differ, and epsilon is that of n of N without replacement."""

    class Nodes:
        def get_node_ids(self):
            return list(range(100, 110))

    def draws(strategy) -> list[frozenset[int]]:
        grid = RecordingGrid(Nodes())
        grid.partition_of = {node: node - 100 for node in range(100, 110)}
        rounds = RoundsStrategy(strategy, seed=0)
        arrays = ArrayRecord({"w": Array(np.zeros(3, np.float32))})
        return [
            frozenset(
                m.metadata.dst_node_id
                for m in rounds.configure_train(r, arrays, ConfigRecord(), grid)
            )
            for r in range(1, 6)
        ]

    run = config(dp="central-server-fixed", fraction_train=0.5)
    assert draws(FedAvg(**flower_kwargs(run))) == draws(FedAvg(**flower_kwargs(run)))
    private = [wrap(FedAvg(**flower_kwargs(run)), run, {}, num_nodes=10) for _ in range(2)]
    first, second = draws(private[0]), draws(private[1])
    assert first != second and all(len(s) == 5 for s in first)
    assert private[0].epsilon() == pytest.approx(central_epsilon(1.0, 5, 5, 10, DELTA))


def test_a_resumed_private_run_goes_on_with_its_accounting(tmp_path, one_thread):
    """Interrupted in round 3 of 4 (adaptive clipping, whose norm is state): the checkpoint
    holds two releases and the norm round 3 is to clip with (round 2's, moved by round 2's
    noised unclipped fraction); the resumed run's epsilon goes on from there, and its round 3
    clips with exactly that norm."""
    z = 0.4
    overrides = run_config(
        tmp_path,
        dp="central-server-adaptive",
        dp_noise_multiplier=z,
        dp_clipped_count_stddev=0.5,
        num_server_rounds=4,
    )

    def interrupted_in_round_3(msg: Message, context: Context) -> Message:
        if (
            msg.metadata.message_type == MessageType.TRAIN
            and msg.content["config"]["server-round"] == 3
        ):
            raise KeyboardInterrupt
        return client_app(msg, context)

    with pytest.raises(KeyboardInterrupt):
        run_in_process(overrides, num_clients=3, app=interrupted_in_round_3)
    (run_dir,) = Path(overrides["output-dir"]).iterdir()
    checkpoint = read_checkpoint(run_dir)
    state = checkpoint.strategy[STATE_KEY]
    assert checkpoint.round == 2 and state["releases"] == 2
    round_2 = history(run_dir)[2]
    assert state["clipping_norm"] == pytest.approx(
        round_2["dp_clipping_norm"] * math.exp(-0.2 * (round_2["dp_unclipped_fraction"] - 0.5))
    )
    resumed = run_in_process({**overrides, "resume": str(run_dir)}, num_clients=3)
    rows = history(resumed)
    assert [row["dp_epsilon"] for row in rows] == pytest.approx(
        [central_epsilon(z, r, 3, 3, DELTA) for r in range(5)]
    )
    assert rows[3]["dp_clipping_norm"] == state["clipping_norm"]  # exactly
    record = json.loads((resumed / "privacy.json").read_text())
    assert record["releases"] == 4 and record["rounds"] == [1, 2, 3, 4]
    assert record["clipping_norm_per_round"] == [row["dp_clipping_norm"] for row in rows[1:]]


def test_a_resume_whose_next_round_exceeds_the_budget_is_refused_in_one_line():
    run = config(dp="central-server-fixed", dp_noise_multiplier=4.0, dp_epsilon_budget=5.0)
    private = wrap(FedAvg(**flower_kwargs(run)), run, {}, num_nodes=2)
    allowed = max(t for t in range(1, 50) if central_epsilon(4.0, t, 2, 2, DELTA) <= 5.0)
    private.restore({"releases": allowed, "client_releases": {}, "unattributed": 0})
    with pytest.raises(ConfigError, match="the privacy budget is spent") as caught:
        private.check_resumable("resume='/runs/x'")
    assert "\n" not in str(caught.value)
    private.restore({"releases": allowed - 1, "client_releases": {}, "unattributed": 0})
    private.check_resumable("resume='/runs/x'")  # one more round fits


def test_which_strategies_compose_is_what_docs_privacy_says(monkeypatch):
    """Central DP: the strategies whose server rule is FedAvg's mean; local DP: every strategy
    whose reply is exactly the model. docs/privacy.md lists both."""
    from flowerbed.strategies import STRATEGIES, quantum_baselines

    monkeypatch.setattr(quantum_baselines, "require_vqc", lambda config: None)  # no PennyLane
    central, local = [], []
    for name, spec in STRATEGIES.items():
        run = config(strategy=name)
        try:
            check_run_config(run.replace(dp="local"), STRATEGIES)
        except ConfigError:
            continue
        local.append(name)
        if averages_models(spec.build_server(run, **flower_kwargs(run))):
            central.append(name)
    page = (Path(__file__).resolve().parent.parent / "docs" / "privacy.md").read_text()
    assert f"central DP composes with: {', '.join(f'`{n}`' for n in central)}." in page
    assert f"local DP composes with: {', '.join(f'`{n}`' for n in local)}." in page
    assert "krum" not in central and "fedadam" not in central and "fedavg" in central
