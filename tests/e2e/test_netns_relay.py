"""Sites that refuse every inbound connection train through a relay in its own namespace.

Each site (server, host, guest-1) runs in its own Linux network namespace whose
nftables ``input`` chain drops every TCP SYN that would open a connection to it
(tests/e2e/netns_firewall.py, written over netlink: the machine may have no `nft`
binary); the relay runs in a fourth namespace, all joined by veth pairs to a bridge.
A vertical run must train to the end and equal the plaintext oracle (label DP off),
and a horizontal run (aggregator, Shuffler, two client hosts) must train to the end, while
`ss -ltn` in every site namespace shows no listening TCP socket and a connection from
the relay's namespace to a site is refused by its firewall.

Needs root, `ip netns`, nf_tables and pyroute2; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import host_start, party_data
from relayed_kit import make_relayed_kit, oracle, relayed_hfl_kit, saved

from privfl.config.vertical import load_job

SITES = [("server", "server"), ("host", "host"), ("guest", "guest-1")]
SUBNET = "10.79.0"
FIREWALL = Path(__file__).with_name("netns_firewall.py")
RELAY_PORT = 7443


def run(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    prefix = ["ip", "netns", "exec", ns] if ns else []
    return subprocess.run([*prefix, *args], check=check, capture_output=True, text=True, timeout=60)


def unavailable() -> str | None:
    """None when namespaces with nftables can be made here, else the reason to skip."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("ip"):
        return "network namespaces need Linux, root and iproute2"
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return "pyroute2 is not installed (pip install pyroute2) to write the nftables rule"
    probe = f"pfl-fwprobe-{os.getpid()}"
    try:
        run("ip", "netns", "add", probe)
        done = run(sys.executable, str(FIREWALL), ns=probe, check=False)
        if done.returncode != 0:
            return f"nftables is not usable in a namespace here: {done.stderr.strip()[-200:]}"
    except subprocess.CalledProcessError as exc:
        return f"cannot create a network namespace: {exc.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


