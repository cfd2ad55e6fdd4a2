"""Deviating horizontal parties as real processes: the real CLI with one step replaced.

Tests only:
``python tests/attacks/hfl_deviants.py poison VALUE hfl client --job … --party clients-1``
runs a client host whose first logical client sends VALUE in every coordinate;
``python tests/attacks/hfl_deviants.py tag hfl aggregator --job …`` runs an aggregator
that gives every client host but the first its own round token (to link reports to
hosts after the shuffle) and, when caught, tells no one;
``python tests/attacks/hfl_deviants.py overspend hfl aggregator --job …`` runs an
aggregator that never stops for the job's ``epsilon_budget``;
``python tests/attacks/hfl_deviants.py unguarded hfl client --job … --party clients-1``
runs a client host that serves whatever round it is asked (as before its own check).
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable
from typing import Any

import torch

import privfl.parties.horizontal.aggregator as aggregator
from privfl.cli import main
from privfl.learning import fedavg as engine
from privfl.parties.horizontal.guard import RoundGuard
from privfl.parties.horizontal.ledger import PrivacyLedger
from privfl.protocol.hfl_messages import TOKEN_BYTES, RoundStart


def reversed_report(
    attackers: int, stretch: float = 1.0, box: bool = False
) -> Callable[..., torch.Tensor]:
    """A ``randomize_weights`` whose clients below ``attackers`` send their update reversed
    and stretched to ``stretch·B`` (``w_g − stretch·B·Δ/‖Δ‖``), or with ``box``
    ``weight_bound`` in every coordinate; the others are honest."""
    honest = engine.randomize_weights  # every client's last step, batched or not

    def report(
        setup: engine.Setup, client: int, weights: torch.Tensor, sent: torch.Tensor, *args: Any
    ) -> torch.Tensor:
        real = honest(setup, client, weights, sent, *args)
        if client >= attackers:
            return real
        if box:
            return torch.full_like(real, setup.config.weight_bound)
        update = weights - sent
        return sent - update * (stretch * setup.calib.update_clip * (1 - 1e-4) / update.norm())

    return report


def poison(value: float) -> None:
    """The lowest-numbered client this process asks about sends ``value`` everywhere."""
    honest = engine.randomize_weights  # every client's last step, batched or not
    first: list[int] = []

    def report(setup: engine.Setup, client: int, *args: Any) -> torch.Tensor:
        real = honest(setup, client, *args)
        first[:] = first or [client]
        return torch.full_like(real, value) if client == first[0] else real

    engine.randomize_weights = report  # type: ignore[assignment]


def tag() -> None:
    """Each round's second and later round_start get a token of their own.

    When caught, this aggregator tells nobody (its abort goes to no peer): the
    client hosts must hear it from the Shuffler.
    """
    made: dict[int, int] = {}
    quiet = aggregator.run_role

    def run_role(name: str, channel: Any, peers: Any, *args: Any, **kwargs: Any) -> Any:
        return quiet(name, channel, lambda: [], *args, **kwargs)

    aggregator.run_role = run_role  # type: ignore[assignment]

    def start(round_: int, *fields: Any) -> RoundStart:
        made[round_] = made.get(round_, 0) + 1
        token = fields[3] if made[round_] == 1 else secrets.token_bytes(TOKEN_BYTES)
        return RoundStart(round_, *fields[:3], token, *fields[4:])

    aggregator.RoundStart = start  # type: ignore[assignment, misc]


def overspend() -> None:
    """The aggregator's own budget check is gone: it opens every round of the job."""
    PrivacyLedger.check_next = lambda self, selected: None  # type: ignore[method-assign]


def unguarded() -> None:
    """The client host serves every round it is asked, as the aggregator says."""

    def admit(self: RoundGuard, start: RoundStart, mine: set[int]) -> list[int]:
        return [int(c) for c in start.selected if int(c) in mine]

    RoundGuard.admit = admit  # type: ignore[method-assign]


if __name__ == "__main__":
    if sys.argv[1] == "poison":
        poison(float(sys.argv[2]))
        rest = sys.argv[3:]
    else:
        {"tag": tag, "overspend": overspend, "unguarded": unguarded}[sys.argv[1]]()
        rest = sys.argv[2:]
    sys.argv = [sys.argv[0], *rest]
    main()
