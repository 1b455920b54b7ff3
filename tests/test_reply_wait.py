"""Waiting for replies: every reply returned, the timeout kept, and pulls that follow the wait."""

import time

import pytest
from flwr.serverapp import Grid

from flowerbed.runtime import reply_wait
from flowerbed.runtime.reply_wait import MAX_POLL, MIN_POLL, poll_interval, send_and_receive


class Reply:
    """What ``send_and_receive`` reads of a reply: the id of the message it answers."""

    def __init__(self, answers: str) -> None:
        self.metadata = type("Metadata", (), {"reply_to_message_id": answers})()


class SlowGrid(Grid):
    """A Flower ``Grid`` whose i-th message is answered ``delays[i]`` seconds after the push
    (None: never); it counts its pulls."""

    def __init__(self, delays: list[float | None]) -> None:
        self.delays = delays
        self.pulls = 0

    def push_messages(self, messages):
        self.pushed = time.monotonic()
        return [f"m{i}" for i, _ in enumerate(messages)]

    def pull_messages(self, message_ids):
        self.pulls += 1
        now = time.monotonic() - self.pushed
        return [
            Reply(f"m{i}")
            for i, delay in enumerate(self.delays)
            if f"m{i}" in message_ids and delay is not None and delay <= now
        ]

    def send_and_receive(self, messages, *, timeout=None):
        raise AssertionError("a Flower Grid is polled, not asked to send_and_receive")

    run = create_message = get_node_ids = set_run = None


def messages(n: int) -> list[str]:
    """Stand-ins for messages: the grids here only count them."""
    return [f"message to {i + 1}" for i in range(n)]


def test_poll_interval_is_a_hundredth_of_the_wait_within_bounds():
    assert poll_interval(0.0) == MIN_POLL
    assert poll_interval(0.1) == MIN_POLL  # 0.001 s would be below the floor
    assert poll_interval(20.0) == pytest.approx(0.2)
    assert poll_interval(3600.0) == MAX_POLL


def test_every_reply_is_returned_soon_after_it_arrives():
    grid = SlowGrid([0.0, 0.05, 0.3])
    started = time.monotonic()
    replies = send_and_receive(grid, messages(3))
    waited = time.monotonic() - started
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m0", "m1", "m2"]
    # Flower's in-memory grid sleeps 0.1 s between pulls; the last reply comes within
    # 1 % of 0.3 s plus the scheduler's slack, not at the next 0.1 s tick
    assert waited < 0.3 + 0.05


def test_a_timeout_returns_the_replies_so_far():
    grid = SlowGrid([0.0, None])
    started = time.monotonic()
    replies = send_and_receive(grid, messages(2), timeout=0.2)
    waited = time.monotonic() - started
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]
    assert 0.2 <= waited < 0.3


def test_pulls_grow_with_the_logarithm_of_a_long_wait(monkeypatch):
    """A simulated clock: a reply after 1,000 s takes a few hundred pulls, not 10,000 (Flower's
    0.1 s) or 200,000 (the floor)."""
    clock = [0.0]
    monkeypatch.setattr(reply_wait.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(reply_wait.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    grid = SlowGrid([1000.0])
    replies = send_and_receive(grid, messages(1))
    assert len(replies) == 1
    assert clock[0] <= 1000.0 * (1 + 0.011)
    # 0.005 s up to 0.5 s waited (100 pulls), then a growth by 1 % a pull up to 100 s
    # (ln(200)/ln(1.01) = 533 pulls), then 1 s a pull (900 pulls)
    assert grid.pulls < 1600


def test_a_grid_that_is_not_flowers_is_asked_once():
    class AtOnce:
        def send_and_receive(self, messages, *, timeout=None):
            return [f"reply to {m}" for m in messages]

    assert send_and_receive(AtOnce(), messages(2)) == [
        "reply to message to 1",
        "reply to message to 2",
    ]
