"""Where a result's numbers come from: the commit, the command, the machine, the versions and
the date of the measurement, written beside the results and read back as one sentence.

* ``record_provenance(folder, argv)``: ``measured.json`` beside a benchmark's data file, one
  record for the measurement that wrote it (a rerun replaces it);
* ``append_provenance(folder, study_record(folder, command), runs)``: one line of
  ``measured.jsonl`` per invocation of a study that measured something (``driver.run_study``,
  which takes the record when it starts): a resumable study is measured over several
  invocations, perhaps at several commits, and each says what it ran;
* ``provenance_line`` and ``provenance_lines`` read them back for a table or a report,
  ``recorded_runs`` how many runs the invocations measured (a report says how many of its rows
  none records);
  ``measurement_lines`` reads both, for a benchmark measured by a script before it became a
  study and by the study driver since.

The commit is the repository's that holds this file, when it is a git checkout (an installed
wheel has none: the commit is then empty and the flowerbed version says what ran), and whether
its tracked files, outside the results folder itself, had uncommitted changes.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..core.results import atomic_write

PROVENANCE = "measured.json"  # a benchmark's one measurement
INVOCATIONS = "measured.jsonl"  # a study's measurements, one line per invocation
UNRECORDED = "provenance.json"  # written by hand for results measured before either existed
ROOT = Path(__file__).resolve().parents[2]  # the checkout (or site-packages, for a wheel)
VERSIONED = ("flowerbed", "flwr", "torch", "numpy")


def git(*args: str) -> str:
    """A git command's output in ``ROOT``; empty outside a checkout or without git."""
    try:
        run = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    except OSError:
        return ""
    return run.stdout.strip() if run.returncode == 0 else ""


def package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def provenance_record(command: str, results: Path | str) -> dict:
    """The record of a measurement made now by ``command``; ``results``: the folder
    whose changes do not count as uncommitted, since a measurement rewrites its own data files
    before it records where they come from (relative to the checkout, or any path: one outside
    the checkout excludes nothing)."""
    commit = git("rev-parse", "HEAD")
    try:
        inside = Path(ROOT, results).resolve().relative_to(ROOT).as_posix()
        excluded = [f":(exclude){inside}"] if inside != "." else []
    except ValueError:
        excluded = []
    changes = git("status", "--porcelain", "--untracked-files=no", "--", ".", *excluded)
    return {
        "commit": commit,
        "uncommitted_changes": bool(changes),
        "command": command,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}"
        f" {platform.release()}, Python {sys.version.split()[0]}",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


def record_provenance(folder: Path, argv: list[str], file: str = PROVENANCE) -> None:
    """Write ``measured.json`` (or ``file``, for a second experiment measured into the same
    folder at another time) beside a benchmark's data file (module docstring)."""
    record = provenance_record(" ".join(["python", *argv]), "benchmarks/results")
    atomic_write(Path(folder) / file, lambda f: f.write(json.dumps(record, indent=1) + "\n"))


def study_record(folder: Path, command: str) -> dict:
    """The record of a study invocation, taken when it starts (the code it runs is the code of
    that moment, whatever is committed while it runs), with the versions of ``VERSIONED`` (an
    installed flowerbed may have no commit)."""
    return provenance_record(command, Path(folder).resolve()) | {
        "versions": {name: package_version(name) for name in VERSIONED}
    }


def append_provenance(folder: Path, record: dict, runs: int) -> None:
    """One line of ``measured.jsonl`` in ``folder``: ``record`` (``study_record``) of an
    invocation that ran ``runs`` runs."""
    with open(Path(folder) / INVOCATIONS, "a") as f:
        f.write(json.dumps(record | {"runs": runs}, sort_keys=True) + "\n")


def commit_text(record: dict) -> str:
    dirty = " with uncommitted changes" if record["uncommitted_changes"] else ""
    if record["commit"]:
        return f"at commit {record['commit'][:10]}{dirty}"
    flowerbed = record.get("versions", {}).get("flowerbed", "unknown")
    return f"with flowerbed {flowerbed} (no git checkout)"


def provenance_line(folder: Path, file: str = PROVENANCE) -> str:
    """One sentence naming the commit, command, machine and date of ``measured.json`` (or of
    ``file``)."""
    path = Path(folder) / file
    if not path.is_file():
        return unrecorded_provenance_line(folder)
    record = json.loads(path.read_text())
    return (
        f"Measured on {record['date']} {commit_text(record)}, on {record['machine']}, by"
        f" `{record['command']}`."
    )


def invocations(folder: Path) -> list[dict]:
    """The records of ``measured.jsonl``, one per invocation (none when there is no file; a
    line a kill cut short is left out)."""
    path = Path(folder) / INVOCATIONS
    if not path.is_file():
        return []
    records = []
    for text in path.read_text().splitlines():
        try:
            records.append(json.loads(text))
        except json.JSONDecodeError:
            continue
    return records


def provenance_lines(folder: Path) -> list[str]:
    """One sentence per invocation in ``measured.jsonl`` (``invocations``)."""
    lines = []
    for record in invocations(folder):
        runs = f"{record['runs']} run" + ("s" if record["runs"] != 1 else "")
        lines.append(
            f"{runs} on {record['date']} {commit_text(record)}, on {record['machine']}, by"
            f" `{record['command']}`."
        )
    return lines


def recorded_runs(folder: Path) -> int:
    """How many runs the invocations in ``measured.jsonl`` measured, all together."""
    return sum(int(record["runs"]) for record in invocations(folder))


def measurement_lines(folder: Path) -> list[str]:
    """Where the rows in ``folder`` were measured: ``measured.json``'s sentence
    (``provenance_line``) where there is one, then ``Measured: `` and the sentence of each
    invocation in ``measured.jsonl`` (``provenance_lines``); none where neither exists."""
    first = [provenance_line(folder)] if (Path(folder) / PROVENANCE).is_file() else []
    return first + [f"Measured: {line}" for line in provenance_lines(folder)]


def unrecorded_provenance_line(folder: Path) -> str:
    """For results measured before ``measured.json`` existed: what ``provenance.json`` (written
    by hand from ``git log``) says is known, the commit the data file was last written at."""
    path = Path(folder) / UNRECORDED
    if not path.is_file():
        return "Provenance not recorded (measured before measured.json existed)."
    record = json.loads(path.read_text())
    written = record["last_written_at"]
    evidence = f"; {record['evidence']}" if "evidence" in record else ""
    return (
        f"Measured before provenance was recorded: `{record['data']}` was last written at commit"
        f" {written['commit'][:10]} ({written['date']}){evidence}; the commit, command, machine"
        f" and date of the measurement are not known (`{UNRECORDED}`)."
    )
