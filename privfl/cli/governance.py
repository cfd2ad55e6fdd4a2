"""`--policy` for every party command, and `privfl site budget`: the site's governance glue.

A party finds its policy at ``--policy FILE``, else ``$PRIVFL_POLICY``, else
``/etc/privfl/policy.toml`` when that exists; a site with none runs without limits.
The gate runs right after the job file is read: before the party reads data, opens
its inbox or sends a protocol message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from privfl.cli.errors import friendly_errors
from privfl.cli.optable import TableOption
from privfl.cli.options import Group
from privfl.config.horizontal import HflJob
from privfl.config.policy import ENV_VAR, SYSTEM_PATH, SitePolicy, find_policy, load_policy
from privfl.config.vertical import JobConfig
from privfl.errors import ConfigError, PrivflError

if TYPE_CHECKING:
    from privfl.runs.site_ledger import Booking, LedgerDraws

policy_option = click.option(
    "--policy",
    "policy_file",
    type=click.Path(path_type=Path),
    default=None,
    cls=TableOption,
    shown=f"${ENV_VAR}, else {SYSTEM_PATH} if it exists; none: no site limits",
    help="This site's policy file (docs/deploy.md, section 9).",
)

project_option = click.option(
    "--project",
    default=None,
    help="The approved project whose site ε budgets the job spends: written into the "
    "job (and its fingerprint); sites whose policy lists projects refuse a job without "
    "one (docs/deploy.md, section 9).",
    cls=TableOption,
    shown="none",
)


def site_policy(option: Path | None) -> SitePolicy | None:
    """The policy this party runs under, or None when the site has none."""
    path = find_policy(option)
    return load_policy(path) if path is not None else None


def peer_fingerprints(
    job: JobConfig | HflJob, party: str, policy: SitePolicy
) -> dict[str, str | None]:
    """Each peer's public-key fingerprint from the key folder (None: no usable key file)."""
    from privfl.protocol.keys import PUBLIC_SUFFIX, fingerprint, load_public_key

    if not policy.peers.allowed:
        return {}
    found: dict[str, str | None] = {}
    for peer in job.parties:
        if peer == party:
            continue
        try:
            found[peer] = fingerprint(load_public_key(job.keys_path() / f"{peer}{PUBLIC_SUFFIX}"))
        except (OSError, ValueError, PrivflError):  # missing or malformed: none to allow
            found[peer] = None
    return found


def vertical_gate(job: JobConfig, party: str, option: Path | None) -> SitePolicy | None:
    """Refuse a vertical job this site's policy forbids; returns the policy (or None)."""
    from privfl.runs.site_rules import check_vertical

    policy = site_policy(option)
    if policy is not None:
        with noting_refusal(policy, booking(job, party, "vfl")):
            check_vertical(job, policy, peer_fingerprints(job, party, policy))
    return policy


def vertical_gate_telling(job: JobConfig, party: str, option: Path | None) -> SitePolicy | None:
    """:func:`vertical_gate`; a refusal is sent to the peers that connect as an Abort (the
    only message a refusing party sends), so none waits for its timeout."""
    from privfl.parties.vertical.startup import abort_outbound, show_now

    try:
        return vertical_gate(job, party, option)
    except PrivflError as exc:
        show_now(exc)  # this site's refusal is on its terminal before the peers are told
        abort_outbound(job, party, exc)
        raise


def hfl_gate(job: HflJob, party: str, option: Path | None) -> SitePolicy | None:
    """Refuse a horizontal job this site's policy forbids; returns the policy (or None)."""
    from privfl.runs.site_rules import check_hfl

    policy = site_policy(option)
    if policy is not None:
        with noting_refusal(policy, booking(job, party, "hfl")):
            check_hfl(job, policy, peer_fingerprints(job, party, policy))
    return policy


def booking(job: JobConfig | HflJob, party: str, mode: str) -> Booking:
    """Which run of which job at which party a ledger entry is about."""
    from privfl.runs.site_ledger import Booking

    role = job.party(party).role
    return Booking(job.project, job.session, job.fingerprint(), party, role, mode)


