"""Every registered protocol runs from its name alone, and the protocols' own defaults
(``ProtocolSpec.defaults``, applied by ``catalog.parse_run_config``).

``test_runs_one_round_from_its_name`` gives each protocol nothing but ``strategy`` and
``num-server-rounds=1`` on the default data (digits, 10 clients, Dirichlet 0.5): what a protocol
needs beyond the global defaults it must declare itself.
"""

from __future__ import annotations

import json
import logging

import pytest

from flowerbed.catalog import PROTOCOLS, SETTINGS, parse_run_config, protocol_defaults_note
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.runtime.resume import PROTOCOL_DEFAULTS_KEY


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_runs_one_round_from_its_name(name, tmp_path, caplog, one_thread):
    caplog.set_level(logging.INFO)
    run_dir = run_in_process(
        {"strategy": name, "num-server-rounds": 1, "output-dir": str(tmp_path)}
    )
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"
    history = json.loads((run_dir / "history.json").read_text())
    assert history and history[-1]["round"] >= 1
    assert sum(row.get("clients_failed", 0) for row in history) == 0, "a reply was dropped"
    # config.json holds the effective values and names the keys the protocol set
    written = json.loads((run_dir / "config.json").read_text())
    defaults = PROTOCOLS[name].defaults
    assert {key: written[key] for key in defaults} == dict(defaults)
    assert written.get(PROTOCOL_DEFAULTS_KEY, "") == ", ".join(defaults)
    notes = {r.getMessage() for r in caplog.records if "uses its own default" in r.getMessage()}
    assert len(notes) == (1 if defaults else 0)


@pytest.mark.parametrize("name", [name for name, p in PROTOCOLS.items() if p.defaults])
def test_protocol_defaults_are_valid_declared_keys_that_differ_from_the_global_ones(name):
    for key, value in PROTOCOLS[name].defaults.items():
        setting = SETTINGS[key]
        assert setting.coerce(value) == value and type(value) is setting.type, (name, key)
        setting.validate(value)
        assert value != setting.default, (name, key)
        assert key != "strategy"


def test_a_protocol_default_applies_where_the_key_holds_its_global_default():
    config = parse_run_config(resolve_run_config({"strategy": "fedsa"}))
    assert config.server_fraction == 0.2
    assert config.protocol_defaults == {"server-fraction": 0.2}
    assert protocol_defaults_note(config) == (
        "strategy='fedsa' uses its own default server-fraction=0.2 (set the key to change it)"
    )
    # kept through replace (the run context's config is a replaced one)
    assert config.replace(seed=1).protocol_defaults == {"server-fraction": 0.2}
    # a value other than the global default is the user's
    config = parse_run_config(resolve_run_config({"strategy": "fedsa", "server-fraction": 0.3}))
    assert config.server_fraction == 0.3 and config.protocol_defaults == {}
    assert protocol_defaults_note(config) == ""
    # the global default itself cannot be told from a key left unset: the protocol's applies
    config = parse_run_config(resolve_run_config({"strategy": "fedsa", "server-fraction": 0.0}))
    assert config.server_fraction == 0.2
    # other protocols are untouched; several defaults are named in one line
    assert parse_run_config(resolve_run_config({"strategy": "fedavg"})).protocol_defaults == {}
    assert parse_run_config({"strategy": "qfedavg"}).model == "vqc"
    assert parse_run_config({"strategy": "ctl"}).dataset == "breast-cancer"
    assert parse_run_config({"strategy": "ctl", "dataset": "ctl-gaussian"}).protocol_defaults == {}
