"""Run a horizontal experiment in one process (the library entry point; no sockets).

Same steps as the networked roles (:mod:`privfl.hfl.engine`); used by
`privfl hfl compare`, by tests and by anyone scripting experiments.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from privfl.errors import PrivacyBudgetExceeded
from privfl.hfl import engine
from privfl.hfl.config import HflConfig
from privfl.hfl.ledger import PrivacyLedger
from privfl.hfl.models import get_flat
from privfl.hfl.outputs import Recorder

RoundHook = Callable[[dict[str, Any]], None]


def make_ledger(setup: engine.Setup) -> PrivacyLedger:
    """A ledger with the run's noise multiplier (σ over the L2 sensitivity 2C/m)."""
    cfg = setup.config
    multiplier = 0.0
    if cfg.mechanism == "gaussian":
        multiplier = setup.calib.sigma / (2 * cfg.clip_norm / min(len(s) for s in setup.shards))
    return PrivacyLedger(
        cfg, setup.dims, setup.calib.k, noise_multiplier=multiplier,
        local_rows=min(len(s) for s in setup.shards),
    )  # fmt: skip


def round_clients(config: HflConfig, round_: int) -> list[int]:
    """Who reports in a round: the aggregator's sample, then each client's own coin (β)."""
    return [c for c in engine.sample_clients(config, round_) if engine.joins(config, c, round_)]


def close_round(
    setup: engine.Setup,
    weights: torch.Tensor,
    reports: list[torch.Tensor],
    round_: int,
    participants: list[int],
    ledger: PrivacyLedger,
    recorder: Recorder,
    on_round: RoundHook | None,
    **extra: Any,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Aggregate a round's reports, evaluate, book it in the ledger and record it.

    The one end-of-round step of the in-process simulator and the networked aggregator
    (``extra`` adds the aggregator's transport figures to the round's record). Returns
    the new global weights and the round's record.
    """
    new = engine.aggregate(setup, weights, reports, round_)
    accuracy, loss = engine.evaluate(setup, new)
    entry = ledger.record(participants, len(reports))
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


def run_experiment(
    config: HflConfig, out: Path | None = None, on_round: RoundHook | None = None
) -> dict[str, Any]:
    """Train for ``config.rounds`` rounds (or until the ε budget); return the summary dict."""
    torch.set_num_threads(1)  # parallelism comes from processes; threads only contend
    setup = engine.make_setup(config)
    ledger = make_ledger(setup)
    recorder = Recorder(config, out)
    weights = get_flat(setup.model)
    last_update: torch.Tensor | None = None
    stop_reason = "rounds"
    for round_ in range(1, config.rounds + 1):
        try:
            ledger.check_next()
        except PrivacyBudgetExceeded as exc:
            stop_reason = f"privacy budget: {exc}"
            break
        clients = round_clients(config, round_)
        indices = engine.report_indices(setup, last_update, round_)
        reports = [engine.client_report(setup, c, weights, indices, round_) for c in clients]
        new, _ = close_round(setup, weights, reports, round_, clients, ledger, recorder, on_round)
        last_update, weights = new - weights, new
    return recorder.summary(
        ledger, stop_reason, {"device": str(setup.device), "transport": "in-process"}
    )
