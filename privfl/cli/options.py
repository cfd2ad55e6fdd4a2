"""Options several commands share, written once: the job file, the party, its output, -v."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def job_option(help: str, required: bool = True) -> Callable[[F], F]:
    """``--job FILE`` (passed as ``job_file``)."""
    return click.option(
        "--job", "job_file", type=click.Path(path_type=Path), required=required, help=help
    )


def out_option(help: str, required: bool = False) -> Callable[[F], F]:
    """``--out PATH``: where this command writes."""
    return click.option(
        "--out", type=click.Path(path_type=Path), required=required, default=None, help=help
    )


overwrite_option = click.option(
    "--overwrite",
    is_flag=True,
    help="Reuse a --out that holds an earlier run: its logs, metrics, summary and "
    "checkpoints are removed first; the audit trail is appended to and a Host's label "
    "draw for the same job is kept (without this flag a used --out is refused).",
)
party_option = click.option("--party", required=True, help="This party's name in the job file.")
verbose_option = click.option("-v", "--verbose", is_flag=True, help="Log INFO to the console too.")
no_progress_option = click.option("--no-progress", is_flag=True, help="No progress bar.")


def apply(func: F, options: list[Callable[[F], F]]) -> F:
    """Apply option decorators so that they show in ``--help`` in list order."""
    for option in reversed(options):
        func = option(func)
    return func
