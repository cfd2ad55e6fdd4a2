"""What every kind's party function takes (models/registry.py), and the GLM kinds' one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privfl.crypto.engine import POOL, Engine
from privfl.data.views import PartyData
from privfl.parties.session import PartyContext


@dataclass(frozen=True, slots=True)
class RoleOptions:
    """A party's run-time settings (parties/vertical/runner.py: ``run_party``)."""

    workers: int = 1  # processes computing obfuscators (0 = one per core)
    on_epoch: Callable[[dict[str, Any]], None] | None = None  # the Host's epoch hook
    label_rng: np.random.Generator | None = None  # seeded label noise: not private
    redraw_labels: bool = False  # the Host draws the label noise anew (and books the ε)
    engine: Engine = POOL  # where the obfuscators are computed (site-local: pool or Ray)
    forget_reveals: bool = False  # a hidden-mode SecureBoost guest's ledger started anew


def run_glm_role(ctx: PartyContext, data: PartyData | None, options: RoleOptions) -> dict[str, Any]:
    """This party's role of a GLM session (docs/protocol.md §6.2, §6.8)."""
    from privfl.parties.vertical.guest import run_guest
    from privfl.parties.vertical.host import run_host
    from privfl.parties.vertical.server import run_server

    role = ctx.job.party(ctx.name).role
    if role == "server":
        return run_server(ctx, workers=options.workers, engine=options.engine)
    assert data is not None
    if role == "host":
        return run_host(
            ctx,
            data,
            options.on_epoch,
            workers=options.workers,
            label_rng=options.label_rng,
            redraw_labels=options.redraw_labels,
            engine=options.engine,
        )
    return run_guest(ctx, data, options.workers, options.engine)
