"""Options several commands share, written once: the job file, the party, its output, -v,
the relay of `init vfl|hfl`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from privfl.cli.optable import TableOption
from privfl.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


def job_option(help: str, required: bool = True) -> Callable[[F], F]:
    """``--job FILE`` (passed as ``job_file``)."""
    return click.option(
        "--job", "job_file", type=click.Path(path_type=Path), required=required, help=help
    )


def out_option(help: str, required: bool = False, default_text: str = "") -> Callable[[F], F]:
    """``--out PATH``: where this command writes (``default_text``: where, without it)."""
    return click.option(
        "--out",
        cls=TableOption,
        shown=default_text,
        type=click.Path(path_type=Path),
        required=required,
        default=None,
        help=help,
    )


OVERWRITE_HELP = (
    "Reuse a --out that holds an earlier run: its logs, metrics, summary and checkpoints "
    "are removed first; the audit trail is appended to{kept} (without this flag a used "
    "--out is refused)."
)
overwrite_option = click.option("--overwrite", is_flag=True, help=OVERWRITE_HELP.format(kept=""))
host_overwrite_option = click.option(
    "--overwrite",
    is_flag=True,
    help=OVERWRITE_HELP.format(kept=" and the Host's label draw for the same job is kept"),
)
"""``--overwrite`` where a Host runs (`vfl host`, `vfl run-local`): its label draw is kept."""
party_option = click.option("--party", required=True, help="This party's name in the job file.")
verbose_option = click.option("-v", "--verbose", is_flag=True, help="Log INFO to the console too.")
no_progress_option = click.option("--no-progress", is_flag=True, help="No progress bar.")


class Group(click.Group):
    """A group that lists each subcommand with its whole first sentence, never cut to fit."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, summary(command)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def summary(command: click.Command) -> str:
    """A command's short help: its ``short_help``, else its docstring's first sentence, whole."""
    return command.get_short_help_str(limit=10_000)


def apply(func: F, options: list[Callable[[F], F]]) -> F:
    """Apply option decorators so that they show in ``--help`` in list order."""
    for option in reversed(options):
        func = option(func)
    return func


relay_options = [
    click.option(
        "--relay",
        "relay_endpoint",
        default=None,
        metavar="tcp://HOST:PORT",
        help="Write the job relayed, for sites that open no inbound port (docs/deploy.md "
        "§2a): the parties connect out to `privfl relay`, which listens at this address (as "
        "the sites reach it) and learns who talks to whom but reads no message. The relay's "
        "key pair is written with the parties'. Start it first: `privfl relay --job "
        "OUT/job.toml --bind tcp://0.0.0.0:PORT`.",
    ),
    click.option(
        "--relayed",
        default=None,
        metavar="NAME[,NAME…]",
        cls=TableOption,
        shown="every party",
        help="With --relay: only these parties go through the relay; the others listen as "
        "before and reach them through it.",
    ),
]


def with_relay_options(func: F) -> F:
    """``--relay`` and ``--relayed`` (`init vfl|hfl`; read them with :func:`pop_relay_options`)."""
    for option in reversed(relay_options):
        func = option(func)
    return func


def is_tcp_endpoint(url: str) -> bool:
    """Whether ``url`` reads ``tcp://HOST:PORT`` with a port in 1..65535."""
    host, sep, port = url.removeprefix("tcp://").rpartition(":")
    return (
        url.startswith("tcp://") and bool(sep and host) and port.isdigit() and 0 < int(port) < 65536
    )


def pop_relay_options(opts: dict[str, Any]) -> tuple[str, list[str]]:
    """Take ``--relay``/``--relayed`` out of the keyword arguments: (endpoint, names).

    The endpoint is "" without ``--relay``; no names means every party.
    """
    endpoint = (opts.pop("relay_endpoint") or "").strip()
    names = [n.strip() for n in (opts.pop("relayed") or "").split(",") if n.strip()]
    if names and not endpoint:
        raise ConfigError("--relayed needs --relay tcp://HOST:PORT, where `privfl relay` listens")
    if endpoint and not is_tcp_endpoint(endpoint):
        raise ConfigError(
            f"--relay {endpoint[:60]!r}: write tcp://HOST:PORT, the relay's address as the "
            "sites reach it (e.g. tcp://relay.example.org:443)"
        )
    return endpoint, names
