"""Seeds derived from the run seed, so that every random draw of a run can be repeated."""

from __future__ import annotations

import numpy as np


def seed_for(*parts: int) -> int:
    """A 63-bit seed derived deterministically from integers (run seed, partition, round)."""
    state = np.random.SeedSequence([abs(int(p)) for p in parts]).generate_state(1, np.uint64)
    return int(state[0] >> 1)
