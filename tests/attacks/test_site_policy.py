"""Adversarial job files against a site policy: each is refused before any data is read.

The attacker writes the shared job (tests/policy_fixture/jobs/: a label ε above the
site's maximum, a model kind or mechanism it never allowed, more epochs, a 1024-bit
key, a depth that makes tiny leaves, a PSI cap above the site's, an unknown peer key,
…) and hopes each site's party runs it. Every role of the mode runs the real command
(in-process) with ``--data`` naming a file that does not exist; every step past the
gate — reading data, loading a model, opening a socket, running the party — is
replaced by one that raises :class:`Touched`. Defended, the command exits 1 with one
line naming the policy rule, and the party never got further. The leaky arm runs the
same jobs without the policy: the party goes on to read its data.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from privfl.cli import main
from privfl.config import policy as policy_module

FIXTURE = Path(__file__).resolve().parents[1] / "policy_fixture"
JOBS = sorted((FIXTURE / "jobs").glob("*.toml"))
VERTICAL = ("server", "host", "guest-1")
HORIZONTAL = {"aggregator": "aggregator", "client": "clients-1", "shuffler": "shuffler"}


class Touched(Exception):
    """A party went past the policy gate: it read data, loaded a model or opened a socket."""


@dataclass(frozen=True)
class Case:
    """One adversarial job file and what its header says refuses it."""

    path: Path
    refused: str  # text the refusal line holds
    rule: str  # "[label_dp] max_epsilon"; "" when the job file's own check refuses it

    @property
    def horizontal(self) -> bool:
        return self.path.stem.startswith("hfl-")


def case(path: Path) -> Case:
    head = dict(
        line[2:].split(": ", 1) for line in path.read_text().splitlines() if line.startswith("# ")
    )
    return Case(path, head["refused"], head["rule"])


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A copy of the fixture; every way past the gate raises Touched; Aborts are recorded."""
    root = tmp_path / "site"
    shutil.copytree(FIXTURE, root)
    for target in (
        "privfl.parties.vertical.inputs.party_inputs",
        "privfl.parties.vertical.runner.run_party",
        "privfl.parties.vertical.runner.open_transport",
        "privfl.parties.vertical.predict.load_model",
        "privfl.parties.vertical.predict.prediction_rows",
        "privfl.parties.vertical.secureboost.predict.load_boost_model",
        "privfl.parties.horizontal.aggregator.run_aggregator",
        "privfl.parties.horizontal.client.run_client_host",
        "privfl.parties.horizontal.shuffler.run_shuffler",
    ):
        monkeypatch.setattr(target, _raiser(target))
    told: list[tuple[str, str]] = []

    def abort(job: Any, name: str, error: BaseException, out: Any = None) -> list[str]:
        told.append((name, str(error)))
        return []

    monkeypatch.setattr("privfl.parties.vertical.startup.abort_outbound", abort)
    monkeypatch.delenv(policy_module.ENV_VAR, raising=False)
    monkeypatch.setattr(policy_module, "SYSTEM_PATH", tmp_path / "no-system-policy.toml")
    return {"root": root, "told": told, "absent": tmp_path / "absent.csv", "out": tmp_path / "out"}


def _raiser(what: str) -> Any:
    def touched(*_: Any, **__: Any) -> Any:
        raise Touched(what)

    return touched


def commands(job: Path, site: dict[str, Any], horizontal: bool) -> list[list[str]]:
    """Every party command a job of this mode is run by: each role's training, and the
    vertical prediction of each role; hosts and guests name a data file that is absent."""
    out = str(site["out"])
    if horizontal:
        return [
            ["hfl", role, "--job", str(job), "--party", party, "--out", out]
            for role, party in HORIZONTAL.items()
        ]
    runs = []
    for party in VERTICAL:
        data = [] if party == "server" else ["--data", str(site["absent"])]
        runs.append(["vfl", party.split("-")[0], "--job", str(job), "--party", party, *data])
        model = [] if party == "server" else ["--model", str(site["absent"].parent)]
        runs.append(["vfl", "predict", "--job", str(job), "--party", party, *model, *data])
    return [[*args, "--out", out] if args[1] != "predict" else args for args in runs]


