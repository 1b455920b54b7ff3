"""How long a long step takes and has left, in words, for its log lines. The steps: FL rounds
(``runtime.history``), distillation epochs (``kd.student``), data cache builds
(``data.array_cache``)."""

from __future__ import annotations


def duration(seconds: float) -> str:
    """``seconds`` for a reader: ``under 1 s``, ``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    seconds = max(0, round(seconds))
    if seconds == 0:
        return "under 1 s"
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def pace(per_step: float, steps_left: float, step: str) -> str:
    """``1.2 s/round, about 3 min 05 s left``: seconds per ``step`` so far and the time the
    ``steps_left`` would take at that pace (no "left" once none is)."""
    text = f"{per_step:.1f} s/{step}" if per_step >= 1 else f"{per_step:.2g} s/{step}"
    return text + (f", {time_left(steps_left * per_step)}" if steps_left > 0 else "")


def time_left(seconds: float) -> str:
    """``about 3 min 05 s left``, or ``under 1 s left``."""
    left = duration(seconds)
    return f"{left} left" if left.startswith("under") else f"about {left} left"
