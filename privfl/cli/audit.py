"""``privfl audit verify|export``: what a governance office checks after a run."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from privfl.cli.errors import friendly_errors
from privfl.cli.options import Group

EXIT_FINDINGS = 1

RUN_DIRS = click.argument(
    "run_dirs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path)
)
CHAINS_ONLY = click.option(
    "--chains-only",
    is_flag=True,
    help="Check each log's own chain only, not against the peers' logs (when you hold one "
    "party's log: a party that rewrote its whole chain consistently is then not caught).",
)


@click.group(cls=Group)
def audit() -> None:
    """Check the parties' hash-chained audit logs (audit.jsonl), alone and against each other."""


@audit.command("verify")
@RUN_DIRS
@CHAINS_ONLY
@friendly_errors
def verify_command(run_dirs: tuple[Path, ...], chains_only: bool) -> None:
    """Check every log's chain and that every message sent was received: one line per finding.

    RUN_DIRS: each party's run folder (its --out), a run-local folder holding one folder
    per party, an audit.jsonl, or a file written by `privfl audit export`. Pass every
    party's log of the session. Exits non-zero on any finding.
    """
    from privfl.tools.audit.verify import verify

    report = verify(run_dirs, cross=not chains_only)
    for finding in report.findings:
        click.echo(finding)
    for note in report.notes:  # what the check could not tell: not findings
        click.echo(f"note: {note}", err=True)
    click.echo(_summary(report.ok, len(report.chains), len(report.findings)))
    if not report.ok:
        sys.exit(EXIT_FINDINGS)


@audit.command("export")
@RUN_DIRS
@click.option(
    "--out", required=True, type=click.Path(path_type=Path), help="The file to write (JSON)."
)
@CHAINS_ONLY
@friendly_errors
def export_command(run_dirs: tuple[Path, ...], out: Path, chains_only: bool) -> None:
    """Write one file for a reviewer: every log, verbatim, and the verification result.

    The reviewer checks it again with `privfl audit verify FILE`. It holds no audit keys.
    Exits non-zero when the verification found something (the file is written anyway).
    """
    from privfl.tools.audit.verify import export, verify

    report = verify(run_dirs, cross=not chains_only)
    export(report, out)
    click.echo(f"{_summary(report.ok, len(report.chains), len(report.findings))}; wrote {out}")
    if not report.ok:
        sys.exit(EXIT_FINDINGS)


def _summary(ok: bool, logs: int, findings: int) -> str:
    read = f"{logs} log{'s' * (logs != 1)}"
    if ok:
        return f"audit: {read} verified, no findings"
    return f"audit: {findings} finding{'s' * (findings != 1)} in {read}"
