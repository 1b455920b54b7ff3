"""How long one pass of Flower's simulation message loop takes, for N nodes and M pending messages.

Flower's simulation engine (``flwr.server.superlink.fleet.vce.vce_api.add_messages_to_queue``)
asks its link state for each node's next message, every node in turn, then sleeps 0.1 s and
starts again. The in-memory link state (``InMemoryLinkState.get_message_ins``) answers by
scanning every stored message (and checking each one's expiry and federation), so one pass
costs about N x M checks. This script times such a pass outside a run: it registers N nodes
the way the engine does, stores M messages for the first M nodes and calls
``get_message_ins(node_id, limit=1)`` for every node, twice (the first pass delivers the
messages; the second finds only delivered ones, as the engine does until the ServerApp pulls the
replies). It reads Flower's internals (the link state, ``_register_nodes``), not its public API:
a diagnosis of Flower, which flowerbed itself never imports.

A study of the study driver (``flowerbed.experiments.study_cli``): the points are the (N, M)
cases, one run each (seed 0), one at a time (``alternate``: a timing); each row holds both
passes' seconds and what the table's caption says of the run: Flower's version, the machine's
cores, its 1-minute load average when the run started, the date.

    python benchmarks/flower_message_pass.py               # N x M in 1,000 x 100, 1,000 x 1,000,
                                                           # 10,000 x 1, 10,000 x 100
    python benchmarks/flower_message_pass.py --quick       # 100 x 10, 1,000 x 10, in seconds
    python benchmarks/flower_message_pass.py --report-only # table.md from rows.jsonl

Writes into ``benchmarks/results/flower_message_pass``: ``rows.jsonl``, ``measured.jsonl`` (one
line per invocation that measured, said under the table) and ``table.md``, which
``docs/benchmarks.md`` includes. The committed rows are the 2026-11-23 measurement, made before
the script wrote any data file: they were read back from its table (their last digits are the
table's), and no commit or command line was recorded for them. To measure anew, remove
``rows.jsonl``.
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import UTC, datetime
from functools import partial
from importlib.metadata import version
from pathlib import Path
from uuid import uuid4

from flwr.app import Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.server.superlink.fleet.vce.vce_api import _register_nodes
from flwr.server.superlink.linkstate import LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord, Task
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NOOP_FEDERATION_ID
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from flwr.superlink.federation import NoOpFederationManager
from result_tables import joined, write_table

from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import measurement_lines

RESULTS = Path(__file__).parent / "results" / "flower_message_pass"
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"  # includes table.md
BUDGETS = {  # (nodes N, pending messages M)
    "full": ((1000, 100), (1000, 1000), (10_000, 1), (10_000, 100)),
    "quick": ((100, 10), (1000, 10)),
}


class FlowerMessagePass:
    """The study (module docstring): one run per (N, M) case."""

    name = "flower_message_pass"
    budgets = BUDGETS
    default_budget = "full"
    alternate = True

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        cases = budget_of(BUDGETS, budget)
        return [Point(f"{n}x{m}", {"nodes": n, "messages": m}) for n, m in cases], [0]

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        nodes, messages = point.settings["nodes"], point.settings["messages"]
        load = os.getloadavg()[0]
        first, second = one_case(nodes, messages)
        return {
            "nodes": nodes,
            "messages": messages,
            "first": first,
            "second": second,
            "flwr": version("flwr"),
            "cores": os.cpu_count() or 0,
            "load": load,
            "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        }

    def report(self, rows: list[dict[str, Value]]) -> dict:
        return {TABLE.name: partial(table, rows)}


def one_case(num_nodes: int, num_messages: int) -> tuple[float, float]:
    """Seconds of the first and the second pass over ``num_nodes`` nodes."""
    factory = LinkStateFactory(
        FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
    )
    nodes = list(_register_nodes(num_nodes, factory))
    state = factory.state()
    run = Run.create_empty(run_id=1)
    run.primary_task_id, run.federation_id = 7, NOOP_FEDERATION_ID
    state.run_ids[1] = RunRecord(run=run)
    state.task_store[7] = Task(task_id=7, run_id=1)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 7, 1, SUPERLINK_NODE_ID
    for node in nodes[:num_messages]:
        message = Message(RecordDict(), dst_node_id=node, message_type="train")
        message.metadata.__dict__["_message_id"] = str(uuid4())
        state.store_message_ins(message)
    passes = []
    for _ in range(2):
        started = time.perf_counter()
        delivered = sum(len(state.get_message_ins(node_id=n, limit=1)) for n in nodes)
        passes.append(time.perf_counter() - started)
        assert delivered == (num_messages if len(passes) == 1 else 0), delivered
    return passes[0], passes[1]


def caption(rows: list[dict[str, Value]]) -> str:
    """What was measured, with which Flower, on what machine under what load, and when."""
    flwr = joined(rows, "flwr", lambda v: ".".join(v.split(".")[:2]))
    cores = joined(rows, "cores")
    load = statistics.median(float(r["load"]) for r in rows)
    shared = " shared with other work" if load > max(int(r["cores"]) for r in rows) else ""
    dates = sorted({r["date"] for r in rows})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return (
        f"Flower {flwr}'s InMemoryLinkState: seconds of one pass of the simulation engine's"
        " message loop (get_message_ins(node, limit=1) for every node),"
        f" `python benchmarks/flower_message_pass.py`, {cores}-core machine{shared} (load"
        f" average about {load:.1f}), {when}."
    )


def table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``table.md`` from the rows, by N then M, and the invocations that measured them."""
    rows = sorted(rows, key=lambda r: (r["nodes"], r["messages"]))
    lines = [
        caption(rows),
        "",
        "| nodes N | pending messages M | first pass s | second pass s | us per N x M |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        n, m, second = r["nodes"], r["messages"], r["second"]
        lines.append(
            f"| {n:,} | {m:,} | {r['first']:.2f} | {second:.2f} | {1e6 * second / (n * m):.1f} |"
        )
    measured = " ".join(measurement_lines(folder))
    return "\n".join(lines + (["", measured] if measured else [])) + "\n"


def report(data: Path) -> str:
    """``table.md``, from ``rows.jsonl`` (and ``measured.jsonl`` beside it) alone."""
    return table(measured_rows(data.parent), data.parent)


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(FlowerMessagePass(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
