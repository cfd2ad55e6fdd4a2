"""The command line: ``privfl`` and its subcommands, each imported only when it runs.

``privfl --help`` and ``privfl vfl guest --help`` load click and the job-file core,
nothing else: a party process pays only for the modules its own role needs (the
Guest never loads matplotlib, torch or the experiments). Every command module sits
next to this one; :class:`LazyGroup` names them without importing them.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

# name -> (module:attribute, one-line help shown by `privfl --help` without importing it)
COMMANDS = {
    "vfl": ("privfl.cli.vfl:vfl", "Vertical FL: Paillier-encrypted models with label DP."),
    "hfl": (
        "privfl.cli.hfl:hfl",
        "Horizontal FL: PyTorch clients with local DP and FedAvg.",
    ),
    "relay": (
        "privfl.cli.relay:relay",
        "Carry sealed messages between parties that open no port.",
    ),
    "init": ("privfl.cli.init:init", "Write job kits (job file + CURVE keys) for either mode."),
    "keys": ("privfl.cli.keys:keys", "CURVE key pairs that authenticate each party."),
    "audit": (
        "privfl.cli.audit:audit",
        "Check the parties' hash-chained audit logs; export them for a reviewer.",
    ),
    "health": (
        "privfl.cli.health:health",
        "Whether a party is waiting, training or stopped (for health checks).",
    ),
    "site": (
        "privfl.cli.governance:site",
        "What a site's governance office reads: the ε ledger per project.",
    ),
    "board": (
        "privfl.cli.board:board",
        "A read-only web page over this site's runs: progress, ε ledger, audit.",
    ),
    "bench": ("privfl.cli.bench:bench", "Benchmarks: measure, never deploy."),
    "conformance": (
        "privfl.cli.conformance:command",
        "Check a party against the protocol by playing every party it talks to.",
    ),
    "experiment": (
        "privfl.cli.experiment:experiment",
        "Reproduce a source paper's experiment (CSV, PNG plots, report.md).",
    ),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use, from ``module:attribute``."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name][0].partition(":")
            command: click.Command = getattr(importlib.import_module(module), attribute)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the subcommands with their short help, importing none of them."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy:
                rows.append((name, self.lazy[name][1]))
            else:
                command = super().get_command(ctx, name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="privfl")
def main() -> None:
    """privfl: privacy-preserving federated learning.

    Vertical mode: a Host (features + labels), one or more Guests (features) and a
    Server (Paillier key holder) train one model without sharing rows, labels or
    plain gradients. Start with `privfl vfl run-local` for the demo, or
    `privfl init vfl --out kit` to run each party as its own command.

    Horizontal mode: clients with the same columns about different people train
    with local DP (`privfl hfl run-local`, `privfl init hfl`).

    Naming: privfl's Host holds the labels, as in the source paper; FATE calls
    that party the Guest (and our Guest its Host).
    """
