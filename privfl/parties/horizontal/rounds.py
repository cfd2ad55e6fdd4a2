"""The end of a horizontal round, shared by the networked aggregator and the simulator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from privfl.learning import fedavg as engine
from privfl.mechanisms.noise import NoiseSource
from privfl.parties.horizontal.ledger import PrivacyLedger
from privfl.parties.horizontal.outputs import Recorder

RoundHook = Callable[[dict[str, Any]], None]


def make_ledger(setup: engine.Setup) -> PrivacyLedger:
    """A ledger with the run's zCDP ρ per Gaussian report."""
    return PrivacyLedger(
        setup.config, setup.dims, setup.calib.k, rho=setup.calib.rho,
        local_rows=min(len(s) for s in setup.shards),
    )  # fmt: skip


def close_round(
    setup: engine.Setup,
    weights: torch.Tensor,
    reports: list[torch.Tensor],
    round_: int,
    asked: list[int],
    reported: list[int] | None,
    ledger: PrivacyLedger,
    recorder: Recorder,
    on_round: RoundHook | None,
    source: NoiseSource,
    **extra: Any,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Aggregate a round's reports, evaluate, book it in the ledger and record it.

    The one end-of-round step of the in-process simulator and the networked aggregator
    (``extra`` adds the aggregator's transport figures to the round's record).
    ``reported`` is None when the aggregator cannot know who reported (Shuffler): the
    ledger then books a release for every asked client. Returns the new global
    weights and the round's record.
    """
    new = engine.aggregate(setup, weights, reports, round_, source)
    accuracy, loss = engine.evaluate(setup, new)
    entry = ledger.record(asked, reported, len(reports))
    record = {
        "round": round_,
        "accuracy": accuracy,
        "loss": loss,
        "reports": len(reports),
        **extra,
        **entry,
    }
    recorder.round(record, new, ledger)
    if on_round:
        on_round(record)
    return new, record