def invoke(args: list[str], policy: Path | None) -> Any:
    """Run the command in-process; close the party log it may have opened."""
    extra = [] if policy is None else ["--policy", str(policy)]
    try:
        return CliRunner().invoke(main, [*args, *extra])
    finally:
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()


@pytest.mark.parametrize("path", JOBS, ids=[p.stem for p in JOBS])
def test_each_adversarial_job_is_refused_by_every_role_before_any_data(
    path: Path, site: dict[str, Any]
) -> None:
    # Prepare: the attacker's job in the site's copy of the fixture, the site's policy.
    adversarial = case(path)
    job = site["root"] / "jobs" / path.name
    policy = site["root"] / "policy.toml"

    lines_seen = []
    for args in commands(job, site, adversarial.horizontal):
        # Act: the site's party command, as its operator starts it.
        result = invoke(args, policy)
        lines_seen.append(result.stderr.strip().removeprefix("privfl: error: "))

        # Assert: exit 1, one line naming the rule, nothing past the gate, no run folder.
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 1, (args, result.output)
        assert len(lines) == 1 and "Touched" not in result.stderr, (args, result.stderr)
        assert adversarial.refused in lines[0], (args, lines[0])
        if adversarial.rule:
            assert lines[0].startswith("privfl: error: policy: "), lines[0]
            assert lines[0].endswith(f"(policy.toml {adversarial.rule})"), lines[0]
        assert not site["out"].exists(), args
    # The office finds each refusal in the site ledger, and no run booked.
    ledger = site["root"] / "ledger.json"
    if adversarial.rule:
        document = json.loads(ledger.read_text())
        assert document["runs"] == []
        assert [r["reason"] for r in document["refused"]] == lines_seen
    else:  # the job file itself did not load: there is no job to record
        assert not ledger.exists()
    if adversarial.rule and not adversarial.horizontal:  # the peers hear of the refusal
        assert {name for name, _ in site["told"]} == set(VERTICAL)
        assert all(adversarial.refused in why for _, why in site["told"])


POLICY_CASES = [p for p in JOBS if case(p).rule]


@pytest.mark.parametrize("path", POLICY_CASES, ids=[p.stem for p in POLICY_CASES])
def test_without_the_policy_the_same_job_reaches_the_data(path: Path, site: dict[str, Any]) -> None:
    """The leaky arm: no site policy, and the party goes on to read its data (or run)."""
    adversarial = case(path)
    job = site["root"] / "jobs" / path.name
    args = commands(job, site, adversarial.horizontal)[2 if not adversarial.horizontal else 1]

    result = invoke(args, None)

    assert "Touched" in result.stderr, (args, result.stderr)
    assert "policy:" not in result.stderr


def test_the_fixture_holds_at_least_twenty_jobs_of_both_modes() -> None:
    cases = [case(p) for p in JOBS]
    assert len(cases) >= 20
    assert sum(c.horizontal for c in cases) >= 5 and sum(not c.horizontal for c in cases) >= 15
    assert len({c.rule for c in cases if c.rule}) >= 12  # most rules of the policy are hit


@pytest.mark.parametrize(("name", "horizontal"), [("vertical", False), ("horizontal", True)])
def test_a_job_within_the_policy_passes_the_gate_and_is_booked(
    name: str, horizontal: bool, site: dict[str, Any]
) -> None:
    """The control: the harness sees a party that gets past the gate (Touched)."""
    job = site["root"] / "accepted" / f"{name}.toml"
    for args in commands(job, site, horizontal):
        if args[1] == "predict":
            continue
        shutil.rmtree(site["out"], ignore_errors=True)
        result = invoke(args, site["root"] / "policy.toml")
        assert "Touched" in result.stderr, (args, result.stderr)
    ledger = (site["root"] / "ledger.json").read_text()
    assert ('"role": "host"' in ledger) is not horizontal
    assert ('"role": "clients"' in ledger) is horizontal
