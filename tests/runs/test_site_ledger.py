"""The site ledger: booked at the start, refused past a project's budget, atomic and 0600."""

from __future__ import annotations

import hashlib
import json
import stat
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from privfl.cli import main
from privfl.config.policy import load_policy
from privfl.errors import ConfigError, PrivacyBudgetExceeded
from privfl.runs.site_ledger import (
    Booking,
    Spend,
    admit,
    note_refusal,
    read_document,
    read_ledger,
    spent,
)

EIGHT = Spend(8.0, 0.0, "label DP", "per label", "one draw per job")


def policy_file(tmp_path: Path, budget: float = 20) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(f"[projects.sepsis]\nmax_epsilon = {budget}\n")
    return path


def booking(session: str, party: str = "host") -> Booking:
    return Booking("sepsis", session, "f" * 64, party, "host", "vfl")


def test_runs_are_booked_until_the_budget_would_be_passed(tmp_path: Path) -> None:
    policy = load_policy(policy_file(tmp_path))
    assert admit(policy, booking("a"), EIGHT) and admit(policy, booking("b"), EIGHT)

    with pytest.raises(PrivacyBudgetExceeded) as refused:
        admit(policy, booking("c"), EIGHT)

    assert str(refused.value) == (
        "policy: this run's ε 8 would take project 'sepsis' from 16 to 24, past this site's "
        "budget 20 (policy.toml [projects.sepsis] max_epsilon; `privfl site budget` lists "
        "the runs)"
    )
    runs = read_ledger(policy.ledger_path())
    assert [r["session"] for r in runs] == ["a", "b"] and spent(runs, "sepsis") == 16
    kept = read_document(policy.ledger_path())["refused"]
    assert [(r["session"], r["reason"]) for r in kept] == [("c", str(refused.value))]
    assert stat.S_IMODE(policy.ledger_path().stat().st_mode) == 0o600


def test_the_same_run_is_booked_once_and_a_redraw_again(tmp_path: Path) -> None:
    policy = load_policy(policy_file(tmp_path))
    assert admit(policy, booking("a"), EIGHT)
    assert not admit(policy, booking("a"), EIGHT)  # a resume or restart of the same job
    assert admit(policy, booking("a"), EIGHT, again=True)  # --redraw-labels: new noise
    assert spent(read_ledger(policy.ledger_path()), "sepsis") == 16


def test_an_infinite_epsilon_never_fits_a_finite_budget(tmp_path: Path) -> None:
    policy = load_policy(policy_file(tmp_path))
    off = Spend(float("inf"), 0.0, "label DP", "per label", "no label DP")
    with pytest.raises(PrivacyBudgetExceeded, match="ε inf"):
        admit(policy, booking("a"), off)


def test_parties_booking_at_once_each_get_their_entry(tmp_path: Path) -> None:
    policy = load_policy(policy_file(tmp_path, budget=1000))
    threads = [
        threading.Thread(target=admit, args=(policy, booking("s", f"p{i}"), EIGHT))
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(read_ledger(policy.ledger_path())) == 8


def test_site_budget_prints_projects_and_runs(tmp_path: Path) -> None:
    path = policy_file(tmp_path)
    policy = load_policy(path)
    admit(policy, booking("a"), EIGHT)
    admit(policy, booking("a", "guest-1"), Spend(0.0, 0.0, "none", "no release", ""))
    note_refusal(policy, booking("b"), "policy: 100 epochs exceed this site's maximum 30")

    table = CliRunner().invoke(main, ["site", "budget", "--policy", str(path)])
    as_json = CliRunner().invoke(main, ["site", "budget", "--policy", str(path), "--json"])

    assert table.exit_code == 0, table.output
    assert table.output.splitlines()[-1].endswith(
        "b        host   policy: 100 epochs exceed this site's maximum 30"
    ), table.output
    assert "sepsis   20        8        12      2" in table.output
    report = json.loads(as_json.output)
    assert report["projects"]["sepsis"] == {
        "max_epsilon": 20.0,
        "spent": 8.0,
        "left": 12.0,
        "runs": 2,
    }
    assert [r["party"] for r in report["runs"]] == ["host", "guest-1"]
    assert report["runs"][0]["unit"] == "per label"
    assert report["runs"][0]["policy_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_unreadable_ledger_stops_the_run_instead_of_starting_a_fresh_one(
    tmp_path: Path,
) -> None:
    policy = load_policy(policy_file(tmp_path))
    policy.ledger_path().write_text("{not json")
    with pytest.raises(ConfigError, match=r"cannot read the site ledger .*; restore it"):
        admit(policy, booking("a"), EIGHT)
    assert policy.ledger_path().read_text() == "{not json"
