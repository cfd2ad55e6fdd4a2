"""Run a horizontal experiment in one process (the library entry point; no sockets).

Same steps as the networked roles (:mod:`privfl.learning.fedavg`); used by
`privfl hfl compare`, by tests and by anyone scripting experiments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from privfl.config.horizontal import HflConfig
from privfl.errors import PrivacyBudgetExceeded
from privfl.learning import fedavg as engine
from privfl.learning.models import get_flat
from privfl.learning.secure_round import (
    RoundInput,
    bounded_round,
    distributed_extra,
    secure_round,
)
from privfl.learning.threads import one_compute_thread
from privfl.mechanisms.noise import private_source
from privfl.mechanisms.skellam import SkellamAccountant
from privfl.parties.horizontal.outputs import Recorder, chance_level
from privfl.parties.horizontal.rounds import RoundHook, close_round, make_ledger


def run_experiment(
    config: HflConfig, out: Path | None = None, on_round: RoundHook | None = None
) -> dict[str, Any]:
    """Train for ``config.rounds`` rounds (or until the ε budget); return the summary dict."""
    one_compute_thread()  # parallelism comes from processes; threads only contend
    setup = engine.make_setup(config)
    ledger = make_ledger(setup)
    recorder = Recorder(config, out, chance_level(setup.data.y_test))
    weights = get_flat(setup.model)
    last_update: torch.Tensor | None = None
    stop_reason = "rounds"
    # one CSPRNG for the simulated clients and server noise; vectorised samplers for speed
    source = private_source(exact=False)
    accountant = SkellamAccountant(setup.dims, config.delta)
    for round_ in range(1, config.rounds + 1):
        asked = engine.sample_clients(config, round_)
        try:
            ledger.check_next(asked)
        except PrivacyBudgetExceeded as exc:
            stop_reason = f"privacy budget: {exc}"
            break
        clients = [c for c in asked if engine.joins(config, c, round_, source)]
        indices = engine.report_indices(setup, last_update, round_)
        reports = engine.client_reports(setup, clients, weights, indices, round_, source)
        if config.secure_aggregation:  # the aggregator sees only (group) sums
            secure = bounded_round if config.secagg_bounds else secure_round
            parts = RoundInput(setup, clients, reports, weights, round_, source)
            reports = secure(parts, accountant)
        # with a Shuffler the aggregator cannot tell who reported: book every asked client
        reported = None if config.shuffler else clients
        new, _ = close_round(
            setup, weights, indices, reports, round_, asked, reported, ledger, recorder,
            on_round, source,
        )  # fmt: skip
        last_update, weights = new - weights, new
    extra: dict[str, Any] = {"device": str(setup.device), "transport": "in-process"}
    if config.secure_aggregation:
        extra |= distributed_extra(accountant, config.secagg_bounds)
    return recorder.summary(ledger, stop_reason, extra)
