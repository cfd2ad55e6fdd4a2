"""Run one role's conformance script against a party under test, and check how it exits."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import replace

from privfl.config.vertical import JobConfig
from privfl.errors import ConfigError
from privfl.models.registry import KINDS, ModelKind, kind_of
from privfl.tools.conformance.boost_guest import VIOLATIONS
from privfl.tools.conformance.peer import Bystanders, Report
from privfl.tools.conformance.target import NO_FILES, PredictInputs, Script, Target

ENDINGS = ("finish", "violation")
BOOST_GUEST_ENDINGS = (*ENDINGS, *VIOLATIONS)  # which refusal a SecureBoost guest must Abort on
SESSIONS = ("train", "predict")
ROLES = ("guest", "host", "server")


def script_key(role: str, session: str) -> str:
    """A script's key in a registry entry's ``conformance`` map: the role for a training
    session, ``predict:<role>`` for a prediction session."""
    return role if session == "train" else f"{session}:{role}"


def covered() -> tuple[str, ...]:
    """The kinds with at least one conformance script (the registry's)."""
    return tuple(name for name, kind in KINDS.items() if kind.conformance)


def script_for(kind: ModelKind, role: str, session: str = "train") -> Script:
    """The kind's script for ``role`` in a ``session``; ConfigError when it has none."""
    if not kind.conformance:  # no known answers: the scripts would fail a correct party
        raise ConfigError(
            f"the conformance kit covers {' and '.join(covered())} jobs, not {kind.name}: "
            f"make its kit with `privfl init vfl --model {covered()[0]}`"
        )
    if script_key(role, session) not in kind.conformance:
        roles = [r for r in ROLES if script_key(r, session) in kind.conformance]
        where = "" if session == "train" else f" in a {session} session"
        raise ConfigError(
            f"no conformance script for a {kind.name} {role}{where} "
            f"(it has: {', '.join(roles) or 'none'})"
        )
    script: Script = kind.load(kind.conformance[script_key(role, session)])
    return script


def endings_for(kind: ModelKind, role: str, session: str = "train") -> tuple[str, ...]:
    """The endings a script accepts: a tree guest also its refusals (boost_guest.py); a
    guest's prediction session only ``finish`` (it has no message to refuse)."""
    if session == "predict":
        return ("finish",) if role == "guest" else ENDINGS
    return ENDINGS if kind.is_glm or role != "guest" else BOOST_GUEST_ENDINGS


def run(
    job: JobConfig,
    role: str,
    party: str,
    ending: str,
    command: Sequence[str] = (),
    session: str = "train",
    inputs: PredictInputs | None = None,
) -> Report:
    """Run the scripted peer for ``role`` against ``party`` (started from ``command`` if
    given) in a training or prediction ``session``."""
    spec = job.party(party)
    if spec.role != role:
        raise ConfigError(f"party {party} is a {spec.role}, not a {role}")
    kind = kind_of(job)
    script = script_for(kind, role, session)
    if session != "predict" and inputs is not None:
        raise ConfigError("--model, --data and --predictions are for --session predict")
    endings = endings_for(kind, role, session)
    if ending not in endings:
        if session == "predict":
            raise ConfigError(
                f"ending {ending!r}: a {role}'s prediction session takes {', '.join(endings)}"
            )
        raise ConfigError(f"ending {ending!r} needs a SecureBoost guest ({', '.join(endings)})")
    report = Report()
    # The scripts play a guest's Server and Host; its fellow guests only read and ACK.
    others = [g for g in job.guests if g != party] if role == "guest" else []
    with Bystanders(job, others):
        _run_script(script, Target(job, party, ending, report, None, inputs or NO_FILES), command)
    return report


def _run_script(script: Script, target: Target, command: Sequence[str]) -> None:
    """Start the party under test (if ``command``), run the script, stop the party."""
    process = None
    if command:
        try:
            process = subprocess.Popen(list(command))
        except OSError as exc:
            raise ConfigError(f"cannot start the party under test {command[0]!r}: {exc}") from exc
    try:
        script(replace(target, process=process))
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
