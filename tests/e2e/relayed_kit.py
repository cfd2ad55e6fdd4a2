"""A demo kit whose parties reach each other through a `privfl relay` process (test helper)."""

from __future__ import annotations

import subprocess
import time
import tomllib
from pathlib import Path

import numpy as np
import tomli_w
from helpers import read_model
from processes import WEAK, privfl, spawn

from privfl.config.vertical import JobConfig
from privfl.data.views import PartyData
from privfl.learning.glm import glm_named, reference_train
from privfl.protocol.transport import free_tcp_endpoints


def make_relayed_kit(
    tmp_path: Path, *args: str, relayed: tuple[str, ...] | None = None, relay: str = ""
) -> tuple[Path, Path]:
    """A 512-bit kit plus the relay's key pair; returns (direct job, relayed job).

    ``relayed``: the parties with via = "relay" (None: all of them); ``relay``: its
    endpoint (default: a free loopback port). ``args`` go to ``privfl init vfl``.
    """
    kit = tmp_path / "kit"
    made = privfl("init", "vfl", "--out", str(kit), *WEAK, *args)
    assert made.returncode == 0, made.stderr
    keyed = privfl("keys", "gen", "--party", "relay", "--out", str(kit / "keys"))
    assert keyed.returncode == 0, keyed.stderr
    direct = kit / "job.toml"
    data = tomllib.loads(direct.read_text())
    for name, table in data["parties"].items():
        if relayed is None or name in relayed:
            table["via"] = "relay"
            table["endpoint"] = ""
    data["relay"] = {"endpoint": relay or free_tcp_endpoints(1)[0]}
    job = kit / "relayed.toml"
    job.write_text(tomli_w.dumps(data))
    return direct, job


def start_relay(tmp_path: Path, job: Path, name: str = "relay") -> subprocess.Popen[bytes]:
    """Start `privfl relay` and wait (for an event, not a delay) until it listens."""
    ready = tmp_path / f"{name}.ready"
    process = spawn(
        "relay", "--job", str(job), "--ready-file", str(ready), log=tmp_path / f"{name}.log"
    )
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert process.poll() is None, (tmp_path / f"{name}.log").read_text()
        assert time.monotonic() < deadline, "the relay did not start within 120 s"
        time.sleep(0.05)
    return process


def oracle(job: JobConfig, data: dict[str, PartyData], start: np.ndarray) -> list[np.ndarray]:
    """Plain Taylor logistic regression from the Host's start, with the Host's batch draws."""
    host = data[job.host]
    x_host = np.hstack([host.x_train, np.ones((host.x_train.shape[0], 1))])
    parts = [x_host] + [data[g].x_train for g in job.guests]
    penalised = [np.r_[np.ones(host.x_train.shape[1]), 0.0]]
    penalised += [np.ones(data[g].x_train.shape[1]) for g in job.guests]
    rng = np.random.default_rng(job.seed)
    thetas, _ = reference_train(
        parts,
        host.y_train,
        job.training,
        rng,
        glm_named("logistic"),
        penalised=penalised,
        start=start,
    )
    return [t.ravel() for t in thetas]


def saved(job: JobConfig, data: dict[str, PartyData], runs: Path) -> list[np.ndarray]:
    host = read_model(runs, job.host)
    names = data[job.host].feature_names
    parts = [np.array([*(host["weights"][f] for f in names), host["bias"]])]
    for guest in job.guests:
        weights = read_model(runs, guest)["weights"]
        parts.append(np.array([weights[f] for f in data[guest].feature_names]))
    return parts


def relayed_hfl_kit(tmp_path: Path) -> Path:
    """A horizontal kit (Shuffler, 4 clients in 2 hosts, 2 rounds), every party relayed."""
    made = privfl(
        "init", "hfl", "--out", str(tmp_path / "kit"), "--shuffler", "--clients", "4",
        "--client-processes", "2", "--rounds", "2", "--timeout", "60",
        env={"OMP_NUM_THREADS": "1"}, timeout=180,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    keys = tmp_path / "kit" / "keys"
    assert privfl("keys", "gen", "--party", "relay", "--out", str(keys)).returncode == 0
    path = tmp_path / "kit" / "job.toml"
    data = tomllib.loads(path.read_text())
    for table in data["parties"].values():
        table["via"], table["endpoint"] = "relay", ""
    data["relay"] = {"endpoint": free_tcp_endpoints(1)[0]}
    path.write_text(tomli_w.dumps(data))
    return path
