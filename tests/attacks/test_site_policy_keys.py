"""A job file that slips past the site's rules on batch size, flipback, obfuscation or the
SecureBoost instance space, and a data scientist who runs prediction sessions without end.

The attacker writes the shared job (or runs ``vfl predict`` again and again); the site's
policy (config/policy.py) has a key for each: ``[training] min_batch_size``, ``[label_dp]
allow_flipback``, ``[keys] obfuscations``, ``[secureboost] instance_spaces`` and
``[prediction] max_sessions``. Defended: the rule's one line, before any data is read
(the gate of tests/attacks/test_site_policy.py runs these checks). Leaky arm: the same
job under a policy without the key passes. Names in the policy's lists are matched
case-insensitively; a misspelt one is refused with the closest name.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from privfl.cli.governance import book_prediction
from privfl.config.policy import load_policy, policy_from_dict
from privfl.config.vertical import JobConfig, load_job
from privfl.errors import ConfigError
from privfl.runs.site_ledger import read_document
from privfl.runs.site_rules import check_vertical

FIXTURE = Path(__file__).resolve().parents[1] / "policy_fixture"
replace = dataclasses.replace


@pytest.fixture(scope="module")
def job() -> JobConfig:
    """The fixture's vertical job that the fixture's policy accepts."""
    return load_job(FIXTURE / "accepted" / "vertical.toml")


def small_batch(job: JobConfig) -> JobConfig:
    return replace(job, training=replace(job.training, batch_size=8))


def flipback(job: JobConfig) -> JobConfig:
    return replace(job, label_dp=replace(job.label_dp, flipback_every=2))


def djn(job: JobConfig) -> JobConfig:
    return replace(job, obfuscation="djn")


def shared_trees(job: JobConfig) -> JobConfig:
    model = replace(job.model, kind="secureboost", instance_space="shared")
    return replace(job, model=model)


CASES = [
    (small_batch, {"training": {"min_batch_size": 64}}, "[training] min_batch_size", "size 8 "),
    (flipback, {"label_dp": {"allow_flipback": False}}, "[label_dp] allow_flipback", "every 2"),
    (djn, {"keys": {"obfuscations": ["Standard"]}}, "[keys] obfuscations", "obfuscation 'djn'"),
    (
        shared_trees,
        {"secureboost": {"instance_spaces": ["HIDDEN"]}},
        "[secureboost] instance_spaces",
        "instance_space 'shared'",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("attack", "rule", "key", "says"), CASES, ids=[c[2] for c in CASES])
def test_each_key_refuses_its_job_in_one_line(
    job: JobConfig, attack: Any, rule: dict[str, Any], key: str, says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        check_vertical(attack(job), policy_from_dict(rule), {})

    line = str(refused.value)
    assert line.startswith("policy: ") and says in line and f"policy.toml {key})" in line
    assert "\n" not in line


@pytest.mark.parametrize(("attack", "rule", "key", "says"), CASES, ids=[c[2] for c in CASES])
def test_leaky_arm_without_the_key_the_same_job_passes(
    job: JobConfig, attack: Any, rule: dict[str, Any], key: str, says: str
) -> None:
    check_vertical(attack(job), policy_from_dict({}), {})


def test_a_job_within_the_keys_passes(job: JobConfig) -> None:
    rules = {k: v for _, r, _, _ in CASES for k, v in r.items()}
    hidden = replace(
        shared_trees(job), model=replace(shared_trees(job).model, instance_space="hidden")
    )

    check_vertical(
        replace(job, label_dp=replace(job.label_dp, flipback_every=0)), policy_from_dict(rules), {}
    )
    check_vertical(hidden, policy_from_dict(rules), {})


def test_names_are_matched_case_insensitively_with_did_you_mean() -> None:
    policy = policy_from_dict({"models": {"kinds": ["LOGISTIC"], "mechanisms": ["PnPm"]}})
    assert policy.models.kinds == ("logistic",) and policy.models.mechanisms == ("pnpm",)

    with pytest.raises(ConfigError, match=r"'logistc' is not one of .*; did you mean 'logistic'\?"):
        policy_from_dict({"models": {"kinds": ["logistc"]}})
    with pytest.raises(ConfigError, match=r"did you mean 'hidden'\?"):
        policy_from_dict({"secureboost": {"instance_spaces": ["hiden"]}})


@pytest.mark.parametrize("cap", [2, 0], ids=["capped", "leaky-no-cap"])
def test_prediction_sessions_are_booked_and_capped(
    job: JobConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cap: int
) -> None:
    monkeypatch.setattr("privfl.parties.vertical.startup.abort_outbound", lambda *a, **k: [])
    path = tmp_path / "policy.toml"
    path.write_text(f"[prediction]\nmax_sessions = {cap}\n")
    policy = load_policy(path)

    book_prediction(policy, job, "host")
    book_prediction(policy, job, "host")
    if cap:
        with pytest.raises(
            ConfigError, match=r"had 2 prediction session\(s\) at host.*max_sessions"
        ):
            book_prediction(policy, job, "host")
    else:
        book_prediction(policy, job, "host")  # a third, and any number after

    document = read_document(policy.ledger_path())
    sessions = [r for r in document["runs"] if r["mode"] == "predict"]
    assert len(sessions) == (2 if cap else 3) and all(r["epsilon"] == 0 for r in sessions)
    assert len(document["refused"]) == (1 if cap else 0)
