"""Clipping a client's model update to a norm bound: the server's ``max-update-norm`` (the
recording grid, for replies that passed their checks) and adaptive differential privacy
(``privacy.adaptive_clipping``) apply the same rule. Written by hand: Flower's DP wrappers
clip inside their own aggregation and offer no function for one reply."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

# The metric flowerbed's client mod for adaptive clipping adds to a training reply: 1 when the
# update's norm was at most the C the message carried (left unclipped), else 0. Not Flower's
# ``norm_bit`` (1 when clipped), so that a reply of Flower's mod is refused instead of read
# with the opposite sense. Declared here, on the ground floor, because the history leaves it
# out of the clients' metrics too (``runtime.history``).
KEY_UNCLIPPED = "dp-unclipped"


def clip_update(reply: RecordDict, sent: RecordDict, max_norm: float) -> bool:
    """Clip the update of the reply's ``arrays`` record to ``max_norm`` (in place); whether it
    was clipped.

    u = w - g over every floating-point entry (Flower's DP fixed-clipping wrappers take the
    same whole-record norm); w' = g + u min(1, C / ||u||), computed in float64 and stored in
    each entry's own dtype. Integer entries (batch-norm counters) are left as sent by the
    client.
    """
    arrays = {key: array.numpy() for key, array in reply.array_records["arrays"].items()}
    sent_arrays = {key: array.numpy() for key, array in sent.array_records["arrays"].items()}
    floats = [key for key, v in arrays.items() if np.issubdtype(v.dtype, np.inexact)]
    update = {key: arrays[key].astype(np.float64) - sent_arrays[key] for key in floats}
    norm = float(np.sqrt(sum(np.square(u).sum() for u in update.values())))
    if norm <= max_norm:
        return False
    factor = max_norm / norm
    clipped = {
        key: Array(np.array((sent_arrays[key] + factor * update[key]).astype(v.dtype), order="C"))
        if key in update
        else Array(v)
        for key, v in arrays.items()
    }
    reply["arrays"] = ArrayRecord(clipped)
    return True
