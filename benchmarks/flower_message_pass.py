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

    python benchmarks/flower_message_pass.py            # N x M in 1,000 x 100, 1,000 x 1,000,
                                                        # 10,000 x 1, 10,000 x 100
"""

from __future__ import annotations

import argparse
import time
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

CASES = ((1000, 100), (1000, 1000), (10_000, 1), (10_000, 100))


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args()
    print("| nodes N | pending messages M | first pass s | second pass s | us per N x M |")
    print("|---|---|---|---|---|")
    for num_nodes, num_messages in CASES:
        first, second = one_case(num_nodes, num_messages)
        per_check = 1e6 * second / (num_nodes * num_messages)
        print(
            f"| {num_nodes:,} | {num_messages:,} | {first:.2f} | {second:.2f} | {per_check:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
