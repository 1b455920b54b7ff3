"""What flowerbed puts around Flower's DP clipping and noise, on both halves: an update of
exactly zero nudged (Flower's clipping divides by its norm: ``avoid_zero_update``), and the
noise drawn from the operating system's entropy rather than from the run's seed, which every
client knows (``fresh_entropy``): a guarantee cannot rest on noise anyone can recompute.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict


def avoid_zero_update(content: RecordDict, sent: ArrayRecord) -> bool:
    """Flower 1.41's clipping divides by the update's norm (``clip_inputs_inplace``:
    ``clipping_norm / input_norm``), so a reply equal to the model it was sent (a client whose
    training did not move it, e.g. saturated on one class) raises ZeroDivisionError. Such a
    reply gets one unit in the last place added to one element of its first floating-point
    entry: an update of norm about 1e-8 that no mean or noise can tell from zero, computed from
    the reply alone (so the clipping after it still bounds the sensitivity). Returns whether it
    changed ``content``."""
    names = list(content.array_records)
    if len(names) != 1:
        return False  # Flower's wrappers and mods refuse such replies themselves
    record = content[names[0]]
    values = {key: array.numpy() for key, array in record.items()}
    if set(values) != set(sent.keys()) or any(
        np.any(value != sent[key].numpy()) for key, value in values.items()
    ):
        return False
    for key, value in values.items():
        if np.issubdtype(value.dtype, np.floating) and value.size:
            nudged = value.copy()
            flat = nudged.reshape(-1)
            flat[0] = np.nextafter(flat[0], np.inf, dtype=value.dtype)
            values[key] = nudged
            content[names[0]] = ArrayRecord({k: Array(v) for k, v in values.items()})
            return True
    return False


@contextmanager
def fresh_entropy() -> Iterator[None]:
    """NumPy's global generator (Flower's wrappers and mods draw their noise from it) seeded
    from the operating system's entropy for the block, then put back as it was: the noise is
    no function of the run's seed, and nothing else the seed decides changes."""
    state = np.random.get_state()
    np.random.seed()
    try:
        yield
    finally:
        np.random.set_state(state)
