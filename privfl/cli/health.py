"""``privfl health``: one line saying whether a party is waiting, training or stopped."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from privfl.cli.errors import friendly_errors

EXIT_UNHEALTHY = 1


@click.command("health")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    help="The party's run folder (its --out).",
)
@friendly_errors
def health(out: Path) -> None:
    """Print `waiting: …`, `training: …` or `stopped: …` for the party writing to OUT.

    Exits 0 while the party waits for its peers or trains and after a session that ended
    well; 1 after a session that failed, or when OUT is no run folder. A container's
    health check and a Kubernetes probe call this (docs/deploy.md, containers).
    """
    from privfl.runs.health import party_health

    found = party_health(out)
    click.echo(found.line())
    if not found.ok:
        sys.exit(EXIT_UNHEALTHY)
