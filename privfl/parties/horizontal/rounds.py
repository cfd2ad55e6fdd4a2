"""The end of a horizontal round, shared by the networked aggregator and the simulator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from privfl.learning import fedavg as engine
from privfl.mechanisms.noise import NoiseSource
from privfl.mechanisms.ranges import report_range
from privfl.parties.horizontal.integrity import check_model, check_round, screen
from privfl.parties.horizontal.ledger import PrivacyLedger
from privfl.parties.horizontal.outputs import Recorder

RoundHook = Callable[[dict[str, Any]], None]


def make_ledger(setup: engine.Setup) -> PrivacyLedger:
    """A ledger with the run's zCDP ρ per Gaussian report."""
    return PrivacyLedger(
        setup.config, setup.dims, setup.calib.k, rho=setup.calib.rho,
        local_rows=setup.shards.smallest,
    )  # fmt: skip


def close_round(
    setup: engine.Setup,
    weights: torch.Tensor,
    indices: torch.Tensor,
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
    """Screen a round's reports, aggregate, evaluate, book it in the ledger and record it.

    The one end-of-round step of the in-process simulator and the networked aggregator
    (``extra`` adds the aggregator's transport figures to the round's record).
    ``weights`` and ``indices`` are what the clients were sent: reports outside the
    range they imply are refused and counted (``refused_reports``). Too few valid
    reports or a non-finite new model stop the run (ProtocolError). ``reported`` is
    None when the aggregator cannot know who reported (Shuffler): the ledger then
    books a release for every asked client. Returns the new weights and the record.
    """
    cfg = setup.config
    allowed = report_range(cfg, setup.calib, weights, setup.slices, indices)
    reports, refused = screen(reports, allowed, round_)
    check_round(round_, len(reports), refused, cfg.min_valid_reports)
    # the trim counts the asked clients: a deviating one always reports, honest ones may
    # not, and under secure aggregation each report is a group's mean (robust.py)
    new = engine.aggregate(setup, weights, reports, round_, source, len(asked))
    check_model(round_, new)
    accuracy, loss = engine.evaluate(setup, new)
    # the crowd of the central ε: valid reports only (a refused one hides nobody)
    entry = ledger.record(asked, reported, len(reports))
    record = {
        "round": round_,
        "accuracy": accuracy,
        "loss": loss,
        "reports": len(reports),
        "refused_reports": refused,
        **extra,
        **entry,
    }
    recorder.round(record, new, ledger)
    if on_round:
        on_round(record)
    return new, record
