"""Options several commands share, written once: the job file, the party, its output, -v,
the relay of `init vfl|hfl`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from privfl.errors import ConfigError

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
        help="With --relay: only these parties go through the relay; the others listen as "
        "before and reach them through it. [every party]",
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