@contextmanager
def noting_refusal(policy: SitePolicy, run: Booking) -> Iterator[None]:
    """Keep a refusal in the site ledger, then let it go on to stop the command."""
    from privfl.runs.site_ledger import note_refusal

    try:
        yield
    except ConfigError as exc:
        note_refusal(policy, run, str(exc))
        raise


def book_vertical(
    policy: SitePolicy | None, job: JobConfig, party: str, *, again: bool = False
) -> None:
    """Book this vertical run in the site ledger, or refuse it past the project's budget."""
    from privfl.runs.site_ledger import admit
    from privfl.runs.site_spend import vertical_spend

    if policy is not None:
        run = booking(job, party, "vfl")
        admit(policy, run, vertical_spend(job, run.role), again=again)


def book_prediction(policy: SitePolicy | None, job: JobConfig, party: str) -> None:
    """Book this prediction session (ε 0) in the site ledger, or refuse it past the
    site's ``[prediction] max_sessions`` (the peers hear of it by Abort)."""
    from privfl.parties.vertical.startup import abort_outbound
    from privfl.runs.site_ledger import admit_prediction

    if policy is None:
        return
    try:
        admit_prediction(policy, booking(job, party, "predict"))
    except PrivflError as exc:
        abort_outbound(job, party, exc)
        raise


def draw_book(policy: SitePolicy | None, job: JobConfig, party: str) -> LedgerDraws | None:
    """Where the Host books its label draws: the site ledger (None: no policy, not a Host)."""
    from privfl.runs.site_ledger import LedgerDraws

    if policy is None or job.party(party).role != "host":
        return None
    return LedgerDraws(policy, booking(job, party, "vfl"))


def book_hfl(policy: SitePolicy | None, job: HflJob, party: str) -> None:
    """Book this horizontal run in the site ledger, or refuse it past the project's budget.

    Every start books again: a horizontal run has no resume, and each start draws its
    clients' noise afresh from the OS CSPRNG, so a rerun of the same job releases anew.
    """
    from privfl.runs.site_ledger import admit
    from privfl.runs.site_spend import hfl_spend

    if policy is not None:
        run = booking(job, party, "hfl")
        admit(policy, run, hfl_spend(job, run.role), again=True)


@click.group(cls=Group)
def site() -> None:
    """What a site's governance office reads: the ledger of ε spent per project."""


@site.command("budget")
@policy_option
@click.option("--json", "as_json", is_flag=True, help="Print the ledger as JSON.")
@friendly_errors
def budget_cmd(policy_file: Path | None, as_json: bool) -> None:
    """Print each project's budget, spent and left ε at this site, every booked run, and
    every job the site's policy refused."""
    from privfl.runs.site_report import site_report

    policy = site_policy(policy_file)
    if policy is None:
        raise click.UsageError(f"no site policy: pass --policy FILE or set ${ENV_VAR}")
    report = site_report(policy)
    click.echo(json.dumps(report, indent=2) if as_json else budget_table(report))


def budget_table(report: dict[str, Any]) -> str:
    """The report as aligned tables: projects, runs in booking order, refused jobs."""
    from privfl.runs.site_ledger import epsilon_of

    head = [("project", "budget ε", "spent ε", "left ε", "runs")]
    rows = head + [
        (name or "(none)", *(_fmt(p[k]) for k in ("max_epsilon", "spent", "left")), str(p["runs"]))
        for name, p in report["projects"].items()
    ]
    runs = [("started", "project", "session", "party", "role", "ε", "δ", "kind")] + [
        (
            r["started"],
            r["project"] or "(none)",
            r["session"],
            r["party"],
            r["role"],
            _fmt(epsilon_of(r)),
            f"{r['delta']:g}",
            r["kind"],
        )
        for r in report["runs"]
    ]
    refused = [("refused", "session", "party", "reason")] + [
        (r["refused"], r["session"], r["party"], r["reason"]) for r in report["refused"]
    ]
    return "\n".join(
        [f"site ledger {report['ledger']}", *_aligned(rows), "", *_aligned(runs)]
        + (["", *_aligned(refused)] if report["refused"] else [])
    )


def _fmt(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:g}"


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
