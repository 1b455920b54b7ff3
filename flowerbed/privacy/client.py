"""The client half of differential privacy: the mod ``privacy_mod`` on the ClientApp's
``train`` handler runs Flower's mod of the run's ``dp`` mode and passes every other run through.

* ``central-client-fixed``: Flower's ``fixedclipping_mod`` clips the update to the C the
  training message carries;
* ``central-client-adaptive``: flowerbed's ``adaptive_clipping.adaptive_clipping_mod`` (not
  Flower's ``adaptiveclipping_mod``, whose bit says "clipped");
* ``local``: Flower's ``LocalDpMod`` clips the update to C and adds noise of standard
  deviation z C before it leaves the node (``local_dp_mod``), drawn from the operating system's
  entropy, never from the run's seed.

An update of exactly zero is nudged first (``guards.avoid_zero_update``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Context, Message
from flwr.clientapp.mod import LocalDpMod, fixedclipping_mod
from flwr.clientapp.typing import ClientAppCallable

from ..runtime.client_state import RECORD
from .adaptive_clipping import adaptive_clipping_mod
from .guards import avoid_zero_update
from .modes import CLIENT_ADAPTIVE, CLIENT_FIXED, LOCAL, NONE


def local_dp_mod(run_config: Mapping[str, Any]) -> LocalDpMod:
    """Flower's ``LocalDpMod`` adding noise of standard deviation z C: it computes its standard
    deviation as sensitivity x sqrt(2 ln(1.25/delta)) / epsilon (the classic calibration), so
    sensitivity C and epsilon sqrt(2 ln(1.25/delta)) / z give exactly z C; the accounting is
    ``local_epsilon``'s, not that calibration's."""
    z = float(run_config["dp-noise-multiplier"])
    clip = float(run_config["dp-clipping-norm"])
    delta = float(run_config["dp-delta"])
    return LocalDpMod(clip, clip, math.sqrt(2 * math.log(1.25 / delta)) / z, delta)


def privacy_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """The client half of the run's ``dp`` (module docstring); other runs pass through."""
    mode = context.run_config.get("dp", NONE)
    if mode not in (CLIENT_FIXED, CLIENT_ADAPTIVE, LOCAL):
        return call_next(msg, context)
    if RECORD in msg.content:  # flowerbed's bookkeeping record (client_state, already read):
        del msg.content[RECORD]  # Flower's clipping mods expect the training config alone
    sent = msg.content.array_records.get("arrays", ArrayRecord())

    def train(message: Message, ctxt: Context) -> Message:
        reply = call_next(message, ctxt)
        if not reply.has_error():
            avoid_zero_update(reply.content, sent)
        return reply

    if mode == CLIENT_FIXED:
        return fixedclipping_mod(msg, context, train)
    if mode == CLIENT_ADAPTIVE:  # not Flower's adaptiveclipping_mod, whose bit says "clipped"
        return adaptive_clipping_mod(msg, context, train)

    def train_then_fresh_entropy(message: Message, ctxt: Context) -> Message:
        reply = train(message, ctxt)
        np.random.seed()  # the noise LocalDpMod draws next comes from the OS's entropy
        return reply

    state = np.random.get_state()
    try:
        return local_dp_mod(context.run_config)(msg, context, train_then_fresh_entropy)
    finally:
        np.random.set_state(state)
