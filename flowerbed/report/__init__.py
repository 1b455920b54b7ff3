"""``report.html``: what a run shows, in one self-contained file built from its run folder alone.

``write_run_report(run_dir)`` reads the files a run leaves (``core.results``: config,
status, history, timings, partitions, the best model's round, and what a protocol adds:
``distill_history.json``/``distill.json``, QKT's ``kt_metrics.json``, CTL's
``ctl_metrics.json``, FedSA's ``fedsa_selection.json``) and writes ``report.html`` beside them:
the run's status (and the end of ``error.log`` when it failed), its configuration, accuracy and
loss by round (the global model on the server's test set and on the clients' local test
splits, the clients' training loss), the clinical metrics by round (``metrics.
clinical_metrics``), the partition as a clients x classes heatmap (also ``partitions.png``),
each client's accuracy at the last round, the distillation curve, and the protocol's own
results. A file a run did not write (an old run, a run that ended early, another protocol)
leaves its section out, or says it is absent when the run was meant to write it.

The page needs nothing else: no network, no server, no script; the plots are PNG images
embedded as base64 ``data:`` URIs, drawn for print (axis labels, units, legends, markers that
tell the lines apart without colour). The ServerApp writes it when a run ends, completed,
failed or interrupted (``report_at_run_end``, never fatal); ``flowerbed report RUN_DIR``
rebuilds it for any run folder (``sweep.report``). Setting ``FLOWERBED_REPORT=0`` in the
ServerApp's environment skips it (the test suite does: a report costs about a second).

The package: ``run_folder`` (the files, read once), ``markup`` (HTML: tables, sections, the
page), ``plots`` (matplotlib, embedded as PNG), ``sections`` (what every run report has),
``protocol_sections`` (what a protocol adds), ``privacy_section``, ``robustness_section`` and
``environment_section`` (what a reader must trust: the privacy spent, attacks and dropped
replies, the versions and machine); this module puts a run's sections together.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from logging import WARNING
from pathlib import Path

from flwr.common.logger import log

from ..core.results import atomic_write
from .clinical_sections import clinical_reading_section, sites_section
from .configuration import config_section
from .environment_section import environment_section
from .markup import Section, page
from .privacy_section import privacy_section
from .protocol_sections import ctl_section, distill_section, fedsa_section, qkt_section
from .robustness_section import robustness_section
from .run_folder import PARTITIONS_PNG, REPORT_FILE, RunFolder
from .sections import (
    clinical_section,
    curves_section,
    files_section,
    partition_section,
    status_section,
)

__all__ = [
    "ENV_SWITCH",
    "PARTITIONS_PNG",
    "REPORT_FILE",
    "report_at_run_end",
    "write_run_report",
    "written_report",
]

ENV_SWITCH = "FLOWERBED_REPORT"  # "0": the ServerApp writes no report at the end of a run


RUN_SECTIONS: tuple[Callable[[RunFolder], Section | None], ...] = (
    status_section,
    config_section,
    curves_section,
    clinical_section,
    clinical_reading_section,
    privacy_section,
    robustness_section,
    partition_section,
    sites_section,
    distill_section,
    qkt_section,
    ctl_section,
    fedsa_section,
    environment_section,
    files_section,
)


def write_run_report(run_dir: Path) -> Path:
    """``report.html`` (and ``partitions.png``) in ``run_dir``, from its files alone."""
    run = RunFolder(Path(run_dir))
    sections = [s for build in RUN_SECTIONS if (s := build(run)) is not None]
    # protocol-specific sections share one anchor: number them if several are present
    seen: dict[str, int] = {}
    for s in sections:
        seen[s.anchor] = seen.get(s.anchor, 0) + 1
        if seen[s.anchor] > 1:
            s.anchor += f"-{seen[s.anchor]}"
    made = time.strftime("%Y-%m-%d %H:%M")
    text = page(run.title, f"Run folder {run.path.name}; report written {made}.", sections)
    path = run.path / REPORT_FILE
    atomic_write(path, lambda f: f.write(text))
    return path


def report_at_run_end(run_dir: Path) -> None:
    """The ServerApp's report when a run ends, however it ended: never raises (a report that
    fails is a warning; the run's own outcome stands); skipped with ``FLOWERBED_REPORT=0``."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return
    try:
        write_run_report(run_dir)
    except Exception as error:  # noqa: BLE001 - the report never changes how a run ended
        log(WARNING, "flowerbed: no report.html (%s: %s)", type(error).__name__, error)


@contextmanager
def written_report(run_dir: Path) -> Iterator[None]:
    """``report_at_run_end(run_dir)`` when the block ends, however it ends."""
    try:
        yield
    finally:
        report_at_run_end(run_dir)
