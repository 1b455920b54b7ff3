"""The report's configuration, privacy, robustness and environment sections, each from a run
folder written by hand, and the number format of its tables: the configuration headline names
what differs from the declared defaults, a DP run shows epsilon and C by round, an attacked run
its attackers and dropped replies, a plain run neither section."""

from __future__ import annotations

import math
import re
from pathlib import Path

from test_report import Page, assert_self_contained, parsed

from flowerbed.catalog import SETTINGS
from flowerbed.core.results import write_json
from flowerbed.evaluation.clinical import site_estimates
from flowerbed.report import write_run_report
from flowerbed.report.environment_section import environment_section
from flowerbed.report.markup import fmt, setting_text
from flowerbed.report.privacy_section import privacy_section, recorded_norms
from flowerbed.report.robustness_section import robustness_section
from flowerbed.report.run_folder import RunFolder
from flowerbed.runtime.environment import environment
from flowerbed.runtime.history import CLIENT_TABLE_FILE, append_client_table
from flowerbed.runtime.outcome import write_status


def section_words(run_dir: Path, anchor: str) -> str:
    """The text of the section ``anchor`` of the run's report.html."""
    text = (run_dir / "report.html").read_text()
    start = text.index(f'<h2 id="{anchor}">')
    end = text.find("<h2 ", start + 1)
    return Page(text[start : end if end > 0 else len(text)]).words


def folder(path: Path, history: list[dict], **config) -> Path:
    path.mkdir(parents=True)
    write_json(path / "config.json", {"strategy": "fedavg", "dataset": "digits", "model": "cnn",
                                      "num-partitions": 4, "num-server-rounds": 3, **config})  # fmt: skip
    write_json(path / "history.json", history)
    write_status(path, "completed")
    return path


def dp_history(adaptive: bool) -> list[dict]:
    rows = []
    for r in range(4):
        row = {"round": r, "central_accuracy": 0.5 + 0.1 * r, "central_loss": 1.0 - 0.1 * r,
               "dp_epsilon": [0.0, 1.25, 2.0, 2.625][r]}  # fmt: skip
        if adaptive:
            row["dp_clipping_norm"] = [1.0, 0.8125, 0.75, 0.6875][r]
        if r:
            row.update(clients_trained=4, clients_failed=0, failures=[])
        rows.append(row)
    return rows


def test_numbers_keep_their_magnitude_and_nan_says_so():
    assert fmt(1e-05) == "1e-05"
    assert fmt(0.8734) == "0.8734" and fmt(0.85) == "0.8500" and fmt(0.0) == "0.0000"
    assert fmt(0.001234) == "0.001234"  # not 0.0012: four significant digits below 0.01
    assert fmt(2.5e7) == "2.5e+07" and fmt(123.456789) == "123.4568"
    assert fmt(math.nan) == "NaN" and fmt(math.inf) == "inf" and fmt(-math.inf) == "-inf"
    assert fmt(None) == "-" and fmt(12345) == "12,345" and fmt(True) == "True"
    assert [setting_text(v) for v in (1e-05, 0.05, 3600.0, True, "", "cnn")] == [
        "1e-05", "0.05", "3600.0", "true", '""', "cnn"
    ]  # fmt: skip


def test_the_configuration_headline_lists_what_differs_from_the_declared_defaults(tmp_path):
    changed = {"dp": "central-server-fixed", "dp-delta": 1e-06, "attack": "sign-flip",
               "attackers": "0,2", "learning-rate": 0.01}  # fmt: skip
    unchanged = {"batch-size": SETTINGS["batch-size"].default, "dp-clipping-norm": 1.0}
    run_dir = folder(tmp_path / "run", dp_history(False), **changed, **unchanged)
    write_run_report(run_dir)
    text = (run_dir / "report.html").read_text()
    headline = Page(text.split("<details>")[0].split('<h2 id="configuration">')[1]).words
    for key, value in changed.items():
        default = setting_text(SETTINGS[key].default)
        assert f"{key} {setting_text(value)} {default}" in headline, key
    assert "dp-delta 1e-06 1e-05 Differential privacy" in headline
    assert "strategy fedavg fedavg default" in headline  # always shown, even at its default
    assert "num-partitions 4" in headline
    assert "batch-size" not in headline and "dp-clipping-norm" not in headline
    every = Page(text.split("<details>")[1].split("</details>")[0]).words
    assert "batch-size 32 32" in every and "num-server-rounds 3 5" in every


