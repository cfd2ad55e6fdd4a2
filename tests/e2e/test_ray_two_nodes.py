"""A party's workers on a two-node Ray cluster, each node in its own network namespace.

The head (with the party) and a worker node reach each other only through a veth pair
(10.231.0.1 and .2), as two machines of one institution would. A guest's workers on
that cluster train to exactly the model it trains inline, which is its process pool's
(correctness, not speed), with the guest's workers on both nodes. Needs root, `ip netns`
and Ray; skipped with the reason where any is missing. About 40 s on two cores beside a
load average of 7.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_netns import ip, netns_available

# One worker starts the session's Ray cluster for every test that uses it (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("ray")

HEAD, WORKER = "10.231.0.1", "10.231.0.2"
PORT = 6390
DRIVER = Path(__file__).with_name("ray_two_nodes.py")


@pytest.fixture
def two_spaces() -> Iterator[tuple[str, str]]:
    """Two namespaces joined by one veth pair; always torn down."""
    pytest.importorskip("ray")
    reason = netns_available()
    if reason:
        pytest.skip(reason)
    tag = f"{os.getpid() % 100000}"
    spaces = (f"pfl-{tag}-ray-a", f"pfl-{tag}-ray-b")
    made: list[str] = []
    try:
        for space in spaces:
            ip("netns", "add", space)
            made.append(space)
        ends = (f"ra-{tag}", f"rb-{tag}")
        ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        for space, end, address in zip(spaces, ends, (HEAD, WORKER), strict=True):
            ip("link", "set", end, "netns", space)
            ip("addr", "add", f"{address}/24", "dev", end, ns=space)
            ip("link", "set", end, "up", ns=space)
            ip("link", "set", "lo", "up", ns=space)
        yield spaces
    finally:
        for space in reversed(made):  # deleting a namespace deletes its veth end
            subprocess.run(["ip", "netns", "del", space], capture_output=True, timeout=30)


def ray_node(space: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``ray start --block`` in ``space``, in its own process group (stopped by that group)."""
    temp = tempfile.mkdtemp(prefix="pfl-ray-")  # one per node: two raylets on one disk
    command = ["ip", "netns", "exec", space, sys.executable, "-m", "ray.scripts.scripts",
               "start", "--block", "--num-cpus=1", "--disable-usage-stats",
               f"--temp-dir={temp}", *args]  # fmt: skip
    # No drain on SIGTERM: it marks the node draining for Ray Serve, which is not used here,
    # and waits out its 30 s once the head's GCS (stopped with it) cannot answer.
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    with log.open("wb") as handle:
        return subprocess.Popen(
            command, stdout=handle, stderr=handle, start_new_session=True, env=env
        )


def stop(nodes: list[subprocess.Popen[bytes]]) -> None:
    """Stop every node's process group, all at once (in parallel, not one after the
    other); SIGKILL those still up after 60 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for node in nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, sig)
        try:
            for node in nodes:
                node.wait(timeout=60)
            return
        except subprocess.TimeoutExpired:
            continue


def tail(log: Path, size: int = 1500) -> str:
    """The end of a node's log, for a failure's message."""
    try:
        return log.read_text(errors="replace")[-size:]
    except OSError as error:
        return f"(unreadable: {error})"


@pytest.mark.slow
def test_a_guest_on_a_two_node_ray_cluster_trains_the_pool_model(
    tmp_path: Path, two_spaces: tuple[str, str]
) -> None:
    # Prepare: a head in the first namespace, a worker node joining it from the second.
    env = {**os.environ, "RAY_AUTH_MODE": "token"}  # the shared ~/.ray/auth_token
    head = ray_node(two_spaces[0], tmp_path / "head.log", "--head", f"--port={PORT}",
                    f"--node-ip-address={HEAD}", "--include-dashboard=false")  # fmt: skip
    nodes = [head]
    try:
        joining = [f"--address={HEAD}:{PORT}", f"--node-ip-address={WORKER}"]
        nodes.append(ray_node(two_spaces[1], tmp_path / "worker.log", *joining))
        # Act: the driver joins from the head's namespace and waits for both nodes.
        tests = str(Path(__file__).parents[1])
        driver = subprocess.run(
            ["ip", "netns", "exec", two_spaces[0], sys.executable, str(DRIVER),
             f"{HEAD}:{PORT}", str(tmp_path / "runs")],
            capture_output=True, text=True, timeout=540,
            env={**env, "PYTHONPATH": os.pathsep.join([tests, env.get("PYTHONPATH", "")]),
                 # ray.init's wait for the head's raylet and GCS (60 s by default) spends
                 # the same budget: a cold head on a busy machine once needed more.
                 "RAY_gcs_server_request_timeout_seconds": "300"},
        )  # fmt: skip
    finally:
        stop(nodes)

    # Assert: actors on both nodes; the same weights and loss history as inline (the pool's).
    logs = "".join(f"\n--- {n}.log ---\n" + tail(tmp_path / f"{n}.log") for n in ("head", "worker"))
    assert driver.returncode == 0, driver.stderr[-3000:] + logs
    report = json.loads(driver.stdout.strip().splitlines()[-1])
    assert report == {"same_model": True, "nodes": 2}
