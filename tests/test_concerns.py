"""Each concern checks its own run-config keys (``settings.Concern``): the catalog's keys are
exactly its concerns' keys, ``parse_run_config`` runs every concern's ``check`` and the
ServerApp's start every ``check_machine`` and ``check_federation``, with the run's config and
its federation's size, before any round; a concern's refusal stops the run there."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowerbed import catalog, server_app
from flowerbed.inprocess import run_in_process
from flowerbed.settings import Concern, ConfigError


def test_the_catalog_s_keys_are_its_concerns_keys():
    # a key several protocols read is declared in each protocol's concern, once in SETTINGS
    keys = [s.key for concern in catalog.CONCERNS for s in concern.settings]
    assert list(dict.fromkeys(keys)) == list(catalog.SETTINGS)
    titles = [concern.title for concern in catalog.CONCERNS]
    assert len(titles) == len(set(titles))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [  # one refusal of each concern's own check, through parse_run_config
        (
            {"strategy": "scaffold", "attack": "scale", "attackers": "0"},
            "attack='scale' acts on a reply that is",
        ),
        ({"strategy": "qkt", "max-update-norm": 1.0}, "max-update-norm=1.0 acts on a client's"),
        ({"strategy": "ctl", "distill-objective": "basic"}, "distill-objective='basic' distils"),
        ({"strategy": "fednova", "dp": "local"}, "dp='local' clips and noises a reply"),
    ],
)
def test_parse_run_config_runs_each_concern_s_check(overrides, message):
    with pytest.raises(ConfigError, match=message):
        catalog.parse_run_config(overrides)


def test_the_server_runs_every_machine_and_federation_check_before_any_round(
    tmp_path, fast_run, one_thread, monkeypatch
):
    heard = []
    looking = Concern(
        "looking",
        check_machine=lambda config: heard.append(("machine", config.strategy)),
        check_federation=lambda config, n: heard.append(("federation", n)),
    )
    monkeypatch.setattr(server_app, "CONCERNS", (*catalog.CONCERNS, looking))
    run_in_process({**fast_run, "num-server-rounds": 1}, num_clients=3)
    assert heard == [("machine", "fedavg"), ("federation", 3)]

    def refuse(config, num_partitions):
        raise ConfigError(f"refused with {num_partitions} partitions")

    refusing = Concern("refusing", check_federation=refuse)
    monkeypatch.setattr(server_app, "CONCERNS", (*catalog.CONCERNS, refusing))
    out = tmp_path / "refused"
    with pytest.raises(ConfigError, match="refused with 3 partitions"):
        run_in_process({**fast_run, "output-dir": str(out)}, num_clients=3)
    assert not list(Path(out).glob("*/history.json"))  # no round ran


def test_failing_partitions_that_do_not_exist_are_refused_by_fault_injection(fast_run):
    with pytest.raises(ConfigError, match=r"failing-partitions='5' names partitions \[5\]"):
        run_in_process({**fast_run, "failing-partitions": "5"}, num_clients=3)
