"""What ``flowerbed run`` shows of Flower's log (``run_console``), where the whole log goes, and
how a failure's first cause is read from it (``runtime.outcome.first_error``), on log lines
as Flower 1.42 and Ray write them. The real runs are in ``tests/e2e/test_flowerbed_run.py``."""

from __future__ import annotations

import io
import math
from types import SimpleNamespace

import pytest

from flowerbed.run_console import LOG_FILE, MAX_WARNINGS, MISLEADING, RunConsole
from flowerbed.runtime.history import client_accuracy_text, failures_text
from flowerbed.runtime.outcome import first_error
from flowerbed.runtime.recording_grid import short_reason

GREEN, RED, YELLOW, RESET = "\x1b[92m", "\x1b[91m", "\x1b[93m", "\x1b[0m"


def info(text: str) -> str:
    return f"{GREEN}INFO {RESET}:      {text}\n"


def warning(text: str) -> str:
    return f"{YELLOW}WARNING {RESET}:   {text}\n"


# A client's failure as Flower's simulation logs it: Ray wraps the ClientApp's exception.
RAY_TRACEBACK = f"""{RED}ERROR {RESET}:     Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/flwr/server/superlink/fleet/vce/vce_api.py", line 132, in worker
    out_mssg, updated_context = backend.process_message(message, context)
  File "/venv/lib/python3.11/site-packages/ray/_private/worker.py", line 1023, in get_objects
    raise value.as_instanceof_cause()
ray.exceptions.RayTaskError(ClientAppException): ray::ClientAppActor.run() (pid=7132, ip=192.0.2.2, repr=<flwr.simulation.ray_transport.ray_actor.ClientAppActor object at 0x7f05>)
  File "/venv/lib/python3.11/site-packages/flwr/clientapp/client_app.py", line 161, in __call__
    return self._registered_funcs[full_name](message, context)
  File "/home/me/flowerbed/flowerbed/trust/fault_injection.py", line 70, in fail_on_purpose
    raise RuntimeError(f"partition {{partition_id}} fails on purpose (run-config failing-partitions)")
RuntimeError: partition 1 fails on purpose (run-config failing-partitions)

The above exception was the direct cause of the following exception:

  File "/venv/lib/python3.11/site-packages/flwr/simulation/ray_transport/ray_actor.py", line 65, in run
    raise ClientAppException(str(ex)) from ex
flwr.clientapp.client_app.ClientAppException:
Exception ClientAppException occurred. Message: partition 1 fails on purpose (run-config failing-partitions)'>
"""

RUN = [
    "Flower configuration not found. Created default configuration at /tmp/h/config.toml\n",
    "Starting local SuperLink on 127.0.0.1:39097...\n",
    "Successfully started run 1398\n",
    info("Starting Flower Simulation"),
    f"{YELLOW}WARNING {RESET}:   Since flwr 1.32, default simulated SuperNodes changed from 10 to 2.\n",
    info("Federation `@none/default` (3 simulated SuperNodes)"),
    info("To change federation size, use the following command:"),
    info("\tflwr federation simulation-config @none/default <superlink> --num-supernodes <N>"),
    "Successfully installed flowerbed to /tmp/h/apps/flowerbed.\n",
    info("flowerbed: loading digits (the test set and the model)"),
    info("flowerbed: 3 of 3 asked nodes answered the handshake in 2.0 s (3 connected)"),
    info(
        "flowerbed: digits, 3 clients, iid partition; label counts per client:\nclient  0  1\n     0  5  6"
    ),
    "(ClientAppActor pid=7132) some output of an actor\n",
    info("Starting RoundsStrategy strategy:"),
    info("\t├── Number of rounds: 1"),
    info("flowerbed round 0/1: test acc 0.1417 loss 2.3041 (initial model)"),
    info("[ROUND 1/1]"),
    info("aggregate_train: Received 3 results and 0 failures"),
    info("\t└──> Aggregated MetricRecord: {'train-loss': 2.0}"),
    info("flowerbed round 1/1: test acc 0.5 loss 2.1 | clients 3 ok, 0 failed"),
    info("Manually terminating ClientAppActor"),
    info("flowerbed: final accuracy 0.5000; results in RUN_DIR"),
]


def fed(lines: list[str], run_dir, verbose: bool = False) -> tuple[RunConsole, list[str]]:
    out = io.StringIO()
    console = RunConsole(3, verbose=verbose, out=out, prefix="flowerbed run: ")
    for line in lines:
        for part in line.replace("RUN_DIR", str(run_dir)).splitlines(keepends=True):
            console.feed(part)
    console.close(run_dir.parent)
    return console, out.getvalue().splitlines()


def with_results(run_dir) -> list[str]:
    at = RUN.index(info("flowerbed round 0/1: test acc 0.1417 loss 2.3041 (initial model)"))
    return [*RUN[:at], info(f"flowerbed: results go to {run_dir}"), *RUN[at:]]


