"""Run one role's conformance script against a party under test, and check how it exits."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence

from privfl.config.vertical import JobConfig
from privfl.errors import ConfigError
from privfl.tools.conformance.boost_guest import VIOLATIONS, boost_guest_script
from privfl.tools.conformance.boost_host import boost_host_script
from privfl.tools.conformance.guest import guest_script
from privfl.tools.conformance.host import host_script
from privfl.tools.conformance.peer import Report
from privfl.tools.conformance.server import server_script

Script = Callable[[JobConfig, str, str, Report, "subprocess.Popen[bytes] | None"], None]
SCRIPTS: dict[str, Script] = {
    "guest": guest_script,
    "host": host_script,
    "server": server_script,
}
BOOST_SCRIPTS: dict[str, Script] = {  # jobs with [model] kind = "secureboost"
    "guest": boost_guest_script,
    "host": boost_host_script,
}
COVERED = ("logistic", "secureboost")  # the [model] kinds the scripts have known answers for
ENDINGS = ("finish", "violation")
BOOST_GUEST_ENDINGS = (*ENDINGS, *VIOLATIONS)  # which refusal a SecureBoost guest must Abort on


def run(job: JobConfig, role: str, party: str, ending: str, command: Sequence[str] = ()) -> Report:
    """Run the scripted peer for ``role`` against ``party`` (started from ``command`` if given)."""
    spec = job.party(party)
    if spec.role != role:
        raise ConfigError(f"party {party} is a {spec.role}, not a {role}")
    boost = job.model.kind == "secureboost"
    scripts = BOOST_SCRIPTS if boost else SCRIPTS
    if job.model.kind not in COVERED:
        # The GLM scripts' known answers are the logistic ones (one score per row, the
        # Taylor residual): run on another kind, they would fail a correct party.
        raise ConfigError(
            f"the conformance kit covers {' and '.join(COVERED)} jobs, not "
            f"{job.model.kind}: make its kit with `privfl init vfl --model logistic` "
            "(or secureboost)"
        )
    if role not in scripts:
        raise ConfigError(f"no conformance script for a {job.model.kind} {role}")
    endings = BOOST_GUEST_ENDINGS if boost and role == "guest" else ENDINGS
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
        scripts[role](job, party, ending, report, process)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
    return report