def test_the_configuration_says_which_defaults_came_from_the_protocol_or_the_data_set(tmp_path):
    config = {"strategy": "qfedavg", "dataset": "breast-cancer", "model": "vqc",
              "protocol-defaults": "model"}  # fmt: skip
    run_dir = folder(tmp_path / "quantum", dp_history(False), **config)
    write_run_report(run_dir)
    assert "model vqc cnn (the protocol's own: vqc) the protocol's own default" in section_words(
        run_dir, "configuration"
    )
    config = {"dataset": "breast-cancer", "model": "mlp", "protocol-defaults": "model"}
    run_dir = folder(tmp_path / "tabular", dp_history(False), **config)
    write_run_report(run_dir)
    assert "model mlp cnn the data set's model" in section_words(run_dir, "configuration")


def test_a_dp_run_shows_epsilon_and_the_clipping_norm_by_round(tmp_path):
    run_dir = folder(
        tmp_path / "run",
        dp_history(adaptive=True),
        **{"dp": "central-server-adaptive", "dp-noise-multiplier": 1.1, "dp-delta": 1e-05,
           "dp-clipping-norm": 1.0, "dp-epsilon-budget": 3.0},
    )  # fmt: skip
    write_json(
        run_dir / "privacy.json",
        {"dp": "central-server-adaptive", "noise_multiplier": 1.1, "delta": 1e-05,
         "epsilon": 2.625, "releases": 3, "sampled_per_round": 4, "clients": 4,
         "accounting": "RDP (dp-accounting), client-level replace-one, per round Gaussian(z/2)",
         "epsilon_budget": 3.0, "stopped": ""},
    )  # fmt: skip
    write_run_report(run_dir)
    assert "privacy" in parsed(run_dir).ids
    words = section_words(run_dir, "privacy")
    assert "(epsilon, delta) = (2.62, 1e-05) spent over 3 rounds, client-level" in words
    assert "noise multiplier z 1.1000" in words and "delta 1e-05" in words
    assert "epsilon budget 3.0000" in words and "final epsilon 2.6250" in words
    assert "1 1.2500 0.8125 2 2.0000 0.7500" in words  # round, epsilon, C of rounds 1 and 2
    assert "clients per round 4 of 4 sampled" in words
    assert "how the run ended completed" in words
    assert "history.json's dp_clipping_norm" in words
    assert_self_contained(parsed(run_dir))


def test_a_fixed_clipping_run_shows_its_c_and_a_budget_stop(tmp_path):
    history = dp_history(adaptive=False)[:3]
    run_dir = folder(tmp_path / "run", history,
                     **{"dp": "local", "dp-clipping-norm": 0.5, "dp-delta": 1e-05})  # fmt: skip
    stop = "privacy budget: stopped before round 3: it would bring dp_epsilon from 2 to 2.625"
    write_json(
        run_dir / "privacy.json",
        {"dp": "local", "noise_multiplier": 1.0, "delta": 1e-05, "epsilon": 2.0, "releases": 2,
         "sampled_per_round": 4, "clients": 4, "accounting": "RDP", "epsilon_budget": 2.5,
         "stopped": stop},
    )  # fmt: skip
    write_run_report(run_dir)
    words = section_words(run_dir, "privacy")
    assert "spent by the worst client, over the 2 rounds it took part in" in words
    assert f"The privacy budget ended the run: {stop.split(': ', 1)[1]}" in words
    assert "clipping norm C (fixed) 0.5000" in words
    assert "2 2.0000 0.5000" in words  # round 2: epsilon, the fixed C
    assert "how the run ended stopped by the privacy budget" in words


def test_per_round_clipping_norms_of_privacy_json_are_read_in_any_plain_shape():
    assert recorded_norms({"clipping_norms": [0.9, 0.8]}) == {1: 0.9, 2: 0.8}
    assert recorded_norms({"clipping_norm_by_round": {"1": 0.9, "2": 0.8}}) == {1: 0.9, 2: 0.8}
    rows = [{"round": 1, "clipping_norm": 0.9}, {"round": 2, "clipping_norm": 0.7}]
    assert recorded_norms({"clipping_norms": rows}) == {1: 0.9, 2: 0.7}
    assert recorded_norms({"epsilon": 1.0}) == {}
    # numbered by the record's own rounds (a resumed run, a round that released nothing)
    record = {"rounds": [1, 2, 4], "clipping_norm_per_round": [1.0, 0.9, 0.8],
              "next_clipping_norm": 0.7}  # fmt: skip
    assert recorded_norms(record) == {1: 1.0, 2: 0.9, 4: 0.8}


def test_the_c_of_privacy_json_is_used_when_the_history_has_none(tmp_path):
    history = [
        {k: v for k, v in row.items() if k != "dp_clipping_norm"} for row in dp_history(True)
    ]
    run_dir = folder(tmp_path / "run", history, dp="central-client-adaptive")
    write_json(run_dir / "privacy.json", {"dp": "central-client-adaptive", "epsilon": 2.625,
                                          "delta": 1e-05, "clipping_norms": [0.9, 0.8, 0.7]})  # fmt: skip
    section = privacy_section(RunFolder(run_dir))
    words = Page(section.html()).words
    assert "C of the round (privacy.json)" in words and "2 2.0000 0.8000" in words


