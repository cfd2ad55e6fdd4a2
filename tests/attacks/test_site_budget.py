"""A data scientist re-runs jobs to spend more label ε than the office approved.

Each run alone is within the policy (ε 6, then ε 5, under a maximum of 8), but the
site approved 10 in all for the project. Real CLI runs (`privfl vfl run-local`,
every party its own process, test-sized keys behind their flag) share one site
policy through ``PRIVFL_POLICY``: the first run trains and is booked; the second is
refused by the Host before it reads data, and ``privfl site budget`` lists every run
booked before it. The leaky arm runs the second job's Host without the policy: it
goes on to its data.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner
from processes import WEAK, privfl

from privfl.cli import main
from privfl.config import policy as policy_module

POLICY = (
    "[label_dp]\nmax_epsilon = 8\n[keys]\nmin_bits = 512\n[projects.sepsis]\nmax_epsilon = 10\n"
)


def job_file(tmp_path: Path, name: str, epsilon: float) -> Path:
    """A one-epoch kit of project sepsis with label ε ``epsilon`` (`privfl init vfl`)."""
    args = ["init", "vfl", "--out", str(tmp_path / name), *WEAK, "--epochs", "1"]
    made = CliRunner().invoke(main, [*args, "--label-epsilon", str(epsilon), "--project", "sepsis"])
    assert made.exit_code == 0, made.output
    return tmp_path / name / "job.toml"


def run_local(job: Path, out: Path, env: dict[str, str]) -> tuple[int, str]:
    done = privfl(
        "vfl", "run-local", "--job", str(job), *WEAK, "--epochs", "1", "--no-progress",
        "--out", str(out), "--workers", "1", timeout=300, env=env,
    )  # fmt: skip
    return done.returncode, done.stderr


def test_a_run_past_the_project_budget_is_refused_and_the_ledger_lists_the_earlier_runs(
    tmp_path: Path,
) -> None:
    # Prepare: the site's policy (budget 10 for sepsis) and two jobs within its ε range.
    policy = tmp_path / "site" / "policy.toml"
    policy.parent.mkdir()
    policy.write_text(POLICY)
    env = {policy_module.ENV_VAR: str(policy)}
    first, second = job_file(tmp_path, "kit-a", 6), job_file(tmp_path, "kit-b", 5)

    # Act: two real runs at one site, then the office reads the ledger.
    code_a, err_a = run_local(first, tmp_path / "run-a", env)
    code_b, err_b = run_local(second, tmp_path / "run-b", env)
    shown = privfl("site", "budget", "--json", env=env)

    # Assert: the first trained and was booked; the second stopped on the budget line.
    assert code_a == 0, err_a
    assert code_b != 0 and "Traceback" not in err_b
    assert (
        "policy: this run's ε 5 would take project 'sepsis' from 6 to 11, past this site's "
        "budget 10 (policy.toml [projects.sepsis] max_epsilon" in err_b
    ), err_b
    consoles = [tmp_path / "run-b" / p / "console.log" for p in ("server", "guest-1")]
    heard = [c.read_text() for c in consoles if c.exists()]  # its peers heard why, by Abort
    assert any("peer host stopped: host: policy: " in text for text in heard), heard
    assert not (tmp_path / "run-b" / "host" / "summary.json").exists()
    report = json.loads(shown.stdout)
    assert report["projects"]["sepsis"] == {
        "max_epsilon": 10.0, "spent": 6.0, "left": 4.0, "runs": len(report["runs"]),
    }  # fmt: skip
    host_runs = [r for r in report["runs"] if r["role"] == "host"]
    assert [(r["epsilon"], r["kind"]) for r in host_runs] == [(6.0, "label DP")]
    first_session = host_runs[0]["session"]
    assert {r["party"] for r in report["runs"] if r["session"] == first_session} == {
        "server", "host", "guest-1",
    }  # fmt: skip
    refused = report["refused"]  # the office sees the attempt (run-local's own copy of the job)
    assert [r["party"] for r in refused] == ["host"]
    assert refused[0]["reason"].startswith("policy: this run's ε 5 would take project 'sepsis'")
    assert (policy.parent / "ledger.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("defended", [True, False])
def test_the_second_hosts_refusal_comes_before_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, defended: bool
) -> None:
    """In-process, no other party: with the ledger the Host stops on the budget; without
    the policy (leaky arm) it reaches its data file (absent here)."""
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    ledger = {"version": 1, "runs": [{"project": "sepsis", "epsilon": 6.0}]}
    (tmp_path / "ledger.json").write_text(json.dumps(ledger))
    monkeypatch.setattr("privfl.parties.vertical.startup.abort_outbound", lambda *a, **k: [])
    monkeypatch.setattr("privfl.parties.vertical.startup.REACH_SECONDS", 0.1)
    monkeypatch.delenv(policy_module.ENV_VAR, raising=False)
    monkeypatch.setattr(policy_module, "SYSTEM_PATH", tmp_path / "none.toml")
    job = job_file(tmp_path, "kit", 5)
    gate = ["--policy", str(policy)] if defended else []
    args = ["vfl", "host", "--job", str(job), "--party", "host", "--data", "absent.csv"]

    try:
        result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out"), *gate])
    finally:
        for handler in list(logging.getLogger().handlers):
            logging.getLogger().removeHandler(handler)
            handler.close()

    assert result.exit_code == 1
    assert ("past this site's budget 10" in result.stderr) is defended, result.stderr
    assert ("data file absent.csv not found" in result.stderr) is not defended, result.stderr
