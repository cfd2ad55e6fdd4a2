"""Dispatch a SecureBoost party, and the Server's part: the handshake, then wait for the Host."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from privfl.crypto.engine import POOL, Engine
from privfl.data.views import PartyData
from privfl.parties.session import PartyContext
from privfl.parties.vertical.handshake import check_hello, check_rows
from privfl.parties.vertical.roles import RoleOptions
from privfl.parties.vertical.secureboost.common import wait_seconds
from privfl.protocol.messages import Finish, Hello

log = logging.getLogger("privfl.server")


def run_boost_party(
    ctx: PartyContext,
    data: PartyData | None,
    workers: int = 1,
    label_rng: np.random.Generator | None = None,
    redraw_labels: bool = False,
    engine: Engine = POOL,
    forget_reveals: bool = False,
) -> dict[str, Any]:
    """Run this party's SecureBoost role to the end of the session.

    ``label_rng`` (Host, tests and experiments only): a seeded generator for the label
    flips, which makes the run reproducible and not private. ``redraw_labels`` (Host):
    draw the flips anew instead of reusing the job's saved draw. ``forget_reveals``
    (guest, hidden): start the job's ledger of decryptions anew (ledger.py).
    """
    role = ctx.job.party(ctx.name).role
    if role == "server":
        return run_boost_server(ctx)
    assert data is not None
    if role == "host":
        from privfl.parties.vertical.secureboost.host import run_boost_host

        return run_boost_host(ctx, data, workers, label_rng, redraw_labels, engine)
    from privfl.parties.vertical.secureboost.guest import run_boost_guest

    return run_boost_guest(ctx, data, workers, engine, forget_reveals)


def run_boost_role(
    ctx: PartyContext, data: PartyData | None, options: RoleOptions
) -> dict[str, Any]:
    """The registry's entry point (models/registry.py): :func:`run_boost_party`."""
    return run_boost_party(
        ctx,
        data,
        options.workers,
        options.label_rng,
        options.redraw_labels,
        options.engine,
        options.forget_reveals,
    )


def run_boost_server(ctx: PartyContext) -> dict[str, Any]:
    """Check every Hello (same job, rows lined up), then wait for the Host's finish or an abort.

    The Host holds the boosting key (as in FATE): the Server decrypts nothing here.
    """
    job = ctx.job
    hellos = ctx.channel.gather(Hello, ctx.peers)
    for sender, hello in hellos.items():
        check_hello(ctx, sender, hello)
    for guest in job.guests:
        check_rows(guest, hellos[guest].rows_digest, hellos[job.host].rows_digest, "the host's")
    log.info("every party checked in; the host holds the boosting key")
    body = ctx.channel.expect_body(Finish, {job.host}, wait_seconds(job))
    log.info("host finished the session: %d trees (%s)", body.epochs, body.reason)
    return {"trees": body.epochs}