@pytest.fixture
def spaces() -> Iterator[Callable[[list[str]], dict[str, str]]]:
    """Make one namespace per name (and "relay") on one bridge, every site firewalled;
    returns name -> namespace. Always torn down."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    tag = f"{os.getpid() % 100000}"
    made: list[str] = []

    def make(sites: list[str]) -> dict[str, str]:
        switch = f"pfr-{tag}-sw"
        run("ip", "netns", "add", switch)
        made.append(switch)
        run("ip", "link", "add", "br0", "type", "bridge", ns=switch)
        run("ip", "link", "set", "br0", "up", ns=switch)
        out = {}
        for k, name in enumerate([*sites, "relay"]):
            space = out[name] = f"pfr-{tag}-{k}"
            run("ip", "netns", "add", space)
            made.append(space)
            inner, outer = f"ri{k}-{tag}", f"ro{k}-{tag}"
            run("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
            run("ip", "link", "set", inner, "netns", space)
            run("ip", "link", "set", outer, "netns", switch)
            run("ip", "link", "set", outer, "master", "br0", ns=switch)
            run("ip", "link", "set", outer, "up", ns=switch)
            run("ip", "addr", "add", f"{SUBNET}.{k + 1}/24", "dev", inner, ns=space)
            run("ip", "link", "set", inner, "up", ns=space)
            run("ip", "link", "set", "lo", "up", ns=space)
            if name != "relay":
                run(sys.executable, str(FIREWALL), ns=space)
        return out

    try:
        yield make
    finally:
        for space in reversed(made):  # deleting a namespace deletes its veth ends and rules
            subprocess.run(["ip", "netns", "del", space], capture_output=True, timeout=30)


def start_relay_in(spaces: dict[str, str], job: Path, tmp_path: Path) -> subprocess.Popen[bytes]:
    """The relay in its namespace, once it listens; the firewall checked from there."""
    ready = tmp_path / "relay.ready"
    relay = spawn_in(
        spaces["relay"], tmp_path / "relay.log", "relay", "--job", str(job), "--ready-file",
        str(ready),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert relay.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    # The firewall holds: the relay's namespace cannot open a connection to a site.
    probe = f"import socket; socket.create_connection(('{SUBNET}.1', 22), timeout=2)"
    refused = run(sys.executable, "-c", probe, ns=spaces["relay"], check=False)
    assert refused.returncode != 0 and "timed out" in refused.stderr, refused.stderr
    return relay


def stop_all(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


def spawn_in(ns: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as handle:
        return subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-m", "privfl", *args],
            stdout=handle,
            stderr=handle,
        )


def listeners(ns: str) -> list[str]:
    """The listening TCP sockets in ``ns`` (`ss -ltn`, header dropped)."""
    return run("ss", "-Hltn", ns=ns).stdout.splitlines()


@pytest.mark.slow
def test_firewalled_sites_train_through_a_relay_in_its_own_namespace(
    tmp_path: Path, spaces: Callable[[list[str]], dict[str, str]]
) -> None:
    # Prepare: the relay at the fourth address; every site relayed; label DP off.
    names = spaces([name for _, name in SITES])
    job = make_relayed_kit(
        tmp_path, "--epochs", "3", "--label-epsilon", "inf", "--timeout", "120",
        relay=f"tcp://{SUBNET}.{len(SITES) + 1}:{RELAY_PORT}",
    )  # fmt: skip
    procs = {"relay": start_relay_in(names, job, tmp_path)}
    try:
        # Act
        runs = tmp_path / "runs"
        for role, name in SITES:
            args = ["vfl", role, "--job", str(job), "--party", name, "--out", str(runs / name)]
            args += ["--no-progress", "--workers", "1"]  # inline: no worker pools to start
            args += ["--no-plots"]  # the Host's: no check reads them
            procs[name] = spawn_in(names[name], tmp_path / f"{name}.log", *args)
        metrics = runs / "host" / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().strip()):
            assert procs["host"].poll() is None, (tmp_path / "host.log").read_text()
            time.sleep(0.1)
        open_ports = {name: listeners(names[name]) for _, name in SITES}
        codes = {name: procs[name].wait(timeout=300) for _, name in SITES}
    finally:
        stop_all(procs)

    # Assert: no site listened; every site finished; the model is the oracle's.
    assert open_ports == {name: [] for _, name in SITES}, open_ports
    logs = {n: (tmp_path / f"{n}.log").read_text()[-1500:] for _, n in SITES}
    assert codes == {name: 0 for _, name in SITES}, logs
    loaded = load_job(job)
    data = party_data(loaded)
    want = oracle(loaded, data, host_start(runs), runs)
    for got, expected in zip(saved(loaded, data, runs), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_a_firewalled_horizontal_run_with_a_shuffler_trains_through_the_relay(
    tmp_path: Path, spaces: Callable[[list[str]], dict[str, str]]
) -> None:
    # Prepare: aggregator, Shuffler and two client hosts, each in its own namespace.
    parties = ["aggregator", "shuffler", "clients-1", "clients-2"]  # relayed_hfl_kit's
    job = relayed_hfl_kit(tmp_path, f"tcp://{SUBNET}.{len(parties) + 1}:{RELAY_PORT}")
    data = tomllib.loads(job.read_text())["parties"]
    assert sorted(data) == sorted(parties)
    names = spaces(parties)
    procs = {"relay": start_relay_in(names, job, tmp_path)}
    try:
        # Act
        for name, spec in data.items():
            role = {"aggregator": "aggregator", "shuffler": "shuffler"}.get(spec["role"], "client")
            args = ["hfl", role, "--job", str(job), "--party", name, "--out", str(tmp_path / name)]
            args += ["--no-plots"]  # the aggregator's: no check reads it
            procs[name] = spawn_in(names[name], tmp_path / f"{name}.log", *args)
        metrics = tmp_path / "aggregator" / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().strip()):
            assert procs["aggregator"].poll() is None, (tmp_path / "aggregator.log").read_text()
            time.sleep(0.1)
        open_ports = {name: listeners(names[name]) for name in data}
        codes = {name: procs[name].wait(timeout=300) for name in data}
    finally:
        stop_all(procs)

    # Assert: no site listened; every party finished; both rounds had reports.
    assert open_ports == {name: [] for name in data}, open_ports
    logs = {n: (tmp_path / f"{n}.log").read_text()[-1500:] for n in data}
    assert codes == {name: 0 for name in data}, logs
    records = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert len(records) == 2 and all(r["reports"] > 0 for r in records)
