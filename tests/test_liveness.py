"""A frozen (SIGSTOPped) party: every other party exits non-zero within timeout + 5 s, naming it.

Real OS processes over CURVE ZeroMQ on loopback. A frozen process keeps its TCP
connections open, so only ZMTP heartbeats and the bounded waits can tell it from
a slow one; the SIGKILL case is in test_cli.py.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from processes import spawn
from test_cli import WEAK, privfl

TIMEOUT = 5
PARTIES = [("server", "server"), ("host", "host"), ("guest", "guest-1")]


@pytest.mark.parametrize("frozen", ["guest-1", "server"])
def test_a_frozen_party_stops_every_other_party_within_the_timeout(
    tmp_path: Path, frozen: str
) -> None:
    kit = tmp_path / "kit"
    made = privfl(
        "init", "vfl", "--out", str(kit), *WEAK, "--epochs", "500", "--timeout", str(TIMEOUT)
    )
    assert made.returncode == 0, made.stderr
    runs = tmp_path / "runs"
    procs = {
        name: spawn(
            "vfl",
            role,
            "--job",
            str(kit / "job.toml"),
            "--party",
            name,
            "--out",
            str(runs / name),
            "--no-progress",
            log=tmp_path / f"{name}.log",
        )
        for role, name in PARTIES
    }
    metrics = runs / "host" / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert time.monotonic() < deadline, (tmp_path / "host.log").read_text()
        time.sleep(0.1)

    os.kill(procs[frozen].pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    others = {name: p for name, p in procs.items() if name != frozen}
    codes = {name: p.wait(timeout=TIMEOUT + 20) for name, p in others.items()}
    took = time.monotonic() - frozen_at
    os.kill(procs[frozen].pid, signal.SIGKILL)

    assert took < TIMEOUT + 5, took
    assert all(code != 0 for code in codes.values()), codes
    for name in others:
        text = (tmp_path / f"{name}.log").read_text()
        error = [line for line in text.splitlines() if line.startswith("privfl: error:")]
        assert len(error) == 1 and frozen in error[0], text
        assert "Traceback" not in text
