"""Every test here starts real party processes: all are `slow` (skip them with -m "not slow").

The container pilot's images are built in the background from the moment its tests
are collected (container_images.py).
"""

from __future__ import annotations

import pytest
from container_images import end_build, start_build


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.path):
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker("containers") for item in session.items):
        start_build()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stopped = exitstatus == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop)
    end_build(stop=stopped)