def test_the_terminal_shows_flowerbeds_story_and_the_run_folder_keeps_the_whole_log(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = with_results(run_dir)
    console, shown = fed(lines, run_dir)
    assert shown == [
        "flowerbed run: run 1398 started: 3 simulated SuperNodes come up on Ray",
        "flowerbed: loading digits (the test set and the model)",
        "flowerbed: 3 of 3 asked nodes answered the handshake in 2.0 s (3 connected)",
        "flowerbed: digits, 3 clients, iid partition; label counts per client:",
        "client  0  1",
        "     0  5  6",
        f"flowerbed: results go to {run_dir}",
        "flowerbed round 0/1: test acc 0.1417 loss 2.3041 (initial model)",
        "flowerbed round 1/1: test acc 0.5 loss 2.1 | clients 3 ok, 0 failed",
        f"flowerbed: final accuracy 0.5000; results in {run_dir}",
    ]
    assert console.log_path == run_dir / LOG_FILE
    log = console.log_path.read_text().splitlines()
    every = "".join(lines).replace("RUN_DIR", str(run_dir))
    assert len(log) == len(every.splitlines())  # every line, those before the folder was known too
    assert "Manually terminating ClientAppActor" in log[-2] and "\x1b" not in "".join(log)


def test_misleading_lines_are_never_shown_not_even_verbose(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _, shown = fed(with_results(run_dir), run_dir, verbose=True)
    assert any("aggregate_train" in line for line in shown)  # verbose: Flower's own lines too
    for text in MISLEADING:
        assert not any(text in line for line in shown), text


def test_without_a_run_folder_the_log_goes_to_the_fallback_folder(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    console, shown = fed([*RUN[:6], RAY_TRACEBACK], home / "run-that-never-was")
    assert console.run_dir is None and console.log_path == home / LOG_FILE
    assert "RuntimeError: partition 1" in console.log_path.read_text()
    assert not any("Traceback" in line or "File" in line for line in shown)


def test_a_burst_of_warnings_is_cut_and_counted(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    burst = [warning(f"flowerbed: partition {i}'s reply was dropped: NaN") for i in range(9)]
    lines = [info(f"flowerbed: results go to {run_dir}"), *burst, info("flowerbed round 1/1: ok")]
    _, shown = fed(lines, run_dir)
    dropped = [line for line in shown if "was dropped" in line]
    assert len(dropped) == MAX_WARNINGS and dropped[0].endswith("[warning]")
    assert shown[-2] == f"flowerbed run: {9 - MAX_WARNINGS} more warnings, in {run_dir / LOG_FILE}"
    assert shown[-1] == "flowerbed round 1/1: ok"


def test_the_first_error_is_the_clients_exception_and_where_it_was_raised():
    log = "".join(RUN[:10]) + RAY_TRACEBACK + RAY_TRACEBACK.replace("partition 1", "partition 2")
    assert first_error(log) == (
        "RuntimeError: partition 1 fails on purpose (run-config failing-partitions)"
        " (flowerbed/trust/fault_injection.py:70 in fail_on_purpose)"
    )


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("", None),
        (info("flowerbed: round 1 done"), None),
        (  # a traceback of the ServerApp: the frame is outside flowerbed
            (
                'Traceback (most recent call last):\n  File "/usr/lib/python3.11/json/decoder.py",'
                " line 355, in raw_decode\nKeyError: 'model'\n"
            ),
            "KeyError: 'model' (json/decoder.py:355 in raw_decode)",
        ),
        ("flowerbed.settings.ConfigError: seed must be >= 0\n", "ConfigError: seed must be >= 0"),
    ],
)
def test_first_error(log, expected):
    assert first_error(log) == expected


def test_an_error_replys_reason_is_the_clients_exception_without_flowers_debris():
    reply = SimpleNamespace(
        error=SimpleNamespace(reason="<class 'ray.exceptions.RayTaskError'>:<'" + RAY_TRACEBACK)
    )
    assert short_reason(reply) == (
        "RuntimeError: partition 1 fails on purpose (run-config failing-partitions)"
        " (flowerbed/trust/fault_injection.py:70 in fail_on_purpose)"
    )
    bare = SimpleNamespace(
        error=SimpleNamespace(reason="Exception ClientAppException occurred. Message: boom'>")
    )
    assert short_reason(bare) == "boom"


def test_a_failed_rounds_reason_counts_the_failures_and_names_the_first():
    row = {"round": 1, "clients_failed": 3, "failures": ["partition 0: A", "partition 1: B", "c"]}
    assert failures_text(row) == "3 failed; partition 0: A; 2 more in history.json"
    assert failures_text({"round": 1, "failures": ["partition 4: A"]}) == "1 failed; partition 4: A"
    assert failures_text({"round": 1}) == "no reply"


@pytest.mark.parametrize(
    "row, expected",
    [
        (
            {"client_accuracy": 0.8, "client_accuracy_std": 0.05},
            "client acc 0.8000 (sample-weighted) ± 0.0500 (std over clients)",
        ),
        (
            {"client_accuracy": math.nan, "client_accuracy_unweighted_mean": 0.7},
            "client acc 0.7000 (unweighted mean)",  # one client: no spread, no NaN
        ),
        ({}, "no client accuracy"),  # fraction-evaluate=0
        ({"client_accuracy": math.nan, "client_accuracy_std": math.nan}, "no client accuracy"),
    ],
)
def test_the_round_line_never_prints_nan_for_client_accuracy(row, expected):
    assert client_accuracy_text(row) == expected
