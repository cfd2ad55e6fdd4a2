"""The suite's scheduling: tests marked ``xdist_group`` reach xdist's scheduler in their group.

Under ``--dist loadgroup`` (the README's test command) a group runs on one worker, so
its shared runs are made once; a group lost on the way (pytest-dev/pytest-xdist#1386)
fails nothing else, it only doubles the suite's slowest fixtures. These tests read the
ids of the session's own items: they cost no run.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("suite_groups")


def loadgroup(request: pytest.FixtureRequest) -> bool:
    return bool(getattr(request.config.option, "loadgroup", False))  # on xdist's workers


def test_a_grouped_test_carries_its_group_to_the_scheduler(request: pytest.FixtureRequest) -> None:
    if not loadgroup(request):
        pytest.skip("a worker of --dist loadgroup writes the group into the id")

    assert request.node.nodeid.endswith("@suite_groups"), request.node.nodeid


def test_every_reader_of_the_attack_runs_is_in_their_group(request: pytest.FixtureRequest) -> None:
    readers = [
        item for item in request.session.items if "vertical_runs" in item.fixturenames
    ]  # fmt: skip
    if not readers:
        pytest.skip("no test of this session reads tests/attacks/conftest.py's runs")

    for item in readers:
        assert item.get_closest_marker("xdist_group") is not None, item.nodeid
        if loadgroup(request):
            assert item.nodeid.endswith("@vertical_runs"), item.nodeid
