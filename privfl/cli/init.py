"""`privfl init vfl|hfl`: write a job kit (job file + CURVE keys) for either mode."""

from __future__ import annotations

import click

from privfl.cli import LazyGroup

KITS = {
    "vfl": ("privfl.cli.vfl:init_vfl", "Vertical kit: job.toml and keys (or one folder per site)."),
    "hfl": ("privfl.cli.hfl:init_cmd", "Horizontal kit: job.toml and keys for aggregator/clients."),
}


@click.group(cls=LazyGroup, lazy=KITS)
def init() -> None:
    """Write job kits (job file + CURVE keys) for running parties as separate commands."""
