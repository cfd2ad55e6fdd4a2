"""A client host's own hold on the rounds it serves (parties/horizontal/guard.py).

The process test (tests/attacks/test_hfl_client_budget.py) runs the budget against a real
aggregator; these drive the guard with the ``round_start`` messages a deviating
aggregator would send: a round past the job's, a repeated one, one going back.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privfl.config.horizontal import HflConfig
from privfl.errors import ProtocolError
from privfl.parties.horizontal.guard import RoundGuard
from privfl.parties.horizontal.ledger import PrivacyLedger
from privfl.protocol.hfl_messages import RoundStart

MINE = {0, 1}


def guard(budget: float = math.inf) -> RoundGuard:
    config = HflConfig(mechanism="laplace-topk", epsilon=1.0, rounds=3, epsilon_budget=budget)
    return RoundGuard("aggregator", config.rounds, PrivacyLedger(config, dims=10, k=2))


def start(round_: int, selected: tuple[int, ...] = (0, 1, 7)) -> RoundStart:
    ids = np.array(selected, np.int64)
    return RoundStart(round_, np.zeros(10, np.float32), ids, np.zeros(0, np.int64), b"", b"")


def serve(held: RoundGuard, round_: int) -> list[int]:
    asked = held.admit(start(round_), MINE)
    held.book(asked, asked)
    return asked


def test_the_job_s_rounds_in_order_are_served_for_our_clients_only() -> None:
    held = guard()
    assert [serve(held, r) for r in (1, 3)] == [[0, 1], [0, 1]]  # a round may be skipped


@pytest.mark.parametrize("rounds", [(1, 1), (2, 1), (1, 4)], ids=["repeat", "back", "past"])
def test_a_round_out_of_the_job_s_order_is_refused(rounds: tuple[int, int]) -> None:
    held = guard()
    serve(held, rounds[0])
    with pytest.raises(ProtocolError, match=f"opened round {rounds[1]} after round {rounds[0]}"):
        held.admit(start(rounds[1]), MINE)


def test_a_round_past_the_budget_is_refused_before_anything_is_released() -> None:
    held = guard(budget=2.5)
    serve(held, 1)
    serve(held, 2)
    with pytest.raises(ProtocolError, match="past the job's epsilon_budget"):
        held.admit(start(3), MINE)
    assert held.ledger.released == {0: 2, 1: 2}
    assert held.admit(start(3, (7,)), MINE) == []  # a round that asks none of ours costs none
