"""One client poisons the global model with an enormous, NaN or infinite report.

Before: a finite 1e30 report was averaged in (accuracy 0.651 → 0.100), and since
honest clients trained from the ruined model sent non-finite reports that were
dropped, only the attacker's report was averaged from then on. Now the aggregator's
round step (shared by the simulator and the networked aggregator) refuses every
report outside the mechanism's output range and counts it (``refused_reports``,
WARNING); a round left with fewer than ``min_valid_reports`` valid reports, or a
non-finite global model, stops the run with one line. The leaky arm takes the
range check out and averages by the plain mean (the default trimmed mean would
drop the one extreme value by itself) and shows the collapse.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from privfl.config.horizontal import HflConfig
from privfl.errors import ProtocolError
from privfl.learning import fedavg as engine
from privfl.parties.horizontal import rounds
from privfl.protocol.channel import Channel
from privfl.protocol.hfl_messages import Update
from privfl.protocol.memory import InMemoryHub
from privfl.runs.simulate import run_experiment

# One worker makes the clean run for every test here (--dist loadgroup, tests/conftest.py).
pytestmark = pytest.mark.xdist_group("hfl_poisoning")

CLEAN = HflConfig(clients=20, rounds=3, local_epochs=2, seed=3)
ATTACKER = 0
TOLERANCE = 0.05  # absolute accuracy: 19 honest reports instead of 20 (no noise: mechanism none)


def _poison(monkeypatch: pytest.MonkeyPatch, value: float) -> None:
    """Client 0 sends ``value`` in every coordinate; the others run the real client code."""
    honest = engine.randomize_weights  # every client's last step, batched or not

    def report(setup: engine.Setup, client: int, *args: Any) -> torch.Tensor:
        real = honest(setup, client, *args)
        return torch.full_like(real, value) if client == ATTACKER else real

    monkeypatch.setattr(engine, "randomize_weights", report)


def _leaky(monkeypatch: pytest.MonkeyPatch) -> None:
    """The range check taken out: every report is averaged, as before."""
    monkeypatch.setattr(rounds, "screen", lambda reports, allowed, round_: (reports, 0))


@pytest.fixture(scope="module")
def clean_accuracy() -> float:
    accuracy: float = run_experiment(CLEAN)["accuracy"]
    assert accuracy > 0.6  # the clean run learns
    return accuracy


@pytest.mark.parametrize("value", [1e30, float("nan"), float("inf")])
def test_a_poisoned_report_is_refused_counted_and_the_run_keeps_its_accuracy(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    clean_accuracy: float,
    value: float,
) -> None:
    _poison(monkeypatch, value)
    with caplog.at_level(logging.WARNING):
        summary = run_experiment(CLEAN)
    assert summary["refused_history"] == [1, 1, 1]
    assert summary["reports_history"] == [19, 19, 19]  # every honest report is averaged
    assert abs(summary["accuracy"] - clean_accuracy) <= TOLERANCE
    assert "refused 1 report(s) outside the mechanism's output range" in caplog.text


def test_leaky_without_the_range_check_the_model_collapses(
    monkeypatch: pytest.MonkeyPatch, clean_accuracy: float
) -> None:
    _poison(monkeypatch, 1e30)
    _leaky(monkeypatch)
    records: list[dict[str, Any]] = []
    # the ruined model makes honest clients' reports non-finite: the run now stops there
    with pytest.raises(ProtocolError, match="global model holds NaN or infinity"):
        run_experiment(replace(CLEAN, aggregation="mean"), on_round=records.append)
    assert records[0]["accuracy"] <= 0.2 < clean_accuracy - 0.4


def test_too_few_valid_reports_stop_the_run_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _poison(monkeypatch, float("nan"))
    with pytest.raises(ProtocolError) as caught:
        run_experiment(HflConfig(clients=20, rounds=2, local_epochs=1, min_valid_reports=20))
    message = str(caught.value)
    assert "\n" not in message
    assert "only 19 valid report(s) (1 refused as out of range)" in message
    assert "min_valid_reports = 20" in message and "lower min_valid_reports" in message


def test_a_non_finite_update_reaches_the_range_check_instead_of_vanishing() -> None:
    # Without a Shuffler: decoding lets NaN/±∞ through so the aggregator counts the refusal.
    hub = InMemoryHub(record=False)
    aggregator = Channel(hub.transport("aggregator"), session="s", timeout=30.0)
    host = Channel(hub.transport("clients-1"), session="s", timeout=30.0)
    poisoned = np.array([np.nan, np.inf, 1e30], np.float32)
    host.send("aggregator", Update(1, 0, poisoned), 1)
    got = aggregator.expect_body(Update, {"clients-1"})
    assert np.array_equal(got.report, poisoned, equal_nan=True)
