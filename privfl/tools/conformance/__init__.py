"""``privfl conformance``: a scripted peer that checks a running party against the protocol.

The party under test runs with its ordinary command. This tool plays every
party that one talks to (binding their endpoints with their keys from the kit),
walks it through the protocol (docs/protocol.md), sends it invalid messages that
must be refused without effect, checks every answer, and ends either with a
Finish (the party must exit cleanly) or with a fatal protocol violation (the
party must Abort, naming it). Every role can be checked; the host needs a job
with demo columns (the tool must know each guest's row counts), the guest a job
with two or more guests. Given the party's command, the tool starts it and checks
its exit status too. See docs/conformance.md.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from privfl.config.vertical import JobConfig, load_job
from privfl.errors import ConfigError
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


def run(job: JobConfig, role: str, party: str, ending: str, command: Sequence[str] = ()) -> Report:
    """Run the scripted peer for ``role`` against ``party`` (started from ``command`` if given)."""
    spec = job.party(party)
    if spec.role != role:
        raise ConfigError(f"party {party} is a {spec.role}, not a {role}")
    if role not in SCRIPTS:
        raise ConfigError(f"no conformance script for role {role!r}")
    report = Report()
    process = None
    if command:
        try:
            process = subprocess.Popen(list(command))
        except OSError as exc:
            raise ConfigError(f"cannot start the party under test {command[0]!r}: {exc}") from exc
    try:
        SCRIPTS[role](job, party, ending, report, process)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
    return report


@click.command("conformance", context_settings={"ignore_unknown_options": True})
@click.option("--role", type=click.Choice(sorted(SCRIPTS)), required=True, help="Role under test.")
@click.option(
    "--job",
    "job_file",
    type=click.Path(path_type=Path),
    required=True,
    help="The kit's job file (the tool needs the other parties' keys from its keys folder).",
)
@click.option("--party", required=True, help="Name of the running party under test.")
@click.option(
    "--ending",
    type=click.Choice(["finish", "violation"]),
    default="finish",
    help="End with a Finish (party must exit 0) or a fatal violation (party must Abort).",
)
@click.argument("party_command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND...]")
def command(
    role: str, job_file: Path, party: str, ending: str, party_command: tuple[str, ...]
) -> None:
    """Check a party against the protocol by playing every party it talks to.

    Either start the party under test first, with its usual command and the same
    kit, or give that command after ``--``: the tool starts it and also checks its
    exit status (0 after finish, non-zero after a violation). Prints PASS/FAIL per
    check; exits 0 only if every check passed. See docs/conformance.md.

    \b
    Examples:
      privfl vfl guest --job kit/job.toml --party guest-1 --out run/g &
      privfl conformance --role guest --job kit/job.toml --party guest-1
      privfl conformance --role guest --job kit/job.toml --party guest-1 -- \\
          ./my-guest --job kit/job.toml --party guest-1
    """
    from privfl.cli.errors import friendly_errors

    @friendly_errors
    def go() -> None:
        report = run(load_job(job_file), role, party, ending, party_command)
        passed = sum(ok for _, ok, _ in report.checks)
        click.echo(f"{passed}/{len(report.checks)} checks passed")
        if not report.passed:
            sys.exit(1)

    go()
