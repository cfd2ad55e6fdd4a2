"""Run one role's conformance script against a party under test, and check how it exits."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence

from privfl.config.vertical import JobConfig
from privfl.errors import ConfigError
from privfl.models.registry import KINDS, ModelKind, kind_of
from privfl.tools.conformance.boost_guest import VIOLATIONS
from privfl.tools.conformance.peer import Report

Script = Callable[[JobConfig, str, str, Report, "subprocess.Popen[bytes] | None"], None]
ENDINGS = ("finish", "violation")
BOOST_GUEST_ENDINGS = (*ENDINGS, *VIOLATIONS)  # which refusal a SecureBoost guest must Abort on


def covered() -> tuple[str, ...]:
    """The kinds with at least one conformance script (the registry's)."""
    return tuple(name for name, kind in KINDS.items() if kind.conformance)


def script_for(kind: ModelKind, role: str) -> Script:
    """The kind's script for ``role``; ConfigError when it has none."""
    if not kind.conformance:  # no known answers: the scripts would fail a correct party
        raise ConfigError(
            f"the conformance kit covers {' and '.join(covered())} jobs, not {kind.name}: "
            f"make its kit with `privfl init vfl --model {covered()[0]}`"
        )
    if role not in kind.conformance:
        has = ", ".join(kind.conformance)
        raise ConfigError(f"no conformance script for a {kind.name} {role} (it has: {has})")
    script: Script = kind.load(kind.conformance[role])
    return script


def endings_for(kind: ModelKind, role: str) -> tuple[str, ...]:
    """The endings a script accepts: a tree guest also its refusals (boost_guest.py)."""
    return ENDINGS if kind.is_glm or role != "guest" else BOOST_GUEST_ENDINGS


def run(job: JobConfig, role: str, party: str, ending: str, command: Sequence[str] = ()) -> Report:
    """Run the scripted peer for ``role`` against ``party`` (started from ``command`` if given)."""
    spec = job.party(party)
    if spec.role != role:
        raise ConfigError(f"party {party} is a {spec.role}, not a {role}")
    kind = kind_of(job)
    script = script_for(kind, role)
    endings = endings_for(kind, role)
    if ending not in endings:
        raise ConfigError(f"ending {ending!r} needs a SecureBoost guest ({', '.join(endings)})")
    report = Report()
    process = None
    if command:
        try:
            process = subprocess.Popen(list(command))
        except OSError as exc:
            raise ConfigError(f"cannot start the party under test {command[0]!r}: {exc}") from exc
    try:
        script(job, party, ending, report, process)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
    return report
