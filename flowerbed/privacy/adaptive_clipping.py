"""Adaptive clipping as Andrew et al., "Differentially Private Learning with Adaptive
Clipping" (NeurIPS 2021), Algorithm 1, specifies it: flowerbed's classes for the ``dp`` modes
``central-server-adaptive`` and ``central-client-adaptive`` (``server.wrap`` builds them,
``client.privacy_mod`` runs the client mod). docs/privacy.md says the same for users.

The algorithm, per round t, with m sampled clients, the clipping norm C_t, the target quantile
gamma (the share of updates left unclipped), the learning rate eta and the two noise scales:

* client i's update Delta_i is clipped to C_t, and its bit b_i = 1[||Delta_i|| <= C_t] says
  whether it was left *unclipped*;
* the server adds Gaussian noise of standard deviation z_update C_t to the sum of the clipped
  updates (z_update C_t / m on their mean): C_t, the norm these updates were clipped with;
* it releases b~ = (sum_i b_i + N(0, sigma_count^2)) / m and, after the round, sets
  C_{t+1} = C_t exp(-eta (b~ - gamma)): too many updates unclipped (b~ > gamma) shrinks C, too
  few grows it, so C moves toward the gamma-quantile of the update norms;
* z_update = (z^-2 - (2 sigma_count)^-2)^(-1/2): the pair of releases is as private as one
  Gaussian release with multiplier z (the paper's Theorem 1), the z flowerbed accounts.

Why Flower 1.42's ``DifferentialPrivacyServerSideAdaptiveClipping``,
``DifferentialPrivacyClientSideAdaptiveClipping`` (``flwr/serverapp/strategy/
dp_adaptive_clipping.py``) and ``adaptiveclipping_mod`` (``flwr/clientapp/mod/
centraldp_mods.py``) are not used as they are:

1. *the count has the wrong sense.* Flower's bit (``norm_bit``, from
   ``adaptive_clip_inputs_inplace``: ``scaling_factor < 1``) is 1 when the update was
   *clipped*, and its wrappers feed the noised clipped fraction into
   C <- C exp(-eta (fraction - target)), the rule the paper writes for the *unclipped*
   fraction. C then moves away from the quantile: with every update of norm 3 (target 0.5,
   eta 0.2) it went from 1 to about 0.08, or from 10 to about 130, in 25 rounds
   (``python benchmarks/privacy.py --adaptive``);
2. *the noise is scaled by the next round's norm.* Both wrappers update C
   (``_geometric_update``) before ``_add_noise_to_aggregated_arrays`` reads it, so the updates
   clipped to C_t get noise z_update C_{t+1} / m: when C shrinks (by up to exp(-eta/2) a round,
   0.905 at eta 0.2) the noise is below what the accounting assumes, and the epsilon reported
   is below the epsilon spent.

flowerbed subclasses them (their constructors, the noise split ``compute_adaptive_noise_params``,
``configure_train``, evaluation and summaries are Flower's) and replaces the steps that carry
these defects: ``aggregate_train`` (clip, count the *unclipped* updates, noise with the C the
updates were clipped with, then update C) and the client mod (``adaptive_clipping_mod``, which
reports ``KEY_UNCLIPPED``, the unclipped bit, under a name of its own: a Flower mod's
``norm_bit`` is refused rather than read with the opposite sense).

``dp-clipped-quantile`` keeps its run-config meaning, the share of updates C aims to *clip*
(Flower's ``target_clipped_quantile``); the paper's gamma, the share left unclipped and the
quantile of the norms C moves toward, is one minus it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from logging import ERROR, INFO

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp.mod import fixedclipping_mod
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.constant import ErrorCode
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
)
from flwr.serverapp.strategy.dp_fixed_clipping import validate_replies
from flwr.supercore.differential_privacy import (
    KEY_CLIPPING_NORM,
    add_gaussian_noise_inplace,
    compute_stdv,
    get_norm,
)

from ..core.clipping import KEY_UNCLIPPED, clip_update


class AndrewEtAlAdaptive:
    """What flowerbed's two adaptive wrappers add to Flower's base class
    (``DifferentialPrivacyAdaptiveBase``): the round's clipping norm, the noise scaled by it,
    and the update of C from the noised unclipped fraction after the round.

    Attributes: ``clipping_norm`` (Flower's): the C the next round clips with;
    ``round_clipping_norm``: the C of the round configured last (the norm its updates are
    clipped with; the initial C before any round); ``unclipped_fraction``: b~ of that round,
    None until it released its count (and for a round that aggregated nothing)."""

    clipping_norm: float
    clip_norm_lr: float
    clipped_count_stddev: float
    noise_multiplier: float  # z_update, after Flower's split of the z the user asked for
    num_sampled_clients: int
    target_clipped_quantile: float  # Flower's name: the share of updates C aims to clip

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)  # Flower's wrapper (the class after this in the MRO)
        self.round_clipping_norm = float(self.clipping_norm)
        self.unclipped_fraction: float | None = None

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Flower's (client side: it sends this round's C to the clients), the round's C kept
        as the norm its updates are clipped with."""
        self._begin_round()
        return super().configure_train(server_round, arrays, config, grid)

    @property
    def target_quantile(self) -> float:
        """The paper's gamma: the share of updates C aims to leave unclipped."""
        return 1.0 - self.target_clipped_quantile

    def _begin_round(self) -> None:
        self.round_clipping_norm = float(self.clipping_norm)
        self.unclipped_fraction = None

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's reply checks, the updates clipped to this round's C and counted
        (``count_unclipped``, the subclass's), the mean, then ``_release``."""
        replies = list(replies)
        if not replies or not validate_replies(replies, self.num_sampled_clients):
            return None, None
        unclipped = self.count_unclipped(replies)
        aggregated, metrics = self.strategy.aggregate_train(server_round, replies)
        return self._release(aggregated, unclipped, len(replies)), metrics

    def count_unclipped(self, replies: list[Message]) -> int:
        """The replies whose update's norm was at most this round's C (clipping them, where
        the server clips)."""
        raise NotImplementedError

    def _release(
        self, aggregated: ArrayRecord | None, unclipped: int, total: int
    ) -> ArrayRecord | None:
        """The round's two releases, then the next C: noise of standard deviation
        z_update C_t / m on the mean (C_t: the norm the updates were clipped with; Flower
        scales it by C_{t+1}), and the noised unclipped fraction that updates C."""
        clip = self.round_clipping_norm
        if aggregated:
            arrays = aggregated.to_numpy_ndarrays()
            stdv = compute_stdv(self.noise_multiplier, clip, self.num_sampled_clients)
            add_gaussian_noise_inplace(arrays, stdv)
            log(INFO, "aggregate_train: central DP noise with %.4f stdev added", stdv)
            aggregated = ArrayRecord(
                {k: Array(np.asarray(v)) for k, v in zip(aggregated.keys(), arrays, strict=True)}
            )
        fraction = float(np.random.normal(unclipped, self.clipped_count_stddev)) / total
        self.unclipped_fraction = fraction
        self.clipping_norm = clip * math.exp(-self.clip_norm_lr * (fraction - self.target_quantile))
        log(
            INFO,
            "adaptive clipping: C %.4g used, noised unclipped fraction %.3f, next C %.4g",
            clip,
            fraction,
            self.clipping_norm,
        )
        return aggregated


class AdaptiveClippingServerSide(AndrewEtAlAdaptive, DifferentialPrivacyServerSideAdaptiveClipping):
    """Central DP with server-side adaptive clipping as Andrew et al. specify it (module
    docstring): Flower's wrapper with ``aggregate_train`` replaced (Flower's counts the clipped
    updates and scales the noise by the updated C)."""

    def count_unclipped(self, replies: list[Message]) -> int:
        """Each reply's update clipped to this round's C in place by the server's one clipping
        (``core.clipping.clip_update``: the whole-model norm in float64), the unclipped
        ones counted."""
        sent = RecordDict({"arrays": self.current_arrays})
        unclipped = 0
        for reply in replies:
            names = list(reply.content.array_records)
            if names != ["arrays"]:  # one model per reply: one clipped update
                raise AggregationError(
                    "server-side adaptive clipping expects exactly one ArrayRecord 'arrays' per"
                    f" reply, node {reply.metadata.src_node_id} sent {names}"
                )
            unclipped += not clip_update(reply.content, sent, self.round_clipping_norm)
        log(
            INFO,
            "aggregate_train: updates clipped to %.4f; %d of %d unclipped",
            self.round_clipping_norm,
            unclipped,
            len(replies),
        )
        return unclipped


class AdaptiveClippingClientSide(AndrewEtAlAdaptive, DifferentialPrivacyClientSideAdaptiveClipping):
    """Central DP with client-side adaptive clipping as Andrew et al. specify it (module
    docstring): Flower's wrapper (which sends C in the training config) with ``aggregate_train``
    replaced; the clients run ``adaptive_clipping_mod``, not Flower's ``adaptiveclipping_mod``
    (whose bit says *clipped*)."""

    def count_unclipped(self, replies: list[Message]) -> int:
        """The clients clipped their updates; their mod reported the bit."""
        return sum(unclipped_bit(reply) for reply in replies)


def unclipped_bit(reply: Message) -> int:
    """The bit ``adaptive_clipping_mod`` put in ``reply``'s metrics; AggregationError if none."""
    for record in reply.content.metric_records.values():
        if KEY_UNCLIPPED in record:
            return int(bool(record[KEY_UNCLIPPED]))
    raise AggregationError(
        f"node {reply.metadata.src_node_id}'s training reply has no '{KEY_UNCLIPPED}' metric:"
        " central-client-adaptive needs flowerbed's adaptive_clipping_mod on the client (Flower's"
        " adaptiveclipping_mod reports 'norm_bit', which is 1 when the update was clipped)"
    )


def adaptive_clipping_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """The client half of ``central-client-adaptive``: Flower's ``fixedclipping_mod`` clips
    the update to the C in the training config (the clipping, checks and errors of Flower's
    ``adaptiveclipping_mod``), and the reply's metrics get ``KEY_UNCLIPPED``: 1 when the
    update's norm was at most C. Flower's ``adaptiveclipping_mod`` is not used: its
    ``norm_bit`` is 1 when the update was clipped, the opposite of the paper's b_i."""
    norms: list[float] = []

    def measured(message: Message, ctxt: Context) -> Message:
        reply = call_next(message, ctxt)
        if not reply.has_error() and len(reply.content.array_records) == 1:
            (sent,) = message.content.array_records.values()
            (got,) = reply.content.array_records.values()
            if list(sent.keys()) == list(got.keys()):  # else fixedclipping_mod refuses it
                update = [
                    np.subtract(x, y)
                    for x, y in zip(got.to_numpy_ndarrays(), sent.to_numpy_ndarrays(), strict=True)
                ]
                norms.append(get_norm(update))
        return reply

    reply = fixedclipping_mod(msg, context, measured)
    if reply.has_error() or not norms:
        return reply
    if len(reply.content.metric_records) != 1:
        reason = (
            "adaptive_clipping_mod expects exactly one MetricRecord in the training reply, found"
            f" {len(reply.content.metric_records)}"
        )
        log(ERROR, reason)
        return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=reason), reply_to=msg)
    (config,) = msg.content.config_records.values()
    (metrics,) = reply.content.metric_records.values()
    metrics[KEY_UNCLIPPED] = int(norms[0] <= float(config[KEY_CLIPPING_NORM]))
    return reply
