"""Out-of-bound inputs under two-server secure aggregation are refused, not averaged.

The attacker is a client that runs the protocol with a stretched input: its update
reversed and stretched to ``g·B``, beyond its own bound ``B`` (the input that moved a
group of 4 to its bound under SecAgg+ groups, 0.931 → 0.651 in docs/security.md). Its
shares are well formed, but no proof of ``‖x‖ small`` verifies for it, so both servers
leave it out of the sum; no other client's input is opened to find it (the servers see
shares and four field elements per client).

Leaky arm: the same run with the servers' check replaced by "accept everything" (the
plain two-server sum): one client at 20·B steers the model to chance.

``seeded_noise`` draws the rounding from the job (same code path), so the margins
against the clean run are exact; the check's coins come from the OS CSPRNG, and an
honest client fails it with probability below 1e-17 per round.
"""

from __future__ import annotations

import logging

import pytest
from hfl_deviants import reversed_report

from privfl.config.horizontal import HflConfig
from privfl.learning import bounded
from privfl.learning import fedavg as engine
from privfl.runs.simulate import run_experiment

BOUNDED = HflConfig(
    clients=20, rounds=3, local_epochs=2, seed=3, secure_aggregation=True,
    secagg_bounds=True, aggregation="mean", seeded_noise=True,
)  # fmt: skip
TOLERANCE = 0.02  # the bar


@pytest.fixture(scope="module")
def clean_bounded() -> float:
    accuracy: float = run_experiment(BOUNDED)["accuracy"]
    assert accuracy > 0.85
    return accuracy


def test_two_clients_at_four_times_their_bound_are_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, clean_bounded: float
) -> None:
    monkeypatch.setattr(engine, "randomize_weights", reversed_report(2, 4.0))
    with caplog.at_level(logging.WARNING):
        summary = run_experiment(BOUNDED)
    assert caplog.text.count("clients [0, 1] failed the bound check") == 3  # every round
    assert abs(summary["accuracy"] - clean_bounded) <= TOLERANCE


def test_leaky_arm_without_the_check_one_client_steers_the_sum(
    monkeypatch: pytest.MonkeyPatch, clean_bounded: float
) -> None:
    monkeypatch.setattr(engine, "randomize_weights", reversed_report(1, 20.0))
    monkeypatch.setattr(bounded, "accept", lambda first, second: True)
    summary = run_experiment(BOUNDED)
    assert summary["accuracy"] < clean_bounded - 0.5
