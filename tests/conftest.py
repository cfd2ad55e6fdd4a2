"""Fixtures for every test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from processes import reap


@pytest.fixture(autouse=True)
def _reap_parties() -> Iterator[None]:
    """Whatever a test started with ``processes.spawn`` is stopped and reaped, even on failure."""
    yield
    reap()
