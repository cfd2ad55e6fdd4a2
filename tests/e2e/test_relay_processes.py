"""Relayed vertical runs: real processes, real CURVE and seals, every party behind the relay.

The relayed run trains the model the direct mesh trains: both equal the plaintext oracle
from the Host's own private start (label DP off), as tests/parties/vertical checks for
the direct mesh. A relay that dies is named by every party within 15 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import host_start, party_data, read_summary
from processes import ONE_GUEST as PARTIES
from processes import spawn_parties
from relayed_kit import make_relayed_kit, oracle, saved, start_relay

from privfl.config.vertical import load_job

WEIGHT_TOL, LOSS_TOL = 1e-6, 1e-6


def start_parties(tmp_path: Path, job: Path, runs: Path) -> dict[str, subprocess.Popen[bytes]]:
    """Every party, computing inline (no worker pools to start: the relay is the claim), the
    Host drawing no plots (no check reads them)."""
    inline = {name: ["--workers", "1", "--no-plots"] for _, name in PARTIES}
    return spawn_parties(job, runs, lambda name: tmp_path / f"{name}.log", inline, PARTIES)


def test_a_fully_relayed_run_trains_the_direct_mesh_model(tmp_path: Path) -> None:
    # Prepare: every party behind the relay; label DP off, so the oracle is exact.
    job_path = make_relayed_kit(tmp_path, "--epochs", "3", "--label-epsilon", "inf")
    relay = start_relay(tmp_path, job_path)
    runs = tmp_path / "runs"

    # Act
    procs = start_parties(tmp_path, job_path, runs)
    codes = {name: p.wait(timeout=300) for name, p in procs.items()}

    # Assert: the run ends, the model is the oracle's, and the relay carried it.
    assert codes == {name: 0 for name in procs}, {
        n: (tmp_path / f"{n}.log").read_text()[-2000:] for n in procs
    }
    job = load_job(job_path)
    data = party_data(job)
    want = oracle(job, data, host_start(runs), runs)
    for got, expected in zip(saved(job, data, runs), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=WEIGHT_TOL)
    assert len(read_summary(runs)["loss_history"]) == 3
    assert relay.poll() is None
    relay_log = (tmp_path / "relay.log").read_text()
    assert all(f"{name} is connected" in relay_log for _, name in PARTIES)


def wait_for_epochs(runs: Path, count: int, log: Path) -> None:
    metrics = runs / "host" / "metrics.jsonl"
    deadline = time.monotonic() + 180
    while not (metrics.exists() and metrics.read_text().count("\n") >= count):
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("victim", "sig"),
    [
        ("relay", signal.SIGKILL),
        pytest.param("guest-1", signal.SIGSTOP, marks=pytest.mark.slow),
    ],
    ids=["killed-relay", "frozen-guest"],
)
@pytest.mark.serial  # a wall-clock bound
def test_a_dead_relay_or_frozen_party_is_named_by_every_other_party_within_15_s(
    tmp_path: Path, victim: str, sig: signal.Signals
) -> None:
    # Prepare: a long relayed run (600 s timeout) under way.
    job_path = make_relayed_kit(tmp_path, "--epochs", "500", "--timeout", "600")
    relay = start_relay(tmp_path, job_path)
    runs = tmp_path / "runs"
    procs = {"relay": relay, **start_parties(tmp_path, job_path, runs)}
    wait_for_epochs(runs, 2, tmp_path / "host.log")

    # Act
    os.kill(procs[victim].pid, sig)
    hit_at = time.monotonic()
    others = {n: p for n, p in procs.items() if n not in (victim, "relay")}
    codes = {n: p.wait(timeout=60) for n, p in others.items()}
    took = time.monotonic() - hit_at
    os.kill(procs[victim].pid, signal.SIGKILL)

    # Assert: every other party stops with one line naming the victim, well before 600 s.
    assert took < 15, took
    assert all(code != 0 for code in codes.values()), codes
    for name in others:
        text = (tmp_path / f"{name}.log").read_text()
        assert "Traceback" not in text, text
        errors = [line for line in text.splitlines() if line.startswith("privfl: error:")]
        assert len(errors) == 1 and victim in errors[0], errors
