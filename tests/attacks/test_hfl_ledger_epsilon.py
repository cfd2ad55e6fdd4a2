"""An auditor recounts each client's releases and checks the ledger's ε against them.

The issue's case: 200 rounds, K-of-N fraction 0.1, ε = 1 per report. The selection
comes from the public job seed, so the auditor (like the aggregator) knows exactly
who was asked; without a Shuffler it also sees who reported. The ledger's total must
be at least the composition over the client with the most releases, and a budget
must stop the run before that client passes it.
"""

from __future__ import annotations

from collections import Counter

from privfl.config.horizontal import HflConfig
from privfl.learning import fedavg as engine
from privfl.mechanisms.accountants import advanced_composition, subsampling_amplification
from privfl.parties.horizontal.ledger import compose_pure
from privfl.runs.simulate import run_experiment

CASE = HflConfig(
    mechanism="laplace-topk", epsilon=1.0, rounds=200, fraction=0.1, clients=20,
    local_epochs=1, topk_fraction=0.005,
)  # fmt: skip


def _releases(config: HflConfig, rounds: int) -> Counter[int]:
    """The auditor's own count: every client the public sample asked (all of them report)."""
    return Counter(c for r in range(1, rounds + 1) for c in engine.sample_clients(config, r))


def test_the_old_amplified_claim_was_below_the_worst_clients_composition() -> None:
    worst = max(_releases(CASE, 200).values())
    amplified = subsampling_amplification(1.0, 0.1)  # the replaced ledger's formula
    old = min(200 * amplified, advanced_composition(amplified, 0.0, 200, 1e-5)[0])
    assert old < compose_pure(1.0, worst, 1e-5)  # the check below would catch it


def test_ledger_epsilon_covers_the_client_with_the_most_releases() -> None:
    summary = run_experiment(CASE)
    worst = max(_releases(CASE, 200).values())
    assert summary["max_participations"] == worst
    assert summary["epsilon_total"] >= compose_pure(1.0, worst, 1e-5) >= worst * 0.999
    assert "no amplification" in summary["epsilon_assumptions"]["epsilon_total"]


def test_the_budget_stops_before_the_worst_client_passes_it() -> None:
    from dataclasses import replace

    summary = run_experiment(replace(CASE, epsilon_budget=20.0))
    ran = summary["rounds"]
    assert ran < 200 and summary["stop_reason"].startswith("privacy budget")
    assert max(_releases(CASE, ran).values()) <= 20
    assert max(_releases(CASE, ran + 1).values()) > 20  # it stopped no earlier than needed
