"""Fixtures for every test module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from processes import reap


@pytest.fixture(autouse=True)
def _reap_parties() -> Iterator[None]:
    """Whatever a test started with ``processes.spawn`` is stopped and reaped, even on failure."""
    yield
    reap()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """Ray on this machine (2 CPUs), started once for every test that asks; skips without Ray."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
