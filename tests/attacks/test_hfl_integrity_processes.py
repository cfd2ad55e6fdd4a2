"""The horizontal integrity checks with real processes: CURVE ZeroMQ on loopback, real CLI.

A tagging aggregator (one that then keeps quiet) is stopped by the Shuffler and
every party exits with one line; a poisoning client host's reports are refused and
counted while the run goes on; too few valid reports stop every party with one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import processes
import pytest

DEVIANTS = Path(__file__).with_name("hfl_deviants.py")
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
WAIT = 300  # seconds for a whole run on a loaded machine (a bound, not a sleep)

pytestmark = pytest.mark.slow


def make_job(tmp_path: Path, shuffler: bool = True, hosts: int = 2, **settings: object) -> Path:
    """A kit of ``hosts`` client hosts × 2 clients (and a Shuffler); ``settings`` edit its
    [hfl] table."""
    made = processes.privfl_here(
        "hfl", "init", "--out", str(tmp_path / "kit"), "--clients", str(2 * hosts),
        "--client-processes", str(hosts), *(["--shuffler"] if shuffler else []),
        "--rounds", "2", "--local-epochs", "1",
        "--timeout", "120", "--round-timeout", "60",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    job = tmp_path / "kit" / "job.toml"
    text = job.read_text()
    for key, value in settings.items():
        old = next(line for line in text.splitlines() if line.startswith(f"{key} = "))
        text = text.replace(old, f"{key} = {value}")
    job.write_text(text)
    return job


def start(job: Path, role: str, name: str, out: Path, *deviant: str) -> subprocess.Popen[bytes]:
    """``privfl hfl ROLE`` (or the deviant script in front of it); console in OUT.log."""
    args = ["hfl", role, "--job", str(job), "--party", name, "--out", str(out)]
    # No check reads the aggregator's training.png: it draws none (--no-plots).
    args += ["--no-progress", "--no-plots"] if role == "aggregator" else []
    if not deviant:
        return processes.spawn(*args, log=out.with_suffix(".log"), env=ONE_THREAD)
    with out.with_suffix(".log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(DEVIANTS), *deviant, *args],
            stdout=log,
            stderr=log,
            env={**os.environ, **ONE_THREAD},
        )
    processes.STARTED.append(process)
    return process


def last_line(out: Path) -> str:
    lines = out.with_suffix(".log").read_text().strip().splitlines()
    assert "Traceback" not in "\n".join(lines)
    return lines[-1]


def test_a_tagging_aggregator_is_stopped_and_every_party_says_why(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    agg = start(job, "aggregator", "aggregator", tmp_path / "agg", "tag")
    shuf = start(job, "shuffler", "shuffler", tmp_path / "shuf")
    hosts = [start(job, "client", f"clients-{i}", tmp_path / f"c{i}") for i in (1, 2)]
    for process in (shuf, agg, *hosts):
        assert process.wait(timeout=WAIT) == 1
    reason = "was given another round token, report key or model than the aggregator announced"
    assert last_line(tmp_path / "shuf").startswith("privfl: error: ")
    for out in ("shuf", "agg", "c1", "c2"):
        assert reason in last_line(tmp_path / out), out
    for out in ("c1", "c2"):  # this aggregator told no one: the Shuffler told the hosts
        assert "peer shuffler stopped" in last_line(tmp_path / out)


@pytest.mark.parametrize(("shuffler", "value"), [(True, "1e30"), (False, "nan")])
def test_a_poisoning_host_is_refused_and_counted_and_the_run_goes_on(
    tmp_path: Path, shuffler: bool, value: str
) -> None:
    job = make_job(tmp_path, shuffler)
    agg = start(job, "aggregator", "aggregator", tmp_path / "agg")
    if shuffler:
        start(job, "shuffler", "shuffler", tmp_path / "shuf")
    start(job, "client", "clients-1", tmp_path / "c1", "poison", value)
    start(job, "client", "clients-2", tmp_path / "c2")
    assert agg.wait(timeout=WAIT) == 0, (tmp_path / "agg.log").read_text()
    records = [
        json.loads(line) for line in (tmp_path / "agg" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [(r["reports"], r["refused_reports"]) for r in records] == [(3, 1), (3, 1)]
    assert (
        "refused 1 report(s) outside the mechanism's output range"
        in (tmp_path / "agg.log").read_text()
    )  # WARNING reaches the console


def test_too_few_valid_reports_stop_every_party_with_one_line(tmp_path: Path) -> None:
    job = make_job(tmp_path, min_valid_reports=4)
    agg = start(job, "aggregator", "aggregator", tmp_path / "agg")
    shuf = start(job, "shuffler", "shuffler", tmp_path / "shuf")
    hosts = [
        start(job, "client", "clients-1", tmp_path / "c1", "poison", "nan"),
        start(job, "client", "clients-2", tmp_path / "c2"),
    ]
    for process in (agg, shuf, *hosts):
        assert process.wait(timeout=WAIT) == 1
    reason = "only 3 valid report(s) (1 refused as out of range), fewer than min_valid_reports = 4"
    for out in ("agg", "shuf", "c1", "c2"):
        assert reason in last_line(tmp_path / out), out
