"""The one-shot protocol of the QKT family: a local-fit phase, then one exchange phase.

``one_shot_protocol`` turns a method's transfer step (what a student does with what it
receives) and what the server broadcasts into a registered protocol. Every one-shot method
shares the same partitions, local models and queries, so that their metrics compare.
"""

from __future__ import annotations

from ..protocols.exchange import Exchange, TransferFn
from ..protocols.local_fit import SETTINGS as LOCAL_FIT_SETTINGS
from ..protocols.local_fit import LocalFit
from ..protocols.phase import ProtocolSpec
from ..protocols.query_draw import SETTINGS as QUERY_SETTINGS
from ..settings import Setting

BASE_SETTINGS = (*QUERY_SETTINGS, *LOCAL_FIT_SETTINGS)


# What crosses the network, per ``broadcast`` (the documentation's protocol table).
EXCHANGED = {
    "none": "nothing: each client keeps its locally trained model",
    "average": "once up: each client's locally trained model; once down: their"
    " sample-weighted average",
    "teachers": "once up: each client's locally trained model; once down: the other clients'"
    " models, to each student (only their predictions are used)",
}


def one_shot_protocol(
    name: str,
    summary: str,
    paper: str,
    transfer: TransferFn,
    broadcast: str,
    settings: tuple[Setting, ...] = (),
    kind: str = "one-shot baseline",
    reproduction: str = "",
) -> ProtocolSpec:
    """Local fit (uploads unless nothing is broadcast), then the exchange with ``transfer``."""

    def phases(config):
        return (LocalFit(upload=broadcast != "none"), Exchange(broadcast, transfer))

    Exchange(broadcast, transfer)  # an unknown broadcast fails at registration
    return ProtocolSpec(
        name=name,
        summary=summary,
        paper=paper,
        phases=phases,
        settings=(*BASE_SETTINGS, *settings),
        kind=kind,
        exchanged=EXCHANGED[broadcast],
        reproduction=reproduction,
    )
