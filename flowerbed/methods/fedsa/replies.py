"""What FedSA's replies must hold (``trust.reply_checks``): a reply that fails is dropped like
a failed owner, with the reason, and the round goes on with the others.

* Teacher pre-training (``train.fedsa_pretrain``): no array record; the ``metrics`` record:
  ``num-examples`` (within the owner's training split), ``partition-id``, ``train-loss``,
  ``local-epochs`` (1 to ``kt-local-max-epochs``), ``accuracy`` in [0, 1] (the teacher on the
  owner's own test data).
* Saliency (``query.fedsa_saliency``): the array record ``saliency`` only, with ``maps`` in
  the probes' dtype, one map per probe the server sent: the probes' shape (``input-grad``) or
  (M, H, W) (``gradcam``); values >= 0 (gradients' magnitudes, Grad-CAM in [0, 1]);
  ``num-examples`` the number of probes (not bounded by the owner's data).
* Amalgamation (``train.fedsa_amalgamate``): the target model the server sent, same keys,
  shapes and dtypes (``model_like_sent``); ``num-examples`` within the training split and
  ``train-loss``.
"""

from __future__ import annotations

from flwr.app import RecordDict

from ...settings import RunConfig
from ...trust.reply_checks import (
    FRACTION,
    LOSS,
    TRAIN,
    UNBOUNDED,
    Metric,
    NodeSizes,
    RejectedReply,
    ReplyRules,
    Schema,
    client_metrics,
    model_like_sent,
    no_arrays,
)


def pretrain_rules(config: RunConfig) -> ReplyRules:
    """A teacher's pre-training reply (module docstring)."""
    metrics = client_metrics(
        **{
            "train-loss": LOSS,
            "local-epochs": Metric(low=1, high=config.kt_local_max_epochs, whole=True),
            "accuracy": FRACTION,
        }
    )
    return ReplyRules(
        arrays=no_arrays, metrics={"metrics": metrics}, list_metrics=frozenset(), examples=TRAIN
    )


def saliency_rules(config: RunConfig) -> ReplyRules:
    """A saliency reply (module docstring)."""

    def schema(sent: RecordDict) -> Schema:
        probes = sent.array_records["probes"]["inputs"]
        shape = tuple(probes.shape)
        if config.fedsa_saliency == "gradcam":
            shape = (shape[0], *shape[-2:])
        return {"saliency": {"maps": (shape, probes.dtype)}}

    return ReplyRules(
        arrays=schema,
        metrics={"metrics": client_metrics()},
        list_metrics=frozenset(),
        examples=UNBOUNDED,
        check=check_saliency,
    )


def check_saliency(
    reply: RecordDict, sent: RecordDict, partition: int | None, sizes: NodeSizes | None
) -> None:
    """Maps >= 0, and ``num-examples`` the number of probes."""
    if (reply.array_records["saliency"]["maps"].numpy() < 0).any():
        raise RejectedReply("saliency/maps hold negative values")
    probes = sent.array_records["probes"]["inputs"].shape[0]
    claimed = reply.metric_records["metrics"]["num-examples"]
    if claimed != probes:
        raise RejectedReply(f"metrics/num-examples={claimed!r}, but {probes} probes were sent")


def amalgamate_rules(config: RunConfig) -> ReplyRules:
    """An amalgamation reply (module docstring)."""
    return ReplyRules(
        arrays=model_like_sent,
        metrics={"metrics": client_metrics(**{"train-loss": LOSS})},
        list_metrics=frozenset(),
        examples=TRAIN,
    )
