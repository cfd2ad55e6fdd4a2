"""Fixtures for every test module; what keeps parallel workers (pytest-xdist) apart."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import reap

# Ports for free_tcp_endpoints (here and in every party a test starts), cut into one slice
# per xdist worker, so two workers never pick the same port between a pick and its bind.
# Below the kernel's ephemeral range (32768-60999), where no connect() lands, and above
# Ray's worker ports (10002-19999).
WORKER_PORTS = range(20000, 32768)


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1"…; unset without -n
    if worker is None:
        return
    count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    size = len(WORKER_PORTS) // count
    low = WORKER_PORTS.start + int(worker.removeprefix("gw")) * size
    os.environ["PRIVFL_PORTS"] = f"{low}-{low + size - 1}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``xdist_group`` run on one worker under ``--dist loadgroup``, as named.

    pytest-xdist tells its scheduler a test's group by appending ``@group`` to the test's
    id, which pytest 9.2 no longer lets it do (pytest-dev/pytest-xdist#1386): every group
    was spread over both workers, each making the group's shared runs (a Ray cluster,
    the board's site, the attack modules' vertical runs). This appends it where xdist
    could not; where xdist did, it leaves the id as it is.
    """
    if not getattr(config.option, "loadgroup", False):  # set on xdist's workers only
        return
    for item in items:
        names = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        suffix = "@" + "_".join(sorted(names))
        if names and not item.nodeid.endswith(suffix):
            if hasattr(item, "_id"):  # pytest >= 9.2: a structured id, parsed from a string
                item._id = type(item._id).parse(item.nodeid + suffix)
            else:
                item._nodeid = item.nodeid + suffix


# The container pilot's group (tests/e2e/test_container_pilot.py): its images are built in
# the background from collection on (tests/e2e/container_images.py), so its tests go last,
# when the build has had the rest of the run to finish.
LAST_GROUP = "containers"


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup``, the scheduler that hands out ``LAST_GROUP`` last.

    pytest-xdist queues the groups by their number of tests, most first, and the tests
    with no group after them.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class LastGroupLast(LoadGroupScheduling):
        def _assign_work_unit(self, node: Any) -> None:
            if LAST_GROUP in self.workqueue and len(self.workqueue) > 1:
                self.workqueue.move_to_end(LAST_GROUP, last=True)
            super()._assign_work_unit(node)

    return LastGroupLast(config, log)


@contextlib.contextmanager
def _turn(item: pytest.Item) -> Iterator[None]:
    """Hold this run's test lock: shared, or exclusive for a test marked ``serial``."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of a run
    if run is None:
        yield
        return
    fd = os.open(Path(tempfile.gettempdir()) / f"privfl-tests-{run}.lock", os.O_RDWR | os.O_CREAT)
    try:
        alone = item.get_closest_marker("serial") is not None
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)
        fcntl.lockf(fd, fcntl.LOCK_EX if alone else fcntl.LOCK_SH, 1, 1)
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
        yield
    finally:
        os.close(fd)  # releases this worker's locks


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """A test marked ``serial`` runs while no other worker runs a test.

    Its bounds are wall-clock seconds (a lost peer named within 15 s, a timeout that ends
    on time), set for a machine shared with other work but not with a second test of
    ours. The locks span the whole protocol, so a module's shared runs made for the next
    test wait too. Every test holds byte 1 of a file of this run shared, a serial one
    exclusively; all pass byte 0 (a turnstile) first, so a waiting serial test keeps new
    tests from starting before it. A test marked ``containers`` holds it for its call
    only (``pytest_runtest_call``): its setup waits for the images' build (mmdebstrap,
    pip; mostly downloads and unpacking, minutes on a fresh machine, started in the
    background at collection), other work of the machine's kind that a serial test's
    bounds allow for, and holding the lock through it would stop the other worker at
    its first serial test until the build ends.
    """
    if item.get_closest_marker("containers") is not None:
        return (yield)
    with _turn(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[object]:
    """A ``containers`` test's body holds the lock its protocol did not (above)."""
    if item.get_closest_marker("containers") is None:
        return (yield)
    with _turn(item):
        return (yield)


@pytest.fixture(autouse=True)
def _reap_parties() -> Iterator[None]:
    """Whatever a test started with ``processes.spawn`` is stopped and reaped, even on failure."""
    yield
    reap()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """Ray on this machine (2 CPUs), started once for every test that asks; skips without Ray.

    Under xdist every test that asks is in the ``ray`` group (``--dist loadgroup``), so
    one worker alone starts it.
    """
    ray = pytest.importorskip("ray")
    # Ray waits a fixed 30 s for its raylet to register (ray/_private/node.py), which a
    # loaded machine can exceed: start again, a few times, before giving up.
    for attempt in range(1, 4):
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception:
            ray.shutdown()
            if attempt == 3:
                raise
    try:
        yield ray
    finally:
        ray.shutdown()