def attacked_history() -> list[dict]:
    rows = [{"round": 0, "central_accuracy": 0.1}]
    for r in (1, 2, 3):
        failures = ["partition 3: rejected: arrays['fc.weight'] holds NaN"]
        failures = failures if r != 2 else [*failures, "1 node(s) did not reply within the timeout"]
        rows.append(
            {"round": r, "central_accuracy": 0.2 * r, "clients_trained": 4 - len(failures),
             "clients_failed": len(failures), "failures": failures, "clients_clipped": r - 1,
             "client_accuracies": {"0": 0.2, "1": 0.8, "2": 0.3, "3": None}}
        )  # fmt: skip
    return rows


def test_an_attacked_run_shows_its_attackers_and_the_replies_dropped_and_clipped(tmp_path):
    run_dir = folder(
        tmp_path / "run",
        attacked_history(),
        **{"strategy": "multikrum", "attack": "scale", "attackers": "0, 2", "attack-scale": 5.0,
           "max-update-norm": 2.0, "failing-partitions": "3", "failure-mode": "nonfinite",
           "num-malicious-clients": 1},
    )  # fmt: skip
    sites = {str(k): site_estimates([10, 20], [5, 15], 0.7, positive=0) for k in range(3)}
    append_client_table(run_dir / CLIENT_TABLE_FILE, 3, sites)
    write_run_report(run_dir)
    assert "robustness" in parsed(run_dir).ids
    words = section_words(run_dir, "robustness")
    assert "attack scale (attack-scale = 5.0): each attacker replies g + s (w - g)" in words
    assert "attackers (partition ids) 0, 2 (2 of 4 clients" in words
    assert "(robust aggregation)" in words and "num-malicious-clients 1" in words
    assert "aggregation multikrum: mean of the m client models" in words
    assert "`" not in words  # the summary's Markdown code spans read as plain text
    assert "max-update-norm 2.0: every training update is clipped" in words
    assert "failing-partitions (fault injection) 3 (failure-mode nonfinite)" in words
    assert "Over 3 rounds: 4 replies dropped, 3 updates clipped." in words
    assert "2 2 2 1 partition 3: rejected" in words  # round 2: aggregated, dropped, clipped
    assert "rejected: arrays['fc.weight'] holds NaN 3 partition 3" in words  # over the rounds
    assert "1 node(s) did not reply within the timeout 1 -" in words
    assert "honest clients 0.8000 (1 client), of the attackers 0.2500 (2)" in words
    sites = section_words(run_dir, "clients")  # the per-site table marks the attackers
    assert "0 (attacker)" in sites and "2 (attacker)" in sites and "1 (attacker)" not in sites
    assert_self_contained(parsed(run_dir))


def test_a_run_without_dp_or_attack_has_no_privacy_or_robustness_section(tmp_path):
    history = [{"round": 0, "central_accuracy": 0.1}]
    history.append({"round": 1, "central_accuracy": 0.5, "clients_trained": 4,
                    "clients_failed": 0, "failures": []})  # fmt: skip
    run_dir = folder(tmp_path / "run", history)
    run = RunFolder(run_dir)
    assert privacy_section(run) is None and robustness_section(run) is None
    assert environment_section(run) is None  # a run folder from before environment.json
    write_run_report(run_dir)
    ids = parsed(run_dir).ids
    assert "privacy" not in ids and "robustness" not in ids and "environment" not in ids


def test_a_failed_client_alone_gets_the_robustness_section(tmp_path):
    history = [{"round": 0}, {"round": 1, "clients_trained": 3, "clients_failed": 1,
                              "failures": ["partition 1: ValueError: boom"]}]  # fmt: skip
    section = robustness_section(RunFolder(folder(tmp_path / "run", history)))
    words = Page(section.html()).words
    assert "Over 1 round: 1 reply dropped." in words
    assert "ValueError: boom 1 partition 1" in words
    assert "max-update-norm 0 (off" in words


def test_the_environment_section_shows_the_versions_and_the_machine(tmp_path):
    run_dir = folder(tmp_path / "run", [{"round": 0}])
    write_json(run_dir / "environment.json", environment())
    words = Page(environment_section(RunFolder(run_dir)).html()).words
    assert re.search(r"flowerbed [\w.+-]+, git commit ([0-9a-f]{40}|unknown)", words)
    assert "flwr 1." in words and "torch " in words and "Python 3." in words
    assert "CUDA" in words and "CPUs" in words
