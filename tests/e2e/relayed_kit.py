"""A demo kit whose parties reach each other through a `privfl relay` process (test helper)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
from helpers import host_plan, read_model
from processes import WEAK, privfl_here, spawn

from privfl.config.vertical import JobConfig
from privfl.data.views import PartyData
from privfl.learning.glm import glm_named, reference_train
from privfl.protocol.transport import free_tcp_endpoints


def make_relayed_kit(
    tmp_path: Path, *args: str, relayed: tuple[str, ...] = (), relay: str = ""
) -> Path:
    """A 512-bit relayed kit from `privfl init vfl --relay` (the relay's key pair in its
    key folder); returns its job file.

    ``relayed``: the parties with via = "relay" (none named: all of them); ``relay``: its
    endpoint (default: a free loopback port). ``args`` go to ``privfl init vfl``.
    """
    kit = tmp_path / "kit"
    chosen = ["--relayed", ",".join(relayed)] if relayed else []
    endpoint = relay or free_tcp_endpoints(1)[0]
    made = privfl_here("init", "vfl", "--out", str(kit), *WEAK, "--relay", endpoint, *chosen, *args)
    assert made.returncode == 0, made.stderr
    return kit / "job.toml"


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


def oracle(
    job: JobConfig, data: dict[str, PartyData], start: np.ndarray, runs: Path
) -> list[np.ndarray]:
    """Plain Taylor logistic regression from the Host's start, on the run's batch plan
    (the joint seed in the Host's model.json under ``runs``)."""
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
        plan=host_plan(runs, job, x_host),
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


def relayed_hfl_kit(tmp_path: Path, relay: str = "") -> Path:
    """A horizontal kit (Shuffler, 4 clients in 2 hosts, 2 rounds), every party relayed
    (`privfl init hfl --relay`); ``relay``: its endpoint (default: a free loopback port)."""
    made = privfl_here(
        "init", "hfl", "--out", str(tmp_path / "kit"), "--shuffler", "--clients", "4",
        "--client-processes", "2", "--rounds", "2", "--timeout", "60",
        "--relay", relay or free_tcp_endpoints(1)[0],
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return tmp_path / "kit" / "job.toml"
