"""What CTL's replies must hold (``trust.reply_checks``): every node is untrusted, and a
share or a round reply that fails is dropped like a failed client, with the reason.

* A share (``query.ctl_share``): the array record ``share`` only, float64: ``centroids``
  (2, d), ``counts`` (2,), ``moments`` (2, 4, d), d the data set's number of features; no
  metric record. ``counts`` are whole numbers >= 0 that sum to at least 1 and at most the
  node's training split (the size the server knows for its partition, ``NodeSizes.train``): a
  node can neither drop out of every distillation loss by claiming no sample nor dominate the
  representative weights n_h / n by claiming millions. A class counted 0 is a placeholder:
  its centroid and moments are all zeros (``rules.node_share``); a share that claims no
  sample of a class and still sends data for it is rejected.
* A round reply (``train.ctl_round``): the array record ``shared`` only, float64:
  ``predictions`` (2K,), one per representative the server sent, each a probability in
  [0, 1]; ``coefficients`` (K,), the node's row of energy coefficients (in [0, 1] with
  ``ctl-clip-h``). The ``metrics`` record: ``num-examples`` (within the training split),
  ``partition-id``, ``train-loss`` (NaN in round 0), ``accuracy`` and ``nonlocal-accuracy`` in
  [0, 1] (NaN: no other task), ``task-accuracies`` (1 + ``ctl-tasks`` values in [0, 1]),
  ``guests`` (distinct node indices other than the node's own), ``lambdas`` (one per guest),
  ``clipped`` (a count).
"""

from __future__ import annotations

import numpy as np
from flwr.app import RecordDict

from ...settings import RunConfig
from ...trust.reply_checks import (
    COUNT,
    FRACTION,
    LOSS,
    TRAIN,
    Metric,
    NodeSizes,
    RejectedReply,
    ReplyRules,
    Schema,
    client_metrics,
)
from .rules import NUM_CLASSES

FLOAT = "float64"


def share_rules(features: int | None) -> ReplyRules:
    """A share's rules (module docstring); ``features``: d (None: not known yet, before the
    phase's check: a share then matches no schema)."""

    def schema(sent: RecordDict) -> Schema:
        d = -1 if features is None else features
        return {
            "share": {
                "centroids": ((NUM_CLASSES, d), FLOAT),
                "counts": ((NUM_CLASSES,), FLOAT),
                "moments": ((NUM_CLASSES, 4, d), FLOAT),
            }
        }

    return ReplyRules(arrays=schema, metrics={}, examples=TRAIN, check=check_share)


def check_share(
    reply: RecordDict, sent: RecordDict, partition: int | None, sizes: NodeSizes | None
) -> None:
    """The class counts within the node's training split, zero-count classes without data."""
    share = reply.array_records["share"]
    counts = share["counts"].numpy()
    centroids, moments = share["centroids"].numpy(), share["moments"].numpy()
    if (counts < 0).any() or (counts != np.floor(counts)).any():
        raise RejectedReply(f"share/counts={counts.tolist()} are not whole numbers >= 0")
    if counts.sum() < 1:
        raise RejectedReply("share/counts claim no training sample at all")
    if sizes is not None and counts.sum() > sizes.train:
        raise RejectedReply(
            f"share/counts claim {int(counts.sum())} samples, above the {sizes.train} of the"
            " node's training split"
        )
    for c in np.flatnonzero(counts == 0):
        if centroids[c].any() or moments[c].any():
            raise RejectedReply(
                f"share/counts claim no sample of class {int(c)}, but its centroid or moments"
                " hold data"
            )


def round_rules(config: RunConfig, num_nodes: int | None) -> ReplyRules:
    """A round reply's rules (module docstring); ``num_nodes``: K (None: not known yet)."""
    last = np.inf if num_nodes is None else num_nodes - 1
    metrics = client_metrics(
        **{
            "train-loss": LOSS,
            "accuracy": FRACTION,
            "nonlocal-accuracy": FRACTION,
            "task-accuracies": Metric(
                low=0, high=1, is_list=True, length=1 + config.ctl_tasks, nan=True
            ),
            "guests": Metric(low=0, high=last, whole=True, is_list=True),
            "lambdas": Metric(is_list=True),
            "clipped": COUNT,
        }
    )
    return ReplyRules(
        arrays=round_schema,
        metrics={"metrics": metrics},
        list_metrics=frozenset(),
        examples=TRAIN,
        check=clipped_round if config.ctl_clip_h else check_round,
    )


def round_schema(sent: RecordDict) -> Schema:
    """``shared``: a prediction per representative sent, a coefficient per node."""
    board = sent.array_records["board"]
    representatives, nodes = board["representatives"].shape[0], board["moments"].shape[0]
    return {
        "shared": {"predictions": ((representatives,), FLOAT), "coefficients": ((nodes,), FLOAT)}
    }


def check_round(
    reply: RecordDict, sent: RecordDict, partition: int | None, sizes: NodeSizes | None
) -> None:
    """Predictions are probabilities; one lambda per guest, guests distinct, not the node."""
    predictions = reply.array_records["shared"]["predictions"].numpy()
    if ((predictions < 0) | (predictions > 1)).any():
        raise RejectedReply("shared/predictions hold values outside [0, 1]")
    metrics = reply.metric_records["metrics"]
    guests, lambdas = list(metrics["guests"]), list(metrics["lambdas"])
    if len(lambdas) != len(guests):
        raise RejectedReply(f"metrics/lambdas has {len(lambdas)} values for {len(guests)} guests")
    if len(set(guests)) != len(guests) or partition in guests:
        raise RejectedReply(f"metrics/guests={guests} repeat a node or name the node itself")


def clipped_round(
    reply: RecordDict, sent: RecordDict, partition: int | None, sizes: NodeSizes | None
) -> None:
    """``check_round``, and coefficients clipped to [0, 1] (``ctl-clip-h``)."""
    check_round(reply, sent, partition, sizes)
    coefficients = reply.array_records["shared"]["coefficients"].numpy()
    if ((coefficients < 0) | (coefficients > 1)).any():
        raise RejectedReply("shared/coefficients hold values outside [0, 1] (ctl-clip-h)")
