"""flowerbed's ClientApp: a table of Flower message types, each answered by a phase's client half.

* ``query``: the handshake; reports this node's partition id and the number of partitions,
  and, when the server holds no data or the nodes their own, what the node's data look like
  (``data.site_reports``: counts, sizes and shapes, never a sample);
* every message type a phase declares (``Phase.MESSAGE_TYPES``: ``train`` and ``evaluate``
  for FL rounds, ``train.local_fit``, ``train.exchange``, ``query.kt_metrics``,
  ``query.ctl_share``, ``train.ctl_round``, ``train.fedsa_pretrain``,
  ``query.fedsa_saliency``, ``train.fedsa_amalgamate``): the run's
  protocol finds the phase that sent it and runs its ``client_step``.

A ``LocalClient`` (config, partition, model helpers) is built from the context per message;
data sets and partitions are cached per process, so a Ray actor reads its files once.
Training handlers carry the ``fail_on_purpose`` mod (test-only fault injection); the FL-rounds
handlers (``train``, ``evaluate``) carry ``keep_client_state``, which checkpoints the node's
``context.state`` for resumed runs (``client_state``); ``train`` also carries ``privacy_mod``
(Flower's DP mods when the run config's ``dp`` asks for them), innermost, so that a declared
attacker rewrites its reply after it, as a malicious client would.
"""

from __future__ import annotations

from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .attacks import attack_update
from .catalog import get_protocol, parse_run_config
from .client_state import keep_client_state
from .data.federation import table_labels
from .data.site_reports import NodeDataError, data_report, nodes_report_data
from .methods.ctl import ROUND as CTL_ROUND
from .methods.ctl import SHARE as CTL_SHARE
from .methods.fedsa import AMALGAMATE as FEDSA_AMALGAMATE
from .methods.fedsa import PRETRAIN as FEDSA_PRETRAIN
from .methods.fedsa import SALIENCY as FEDSA_SALIENCY
from .mods import fail_on_purpose
from .privacy import privacy_mod
from .protocols.exchange import ACTION as EXCHANGE
from .protocols.kt_metrics import ACTION as KT_METRICS
from .protocols.local_fit import ACTION as LOCAL_FIT
from .training.local_client import LocalClient

app = ClientApp()


@app.query()
def handshake(msg: Message, context: Context) -> Message:
    partition_id = int(context.node_config["partition-id"])
    info = MetricRecord(
        {
            "partition-id": partition_id,
            "num-partitions": int(context.node_config["num-partitions"]),
        }
    )
    content = RecordDict({"info": info})
    config = parse_run_config(context.run_config)
    if nodes_report_data(config):
        try:
            client = LocalClient.from_context(context, config)
        except (ValueError, OSError) as error:  # a site's unreadable data: name node and file
            raise NodeDataError(f"partition-id {partition_id}: {error}") from error
        records = data_report(
            table_labels(client.config, client.num_partitions, partition_id),
            client.data.input_shape,
            client.data.num_classes,
            str(client.config.data_path),
            (len(client.y_train), len(client.y_test)),
        )
        for name, record in records.items():
            content[name] = record
    return Message(content=content, reply_to=msg)


def run_phase_step(msg: Message, context: Context) -> Message:
    """The client half of the phase of this run's protocol that sent ``msg``."""
    config = parse_run_config(context.run_config)
    phase = get_protocol(config.strategy).protocol(config).phase_for(msg.metadata.message_type)
    return phase.client_step(LocalClient.from_context(context, config), msg)


def _action(message_type: str) -> str:
    return message_type.split(".", 1)[1]


# The table: message type -> handler (every one reaches the phase's client half).
app.train(mods=[keep_client_state, fail_on_purpose, attack_update, privacy_mod])(run_phase_step)
app.evaluate(mods=[keep_client_state])(run_phase_step)
app.train(_action(LOCAL_FIT), mods=[fail_on_purpose])(run_phase_step)
app.train(_action(EXCHANGE), mods=[fail_on_purpose])(run_phase_step)
app.query(_action(KT_METRICS))(run_phase_step)
app.query(_action(CTL_SHARE))(run_phase_step)
app.train(_action(CTL_ROUND), mods=[fail_on_purpose])(run_phase_step)
app.train(_action(FEDSA_PRETRAIN), mods=[fail_on_purpose])(run_phase_step)
app.query(_action(FEDSA_SALIENCY))(run_phase_step)
app.train(_action(FEDSA_AMALGAMATE), mods=[fail_on_purpose])(run_phase_step)
