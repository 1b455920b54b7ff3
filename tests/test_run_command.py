"""``flowerbed run`` without Flower running: its arguments, the run config from ``--set`` and
``--config``, bad input refused before any process starts, the exit status from a run
folder's ``status.json``, the generated app Flower bundles, and ``flowerbed --version``.
The real runs are in ``tests/e2e/test_flowerbed_run.py``."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from flowerbed import __version__, cli, run_command, simulation
from flowerbed.catalog import SETTINGS
from flowerbed.inprocess import default_run_config
from flowerbed.runtime.outcome import write_status
from flowerbed.simulation import SimulationResult
from flowerbed.sweep import execute


def run_args(*argv: str):
    return cli.parser().parse_args(["run", *argv])


# --- arguments and the run config ------------------------------------------------------------
def test_defaults_are_the_embedded_default_on_ten_clients():
    args = run_args()
    assert (args.clients, args.cpus_per_client, args.gpus_per_client) == (10, 1, 0.0)
    assert args.set == [] and args.config is None and args.ray_address is None
    assert run_command.overrides_from(args.set, args.config) == {}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("0.1", 0.1),
        ("1e-3", 0.001),
        ("true", True),
        ("fedprox", "fedprox"),  # a bare word is a string
        ('"fedprox"', "fedprox"),
        ("'a b'", "a b"),
        ("~/data", "~/data"),
        ("0,1,2", "0,1,2"),
        ("", ""),
        ("2024-01-01", "2024-01-01"),  # a TOML date is no run-config type: the text
    ],
)
def test_set_values_are_read_like_toml(text, value):
    parsed = run_command.parse_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_set_wins_over_the_config_file_and_later_sets_win(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('strategy = "fedprox"\nnum-server-rounds = 3\nproximal-mu = 0.1\n')
    args = run_args(
        "--config", str(path), "--set", "num-server-rounds=4", "--set", "seed=1", "--set", "seed=2"
    )
    overrides = run_command.overrides_from(args.set, args.config)
    assert overrides == {
        "strategy": "fedprox",
        "num-server-rounds": 4,
        "proximal-mu": 0.1,
        "seed": 2,
    }


def test_run_config_takes_flwr_runs_pairs_and_set_wins(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('strategy = "fedprox"\n')
    args = run_args(
        "--run-config",
        "num-server-rounds=3 output-dir='my runs' learning-rate=0.5",
        "--run-config",
        str(path),
        "--set",
        "learning-rate=0.1",
    )
    assert run_command.overrides_from(args.set, args.config, args.run_config) == {
        "num-server-rounds": 3,
        "output-dir": "my runs",  # quotes keep the space, as flwr run reads them
        "learning-rate": 0.1,
        "strategy": "fedprox",
    }


def test_a_value_holding_a_space_and_an_equals_sign_is_one_value_when_no_key_follows():
    assert run_command.parse_assignment("output-dir=a b=c") == ("output-dir", "a b=c")


@pytest.mark.parametrize(
    ("dataset", "model"),
    [("breast-cancer", "mlp"), ("shapes", "pointnet"), ("synthetic", "logreg"), ("digits", "cnn")],
)
def test_every_data_set_runs_by_its_name_with_the_model_that_fits_it(dataset, model):
    config = run_command.preflight(run_command.checked_overrides({"dataset": dataset}, 10), 10)
    assert config.model == model


def test_a_missing_data_file_is_refused_before_anything_starts_in_this_commands_syntax(
    tmp_path, nothing_starts, capsys
):
    argv = ["run", "--set", "dataset=pathmnist", "--set", f"data-dir={tmp_path}"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"flowerbed run: error: dataset='pathmnist': MedMNIST file {tmp_path / 'pathmnist.npz'}"
        f" not found: put pathmnist.npz (from https://zenodo.org/records/10519652) into {tmp_path}"
        ", or add --set download=true on a machine with internet"
    ), err
    assert "--run-config" not in err and err.count("\n") == 1


def test_a_data_file_that_is_there_or_asked_for_passes_the_pre_flight(tmp_path):
    asked = {"dataset": "pathmnist", "data-dir": str(tmp_path), "download": True}
    assert run_command.preflight(asked, 10).dataset == "pathmnist"
    (tmp_path / "breastmnist.npz").write_bytes(b"")
    there = {"dataset": "breastmnist", "data-dir": str(tmp_path)}
    assert run_command.preflight(there, 10).dataset == "breastmnist"


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (
            ["rnu"],
            "invalid choice: 'rnu' (choose from 'run', 'sweep', 'report', 'reproduce'); did you mean 'run'?",
        ),
        (
            ["run", "--sett", "seed=1"],
            "unrecognized arguments: --sett seed=1; --sett: did you mean --set?",
        ),
        (["sweep", "--out", "x", "--gird", "a=1"], "--gird: did you mean --grid?"),
    ],
)
def test_a_mistyped_subcommand_or_option_gets_a_did_you_mean(argv, hint, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(argv)
    assert exit.value.code == 2
    assert hint in capsys.readouterr().err


def test_checked_overrides_are_typed_and_relative_paths_absolute(tmp_path):
    overrides = run_command.overrides_from(
        ["learning-rate=1", "strategy=fedprox", "output-dir=runs", "data-dir=~/d"]
    )
    checked = run_command.checked_overrides(overrides, clients=10, cwd=tmp_path)
    assert checked == {
        "learning-rate": 1.0,
        "strategy": "fedprox",
        "output-dir": str(tmp_path / "runs"),
        "data-dir": "~/d",  # the ServerApp expands ~ itself
    }
    assert type(checked["learning-rate"]) is float


# --- bad input: one line, status 2, nothing started --------------------------------------------
@pytest.fixture
def nothing_starts(monkeypatch):
    """Any process started, or the simulation begun, fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(run_command, "simulate", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--set", "learnin-rate=0.1"],
            "unknown run-config key 'learnin-rate'; did you mean 'learning-rate'",
        ),
        (["--set", "learning-rate=-1"], "learning-rate must be > 0, got -1.0"),
        (["--set", "num-server-rounds=many"], "run-config num-server-rounds='many' is not a valid"),
        (["--set", "strategy=fedavgm2"], "unknown strategy 'fedavgm2'; did you mean 'fedavgm'"),
        (["--set", "strategy"], "--set 'strategy': expected key=value"),
        (["--clients", "1"], "min-available-clients=2 is more than the 1 clients"),
        (["--clients", "0"], "--clients must be at least 1, got 0"),
        (["--gpus-per-client", "-1"], "--gpus-per-client must be >= 0"),
        (["--gpus-per-client", "1000"], "client-resources-num-gpus=1000.0: this machine has"),
        (["--ray-address", "127.0.0.1:1"], "RAY_ADDRESS='127.0.0.1:1': no Ray cluster answers"),
        (
            ["--set", "num-server-rounds=1 seed=2"],
            (
                "--set 'num-server-rounds=1 seed=2' holds several key=value pairs; give one per"
                " --set (--set num-server-rounds=1 --set seed=2) or all of them to --run-config"
            ),
        ),
        (["--run-config", "seed=x"], "run-config seed='x' is not a valid int"),
        (["--run-config", "seed='1"], '--run-config "seed=\'1": No closing quotation'),
        (
            ["--set", "dataset=breast-cancer", "--set", "model=cnn"],
            (
                "model='cnn' cannot take dataset='breast-cancer': model 'cnn' needs images (C, H, W),"
                " got input shape (30,); dataset='breast-cancer' takes model='mlp'"
            ),
        ),
        (
            ["--set", "dataset=shapes", "--set", "model=resnet18"],
            "model='resnet18' cannot take dataset='shapes'",
        ),
        (
            ["--set", "output-dir=/dev/null/runs"],
            "output-dir='/dev/null/runs' cannot be written (Not a directory); set output-dir to",
        ),
    ],
)
def test_bad_input_is_one_line_and_status_2_before_anything_starts(
    argv, message, nothing_starts, capsys
):
    assert cli.main(["run", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"flowerbed run: error: {message}"), captured.err
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[section]\nseed = 1\n", "section must be a bool, number or string"),
        ("seed = [1, 2]\n", "seed must be a bool, number or string"),
        ("seed = \n", "--config"),
        ('strategie = "fedprox"\n', "unknown run-config key 'strategie'; did you mean 'strategy'"),
    ],
)
def test_a_bad_config_file_is_refused(tmp_path, text, message, nothing_starts, capsys):
    path = tmp_path / "run.toml"
    path.write_text(text)
    assert cli.main(["run", "--config", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_config_file_is_refused(tmp_path, nothing_starts, capsys):
    assert cli.main(["run", "--config", str(tmp_path / "nope.toml")]) == 2
    assert "nope.toml" in capsys.readouterr().err


# --- the exit status from status.json ----------------------------------------------------------
def fake_simulate(run_dir: Path | None, status: str | None, signal_me: bool = False):
    """A ``simulate`` that logs the results line of ``run_dir`` with ``status`` written there
    (and, with ``signal_me``, then receives SIGTERM as a user's kill would send)."""
    calls = []

    def simulate(overrides, **kwargs):
        calls.append((overrides, kwargs))
        kwargs["on_line"]("INFO :      Starting Flower Simulation\n")
        if run_dir is not None:
            run_dir.mkdir(parents=True)
            kwargs["on_line"](f"\x1b[92mINFO \x1b[0m:      flowerbed: results go to {run_dir}\n")
            if status is not None:
                write_status(run_dir, status, "" if status == "completed" else "why it ended")
        if signal_me:
            os.kill(os.getpid(), signal.SIGTERM)
        return SimulationResult(returncode=0, log="", run_dir=run_dir, seconds=1.0)

    return simulate, calls


@pytest.mark.parametrize(
    ("status", "code", "last"),
    [
        ("completed", 0, "flowerbed run: completed ["),
        ("failed", 1, "flowerbed run: failed: why it ended ["),
        ("interrupted", 1, "flowerbed run: interrupted: why it ended ["),
        # a run that says `running` without a live lock died without a word
        ("running", 1, "flowerbed run: interrupted: the run stopped without a word"),
    ],
)
def test_the_exit_status_is_what_status_json_says(
    tmp_path, monkeypatch, capsys, status, code, last
):
    run_dir = tmp_path / "runs" / "the-run"
    simulate, calls = fake_simulate(run_dir, status)
    monkeypatch.setattr(run_command, "simulate", simulate)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--set", "num-server-rounds=1", "--clients", "3"]) == code
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == f"flowerbed run: run folder {run_dir}"
    assert lines[-1].startswith(last), lines[-1]
    (overrides, kwargs) = calls[0]
    assert overrides == {"num-server-rounds": 1}
    assert kwargs["num_supernodes"] == 3 and kwargs["timeout"] is None
    assert kwargs["cwd"] == tmp_path
    pyproject = kwargs["app_dir"] / "pyproject.toml"  # the generated app, gone after the run
    assert kwargs["app_dir"] != simulation.APP_DIR and not pyproject.exists()


def test_no_run_folder_is_a_failure_that_says_so(tmp_path, monkeypatch, capsys):
    simulate, _ = fake_simulate(None, None)
    monkeypatch.setattr(run_command, "simulate", simulate)
    assert cli.main(["run", "--clients", "2"]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("flowerbed run: failed: the ServerApp made no run folder (flwr run")


def test_sigterm_stops_the_run_with_status_130(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "runs" / "the-run"
    simulate, _ = fake_simulate(run_dir, "interrupted", signal_me=True)
    monkeypatch.setattr(run_command, "simulate", simulate)
    previous = signal.getsignal(signal.SIGTERM)
    assert cli.main(["run", "--clients", "2"]) == 130
    assert signal.getsignal(signal.SIGTERM) is previous  # the handler is put back
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("flowerbed run: interrupted; the run says interrupted: why it ended")


def test_a_status_file_that_cannot_be_read_is_a_failure(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "status.json").write_text("{not json")
    code, how = run_command.outcome(run_dir, interrupted=False, returncode=0)
    assert code == 1 and how.startswith("failed: the run folder's status.json cannot be read")


# --- the generated app and the log --------------------------------------------------------------
def test_the_generated_app_is_what_flower_needs_and_nothing_else():
    from flwr.cli.build import build_fab_from_disk
    from flwr.cli.config_utils import load_and_validate

    with simulation.generated_app() as app:
        config, warnings = load_and_validate(app / "pyproject.toml")  # checks the components
        fab = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(app)))
    assert not app.exists()
    assert warnings == [] and app.name == "flowerbed"
    assert sorted(fab.namelist()) == [".info/CONTENT", "pyproject.toml"]
    bundled = tomllib.loads(fab.read("pyproject.toml").decode())
    assert bundled["project"] == {**config["project"], "version": __version__}
    assert bundled["tool"]["flwr"]["app"]["components"] == simulation.COMPONENTS
    assert bundled["tool"]["flwr"]["app"]["config"] == default_run_config()
    assert list(bundled["tool"]["flwr"]["app"]["config"]) == list(SETTINGS)


def test_children_find_the_package_where_this_process_does(monkeypatch):
    root = str(simulation.PACKAGE_ROOT)
    monkeypatch.setattr(sys, "path", [root, "/usr/lib/python3.11"])  # only as the script's folder
    assert simulation.child_pythonpath({"PYTHONPATH": "/x"}) == f"{root}{os.pathsep}/x"
    assert simulation.child_pythonpath({}) == root
    monkeypatch.setattr(sys, "path", ["", "/usr/lib/python3.11", root])  # site or PYTHONPATH
    assert simulation.child_pythonpath({"PYTHONPATH": "/x"}) is None


@pytest.mark.parametrize(
    ("line", "folder"),
    [
        ("\x1b[92mINFO \x1b[0m:      flowerbed: results go to /r/a b\n", "/r/a b"),
        ("INFO :      flowerbed: results go to /r/x (a resumed run)\n", "/r/x"),
    ],
)
def test_the_run_folder_is_read_from_the_log(line, folder):
    log = "INFO :      Starting Flower Simulation\n" + line + "INFO :      round 1\n"
    assert simulation.results_folder(log) == Path(folder)
    assert simulation.results_folder("no results line\n") is None


VALUES = ["fedprox", "it's", 'say "x"', "a b", 3, 0.05, 1e-05, True]


@pytest.mark.parametrize("value", VALUES)
def test_run_config_values_reach_flower_as_toml(value):
    text = simulation.format_run_config({"key": value})
    assert text.startswith("key=")
    assert tomllib.loads(f"v = {text.removeprefix('key=')}") == {"v": value}


def test_flwr_run_reads_the_run_config_from_a_file_so_any_string_survives(tmp_path):
    from flwr.common.config import parse_config_args

    run_config = {f"k{i}": value for i, value in enumerate([*VALUES, "both ' and \" \\ é"])}
    command, _ = simulation.flwr_run_command(run_config, 2, 1, tmp_path / "home")
    path = command[command.index("--run-config") + 1]
    assert path.endswith(".toml")
    assert parse_config_args([path]) == run_config  # as `flwr run` reads it


def test_flwr_finds_the_superlink_beside_this_interpreter_without_an_activated_venv(
    tmp_path, monkeypatch
):
    import os
    import sys
    from pathlib import Path

    scripts = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # as from `.venv/bin/flowerbed run`
    _, env = simulation.flwr_run_command({}, 2, 1, tmp_path / "home")
    assert env["PATH"].split(os.pathsep) == [scripts, "/usr/bin", "/bin"]
    # already there (an activated environment): the PATH is left as it is
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", scripts]))
    _, env = simulation.flwr_run_command({}, 2, 1, tmp_path / "home")
    assert env["PATH"] == os.pathsep.join(["/usr/bin", scripts])


def test_sweep_via_flwr_runs_the_generated_app(tmp_path, monkeypatch):
    seen = []

    def simulate(run_config, **kwargs):
        seen.append((kwargs["app_dir"] / "pyproject.toml").read_text())
        return SimulationResult(returncode=1, log="", run_dir=None, seconds=0.0)

    monkeypatch.setattr(execute, "simulate", simulate)
    state = execute.run_point(str(tmp_path / "point"), "p", {"seed": 1}, "flwr", 2)
    assert state["status"] == "failed"
    assert seen and seen[0].startswith("# Generated by flowerbed")


# --- help and version ------------------------------------------------------------------------
def test_version_names_flowerbed_and_flwr(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"flowerbed {__version__} (flwr 1.42.0")


def test_run_help_lists_every_run_config_key(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--clients" in out and "--set KEY=VALUE" in out
    listed = {line.split(" = ")[0].strip() for line in out.splitlines() if " = " in line}
    assert set(SETTINGS) <= listed
    assert "  num-server-rounds = 5  (at least 1)" in out


def test_the_version_comes_from_the_installed_metadata():
    from importlib.metadata import version

    assert __version__ == version("flowerbed")
