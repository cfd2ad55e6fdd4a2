"""`privfl conformance`: check a running party against the protocol (docs/conformance.md)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from privfl.cli.errors import friendly_errors
from privfl.cli.options import job_option

F = TypeVar("F", bound=Callable[..., Any])

ROLES = ("guest", "host", "server")  # privfl.tools.conformance.SCRIPTS, without importing it
ENDINGS = (
    "finish",
    "violation",
    "unknown-node",
    "repeated-node",
    "small-node",
    "foreign-rows",
    "forged-proof",
)
SESSIONS = ("train", "predict")  # tools.conformance.runner.SESSIONS


def _file(name: str, help_text: str) -> Callable[[F], F]:
    """An optional path option of a prediction session (the kit's known answers)."""
    return click.option(name, type=click.Path(path_type=Path), default=None, help=help_text)


@click.command("conformance", context_settings={"ignore_unknown_options": True})
@click.option("--role", type=click.Choice(ROLES), required=True, help="Role under test.")
@job_option("The kit's job file (the tool needs the other parties' keys from its keys folder).")
@click.option("--party", required=True, help="Name of the running party under test.")
@click.option(
    "--ending",
    type=click.Choice(ENDINGS),
    default="finish",
    help="End with a Finish (party must exit 0) or a fatal violation (party must Abort);"
    " a SecureBoost guest also: unknown-node (= violation), repeated-node, small-node,"
    " foreign-rows, forged-proof.",
)
@click.option(
    "--session",
    type=click.Choice(SESSIONS),
    default="train",
    show_default=True,
    help="The session under test: training (`vfl <role>`) or prediction (`vfl predict`).",
)
@_file("--model", "The party's model.json (privfl's format, docs/protocol.md §6.8); predict only.")
@_file("--data", "The CSV of new rows the party scores; predict only.")
@_file("--predictions", "The CSV a Host under test writes (its --out); predict only.")
@click.argument("party_command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND...]")
@friendly_errors
def command(
    role: str,
    job_file: Path,
    party: str,
    ending: str,
    session: str,
    model: Path | None,
    data: Path | None,
    predictions: Path | None,
    party_command: tuple[str, ...],
) -> None:
    """Check a party against the protocol by playing every party it talks to.

    Either start the party under test first, with its usual command and the same
    kit, or give that command after ``--``: the tool starts it and also checks its
    exit status (0 after finish, non-zero after a violation). Prints PASS/FAIL per
    check; exits 0 only if every check passed. Each model kind has its scripts (the
    registry of kinds): every GLM kind (logistic, linear, poisson, multiclass) gets
    the guest, host and server scripts with its own known answers; "secureboost" the
    SecureBoost guest and host scripts (histograms, partitions, gradients, node
    requests; a guest's colsample columns, on a kit made with ``--colsample`` below 1,
    e.g. 0.66); a role a kind has no script for is refused in one line. With
    ``--session predict`` it checks a prediction session (`vfl predict`) of any kind
    and role; given the party's --model and --data (and a Host's --predictions) it
    checks the scores, decisions and predictions against them. See docs/conformance.md.

    \b
    Examples:
      privfl vfl guest --job kit/job.toml --party guest-1 --out run/g &
      privfl conformance --role guest --job kit/job.toml --party guest-1
      privfl conformance --role guest --job kit/job.toml --party guest-1 -- \\
          ./my-guest --job kit/job.toml --party guest-1
      privfl conformance --session predict --role guest --job kit/job.toml \\
          --party guest-1 --model run/g/model.json --data new.csv -- \\
          ./my-guest predict --job kit/job.toml --party guest-1 --data new.csv
    """
    from privfl.config.vertical import load_job
    from privfl.tools.conformance.runner import run
    from privfl.tools.conformance.target import PredictInputs

    given = (model, data, predictions) != (None, None, None)
    inputs = PredictInputs(model, data, predictions) if given else None
    report = run(load_job(job_file), role, party, ending, party_command, session, inputs)
    passed = sum(ok for _, ok, _ in report.checks)
    click.echo(f"{passed}/{len(report.checks)} checks passed")
    if not report.passed:
        sys.exit(1)
