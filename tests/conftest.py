"""Shared fixtures: small run configs for fast federations."""

from __future__ import annotations

import pytest


@pytest.fixture
def fast_run(tmp_path):
    """Overrides for a short digits job writing into the test's temporary folder."""
    return {
        "num-server-rounds": 2,
        "local-epochs": 1,
        "output-dir": str(tmp_path / "runs"),
        "data-dir": str(tmp_path / "data"),
    }
