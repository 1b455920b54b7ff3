"""The run-config keys of differential privacy (``dp``, ``dp-*``: ``SETTINGS``), its modes and
what can be refused before any data is loaded (``check_run_config``).

Composition. Central DP needs a server rule that is the mean of the replied models, Flower's
``FedAvg.aggregate_train`` as is (the check Flower's own accountant makes): the noise is added
to the strategy's output, so a rule that transforms the mean (server optimisers, whose state
also keeps un-noised means), selects (Krum, Bulyan) or takes order statistics (median, trimmed
mean) would not be protected by noise calibrated to a mean. Local DP protects the reply
itself, so every strategy whose reply is exactly the model composes with it (the server rule
is post-processing). Neither composes with strategies whose reply is no model or carries more
records (FedNova, SCAFFOLD, QFedFisher), with protocols without FL rounds, or with a model
holding integer entries (batch norm's counter), which Flower's clipping cannot scale. The
last two, and the server rule, are known only once the strategy and the model are built
(``server.wrap``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..settings import ConfigError, RunConfig, Setting
from ..trust.reply_checks import model_like_sent

NONE = "none"
SERVER_FIXED, SERVER_ADAPTIVE = "central-server-fixed", "central-server-adaptive"
CLIENT_FIXED, CLIENT_ADAPTIVE = "central-client-fixed", "central-client-adaptive"
LOCAL = "local"
MODES = (NONE, SERVER_FIXED, SERVER_ADAPTIVE, CLIENT_FIXED, CLIENT_ADAPTIVE, LOCAL)
CENTRAL = (SERVER_FIXED, SERVER_ADAPTIVE, CLIENT_FIXED, CLIENT_ADAPTIVE)
ADAPTIVE = (SERVER_ADAPTIVE, CLIENT_ADAPTIVE)


def _check_noise(value: float, config: RunConfig) -> str | None:
    if value == 0 and config.dp != NONE:
        return (
            f"dp-noise-multiplier=0.0 with dp={config.dp!r}: without noise there is no privacy"
            " (epsilon is infinite); set dp-noise-multiplier > 0, or dp='none'"
        )
    return None


SETTINGS = (
    Setting(
        "dp",
        NONE,
        "differential privacy of FL rounds' model updates (Flower's wrappers and mods;"
        " guarantees in docs/privacy.md): `none`, `central-server-fixed`,"
        " `central-server-adaptive`, `central-client-fixed`, `central-client-adaptive`,"
        " `local`; the history's `dp_epsilon` is the privacy spent",
        choices=MODES,
    ),
    Setting(
        "dp-noise-multiplier",
        1.0,
        "z of `dp`: Gaussian noise of standard deviation z C on the sum of the clipped updates"
        " (central) or on each client's update (local); for adaptive clipping the effective z"
        " of update and count together",
        low=0,
        check=_check_noise,
    ),
    Setting(
        "dp-clipping-norm",
        1.0,
        "C of `dp`: the L2 norm every client's update is clipped to (the initial norm with"
        " adaptive clipping)",
        low=0,
        low_open=True,
    ),
    Setting(
        "dp-clipped-quantile",
        0.5,
        "adaptive clipping: the share of updates the clipping norm aims to clip",
        low=0,
        high=1,
    ),
    Setting(
        "dp-clipped-count-stddev",
        0.0,
        "adaptive clipping: standard deviation of the noise on the count of clipped updates;"
        " 0 = Flower's default, n/20 for n sampled clients (Andrew et al.)",
        low=0,
    ),
    Setting(
        "dp-delta",
        1e-5,
        "delta at which `dp_epsilon` is reported; keep it well below 1/(number of clients)",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
    ),
    Setting(
        "dp-epsilon-budget",
        0.0,
        "stop the run cleanly before a round that would bring `dp_epsilon` above this; 0 = no"
        " budget",
        low=0,
    ),
)


def check_run_config(config: RunConfig, strategies: Mapping[str, Any]) -> None:
    """What can be refused before any data is loaded: ``dp`` on a protocol without FL rounds
    or on a strategy whose training reply is not exactly the model (``strategies``: the FL
    strategies' specs by name)."""
    if config.dp == NONE:
        return
    spec = strategies.get(config.strategy)
    if spec is None:
        valid = ", ".join(strategies)
        raise ConfigError(
            f"dp={config.dp!r} privatises the model updates clients reply to FL rounds;"
            f" strategy={config.strategy!r} is not made of FL rounds (valid strategies: {valid})"
        )
    if not spec.replies_model or spec.reply_arrays(config) is not model_like_sent:
        raise ConfigError(
            f"dp={config.dp!r} clips and noises a reply that is exactly the client's model;"
            f" strategy={config.strategy!r} replies something else (FedNova a normalised"
            " direction, SCAFFOLD control-variate deltas too, QFedFisher Fisher values too),"
            " which Flower's DP wrappers and mods would leave un-noised or reject"
        )
