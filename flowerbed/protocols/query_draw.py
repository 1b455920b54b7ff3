"""QKT's query draw: the seeded choice of a client's query classes (QKT paper, Sec. 4.1
"Learning objectives"). Not Flower's ``query`` messages: a query here is a set of classes.

A class is *under-represented* at a client when the client holds fewer than ``threshold``
local training samples of it (50 in the paper; a class it lacks entirely counts too). The
query is drawn uniformly from those classes:

* ``single``: one class;
* ``multi``: a random number of classes, uniform in [2, min(max_classes, #eligible)] (one
  class when only one is eligible). The paper draws "the number of classes" at random without
  giving the range; its CIFAR-10 "Local" rows (Acc 27.58 multi vs 44.87 single, query accuracy
  0) imply about 2.3 query classes on average, hence the default cap of 3.

The draw depends only on (run seed, partition id) and the class counts, so every strategy of a
benchmark gives a client the same query. The run-config keys ``kt-query``,
``kt-query-threshold`` and ``kt-max-query-classes`` are declared here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..settings import Setting

QUERY_MODES = ("single", "multi")
SETTINGS = (
    Setting(
        "kt-query",
        "single",
        "knowledge transfer: `single` (one query class per client) or `multi` (2 to"
        " `kt-max-query-classes`, random)",
        choices=QUERY_MODES,
    ),
    Setting(
        "kt-query-threshold",
        50,
        "knowledge transfer: a class is under-represented (a query candidate) below this many"
        " local training samples",
        low=1,
    ),
    Setting(
        "kt-max-query-classes",
        3,
        "knowledge transfer: most classes in a multi-class query",
        low=2,
    ),
)


def under_represented(train_counts: Sequence[int], threshold: int) -> list[int]:
    """Classes with fewer than ``threshold`` local training samples."""
    return [int(j) for j in np.flatnonzero(np.asarray(train_counts) < threshold)]


def draw_query(
    train_counts: Sequence[int], threshold: int, mode: str, seed: int, max_classes: int = 3
) -> list[int]:
    """The query classes of one client (sorted); empty when no class is under-represented."""
    if mode not in QUERY_MODES:
        raise ValueError(f"unknown query mode {mode!r}; valid choices: {', '.join(QUERY_MODES)}")
    if max_classes < 2:
        raise ValueError(
            f"the maximum number of query classes must be at least 2, got {max_classes}"
        )
    eligible = under_represented(train_counts, threshold)
    if not eligible:
        return []
    rng = np.random.default_rng(seed)
    if mode == "single" or len(eligible) == 1:
        size = 1
    else:
        size = int(rng.integers(2, min(max_classes, len(eligible)) + 1))
    return sorted(int(q) for q in rng.choice(eligible, size=size, replace=False))
