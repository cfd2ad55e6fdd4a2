"""Poisoning under secure aggregation: the aggregator sees group sums, never a report.

Each client's update is clipped to ``‖Δ‖ ≤ B``, quantized and summed by SecAgg+ in
random groups of 4; the aggregator refuses a group mean beyond ``B`` (plus the group's
noise bound) and takes the coordinate-wise trimmed mean of the others, one group cut at
each end (trim_fraction 0.2 of 5 groups). Attacks:

- the worst in-range report (the attacker's update reversed and stretched to ``B``) from
  1 and 2 of 20 clients: the final accuracy stays within 0.02 of the clean secure run;
- an input far out of range (1,000·B): nothing inside SecAgg+ checks one client's input,
  but its group's sum breaks the group bound, so that group is refused and logged and
  the run goes on within 0.02 of the clean run;
- leaky arm: one group (``secagg_group = 0``) averaged by the mean, the plain SecAgg
  setting; an input of ``n·B`` that keeps the round's mean inside ``B`` steers the model
  to chance.

Not covered (measured, docs/security.md): an input just beyond one client's bound that
keeps its group's mean inside ``B`` (``4·B`` reversed, from 2 of 20 clients) moves two of
the five group means to the bound and took this run's accuracy from 0.93 to 0.65; groups
of 2 under the median held it at 0.91. Proof-based per-client bounds would close it.

``seeded_noise`` draws the rounding and the grouping from the job (the same code path
with a seeded generator), so every margin here is exact, not probabilistic.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from hfl_deviants import reversed_report

from privfl.config.horizontal import HflConfig
from privfl.learning import fedavg as engine
from privfl.runs.simulate import run_experiment

SECURE = HflConfig(
    clients=20, rounds=3, local_epochs=2, seed=3, secure_aggregation=True, secagg_group=4,
    aggregation="trimmed-mean", trim_fraction=0.2, seeded_noise=True,
)  # fmt: skip
TOLERANCE = 0.02  # the bar


def _reverse(monkeypatch: pytest.MonkeyPatch, attackers: int, stretch: float) -> None:
    """Clients below ``attackers`` send ``w_g − stretch·B·Δ/‖Δ‖`` instead of their update."""
    monkeypatch.setattr(engine, "randomize_weights", reversed_report(attackers, stretch))


@pytest.fixture(scope="module")
def clean_secure() -> float:
    accuracy: float = run_experiment(SECURE)["accuracy"]
    assert accuracy > 0.85
    return accuracy


@pytest.mark.parametrize("attackers", [1, 2])
def test_the_worst_in_range_input_leaves_the_accuracy_within_two_points(
    monkeypatch: pytest.MonkeyPatch, clean_secure: float, attackers: int
) -> None:
    _reverse(monkeypatch, attackers, 1.0)
    summary = run_experiment(SECURE)
    assert summary["refused_history"] == [0, 0, 0]
    assert abs(summary["accuracy"] - clean_secure) <= TOLERANCE


def test_a_far_out_of_range_input_costs_its_group_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, clean_secure: float
) -> None:
    _reverse(monkeypatch, 1, 1000.0)
    with caplog.at_level(logging.WARNING):
        summary = run_experiment(SECURE)
    assert summary["refused_history"] == [1, 1, 1]  # the attacker's group, every round
    assert summary["reports_history"] == [4, 4, 4]  # the four other groups' means
    assert "refused 1 report(s)" in caplog.text
    assert abs(summary["accuracy"] - clean_secure) <= TOLERANCE


def test_leaky_arm_one_group_and_the_mean_let_one_client_steer(
    monkeypatch: pytest.MonkeyPatch, clean_secure: float
) -> None:
    _reverse(monkeypatch, 1, 20.0)  # 20·B from one client: the round's mean stays near B
    summary = run_experiment(replace(SECURE, secagg_group=0, aggregation="mean"))
    assert summary["refused_history"] == [0, 0, 0]  # nothing looked out of range
    assert summary["accuracy"] < clean_secure - 0.5
