"""A data scientist re-runs one horizontal job to spend more ε than the office approved.

A client host books the job's ``epsilon_budget`` (2 per client) when it starts. The
same job started again at the same host draws its clients' noise afresh (OS CSPRNG;
no resume), so each start releases new reports. The site ledger used to treat a second
start of the same job as one already booked ("reuses its noise draw", true only of the
vertical label draw): four starts under a project budget of 5 booked 2 in all. Now
each start books again and the third is refused, in one line, before the run. The
leaky arm books as before (a rerun of a booked job is free) and all four start.

The real ``privfl hfl client`` command in-process (Click's runner), with the run after
the booking replaced by a no-op: the claim is the ledger's, made at start.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import privfl.parties.horizontal.client as client_module
from privfl.cli import main
from privfl.config import policy as policy_module
from privfl.runs import site_ledger

POLICY = "[projects.sepsis]\nmax_epsilon = 5\n"


def kit(tmp_path: Path) -> Path:
    """A two-host Laplace top-k kit of project sepsis, ``epsilon_budget`` 2."""
    args = ["init", "hfl", "--out", str(tmp_path / "kit"), "--clients", "4"]
    args += ["--client-processes", "2", "--mechanism", "laplace-topk", "--project", "sepsis"]
    made = CliRunner().invoke(main, args)
    assert made.exit_code == 0, made.output
    job = tmp_path / "kit" / "job.toml"
    job.write_text(job.read_text().replace('epsilon_budget = "inf"', "epsilon_budget = 2.0"))
    return job


def starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, times: int) -> list[str]:
    """Start the same client host ``times`` times; the last stderr line of each."""
    started: list[int] = []
    monkeypatch.setattr(client_module, "run_client_host", lambda *a, **k: started.append(1))
    monkeypatch.delenv(policy_module.ENV_VAR, raising=False)
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    job, lines = kit(tmp_path), []
    for attempt in range(times):
        args = ["hfl", "client", "--job", str(job), "--party", "clients-1", "--policy"]
        try:
            run = CliRunner().invoke(
                main, [*args, str(policy), "--out", str(tmp_path / f"r{attempt}")]
            )
        finally:
            for handler in list(logging.getLogger().handlers):
                logging.getLogger().removeHandler(handler)
                handler.close()
        lines.append(run.stderr.strip().splitlines()[-1] if run.exit_code else "started")
    return lines


def booked(tmp_path: Path) -> list[Any]:
    runs = json.loads((tmp_path / "ledger.json").read_text())["runs"]
    return [r["epsilon"] for r in runs]


def test_every_start_of_the_same_job_is_booked_and_the_budget_stops_the_third(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = starts(tmp_path, monkeypatch, 4)
    assert lines[:2] == ["started", "started"]
    for line in lines[2:]:
        assert line.startswith("privfl: error: policy: this run's ε 2 would take project "
                               "'sepsis' from 4 to 6, past this site's budget 5"), line  # fmt: skip
    assert booked(tmp_path) == [2.0, 2.0]


def test_leaky_arm_a_rerun_booked_as_the_same_run_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admit = site_ledger.admit
    monkeypatch.setattr(site_ledger, "admit", lambda *a, again=False: admit(*a, again=False))
    assert starts(tmp_path, monkeypatch, 4) == ["started"] * 4  # 4 runs' releases ...
    assert booked(tmp_path) == [2.0]  # ... booked as one
