"""flowerbed's ClientApp: each message handler hands over to the run's algorithm.

* ``query``: the handshake; reports this node's partition id and the number of partitions.
* ``train``: the algorithm's client step (``StrategySpec.client_train``).
* ``evaluate``: the algorithm's evaluation (by default, the global model on the local test split).

A ``LocalClient`` (config, partition, model helpers) is built from the context per message;
data sets and partitions are cached per process, so a Ray actor reads its files once.
"""

from __future__ import annotations

from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .client import LocalClient
from .strategies import get_strategy

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    info = MetricRecord(
        {
            "partition-id": int(context.node_config["partition-id"]),
            "num-partitions": int(context.node_config["num-partitions"]),
        }
    )
    return Message(content=RecordDict({"info": info}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    client = LocalClient.from_context(context)
    if client.partition_id in client.config.failing_partition_ids:
        raise RuntimeError(
            f"partition {client.partition_id} fails on purpose (run-config failing-partitions)"
        )
    return get_strategy(client.config.strategy).client_train(client, msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    client = LocalClient.from_context(context)
    return get_strategy(client.config.strategy).client_evaluate(client, msg)
