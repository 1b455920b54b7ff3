"""The declaration mechanism (``flowerbed.settings``): typing, ranges, choices, cross-key checks
and the one-line messages they produce."""

import math

import pytest

from flowerbed.settings import ConfigError, RunConfig, Setting, comma_list, index_settings

DECLARED = index_settings(
    (
        Setting("rounds", 5, "rounds", low=1),
        Setting("fraction", 1.0, "fraction", low=0, high=1, low_open=True),
        Setting("rate", 0.1, "rate", low=0, low_open=True),
        Setting("decay", 0.0, "decay", low=0),
        Setting("momentum", 0.9, "momentum", low=0, high=1, high_open=True),
        Setting("mode", "a", "mode", choices=("a", "b")),
        Setting("late", "x", "choices known when checked", choices=lambda: ("x", "y")),
        Setting("flag", False, "flag"),
        Setting(
            "most",
            0,
            "0 or at least rounds",
            low=0,
            check=lambda v, c: None if v in (0,) or v >= c["rounds"] else f"most {v} < rounds",
        ),
    )
)


def parse(**values):
    return RunConfig.parse({k.replace("_", "-"): v for k, v in values.items()}, DECLARED)


def test_defaults_typed_access_and_coercion():
    config = parse(rounds=3.0, flag="true", rate=1)
    assert config["rounds"] == 3 and type(config["rounds"]) is int
    assert config.rate == 1.0 and type(config.rate) is float
    assert config.flag is True and config.mode == "a" and config.momentum == 0.9
    assert config.to_dict()["fraction"] == 1.0 and len(config) == len(DECLARED)
    assert config.replace(mode="b").mode == "b" and config.mode == "a"
    with pytest.raises(AttributeError, match="no key 'nothing'"):
        _ = config.nothing


@pytest.mark.parametrize(
    "values, message",
    [
        ({"rounds": 0}, "rounds must be at least 1, got 0"),
        ({"fraction": 0.0}, r"fraction must be in \(0, 1\], got 0.0"),
        ({"fraction": 1.5}, r"fraction must be in \(0, 1\], got 1.5"),
        ({"rate": 0.0}, "rate must be > 0, got 0.0"),
        ({"rate": math.nan}, "rate must be a finite number > 0, got nan"),
        ({"rate": math.inf}, "rate must be a finite number > 0, got inf"),
        ({"decay": -math.inf}, "decay must be a finite number >= 0, got -inf"),
        ({"decay": -1.0}, "decay must be >= 0, got -1.0"),
        ({"momentum": 1.0}, r"momentum must be in \[0, 1\), got 1.0"),
        ({"mode": "c"}, "unknown mode 'c'; valid choices: a, b"),
        ({"late": "z"}, "unknown late 'z'; valid choices: x, y"),
        ({"rounds": "many"}, "run-config rounds='many' is not a valid int"),
        ({"rounds": 2.5}, "run-config rounds=2.5 is not a valid int"),
        ({"flag": "maybe"}, "run-config flag='maybe' is not a valid bool"),
        ({"rate": True}, "run-config rate=True is not a valid float"),
        ({"most": 2, "rounds": 3}, "most 2 < rounds"),
    ],
)
def test_bad_values_name_the_key_the_value_and_what_is_valid(values, message):
    with pytest.raises(ConfigError, match=message):
        parse(**values)


def test_unbounded_floats_still_reject_nan_and_infinity():
    declared = index_settings([Setting("weight", 0.0, "w")])
    for bad in (math.nan, math.inf, "-inf"):
        with pytest.raises(ConfigError, match="weight must be a finite number, got"):
            RunConfig.parse({"weight": bad}, declared)


def test_unknown_keys_and_duplicate_declarations_are_errors():
    with pytest.raises(ConfigError, match=r"^unknown run-config key 'speed' \(every key is"):
        RunConfig.parse({"speed": 1}, DECLARED)
    with pytest.raises(ConfigError, match="unknown run-config key 'round'; did you mean 'rounds'?"):
        RunConfig.parse({"round": 1}, DECLARED)
    with pytest.raises(ValueError, match="'rounds' is declared twice"):
        index_settings([Setting("rounds", 1, "a"), Setting("rounds", 1, "b")])
    same = Setting("x", 1, "x")
    assert list(index_settings([same, same])) == ["x"]  # one declaration listed twice is fine


def test_range_text_for_messages_and_the_readme():
    assert DECLARED["rounds"].range_text() == "at least 1"
    assert DECLARED["fraction"].range_text() == "in (0, 1]"
    assert DECLARED["decay"].range_text() == ">= 0"
    assert DECLARED["mode"].range_text() == ""


def test_comma_lists():
    assert comma_list("1, 3,5") == ["1", "3", "5"] and comma_list("") == []
