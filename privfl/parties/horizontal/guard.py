"""A client host's own hold on the rounds it serves: the job's round count and ε budget.

The aggregator stops before a round would take the worst client past
``hfl.epsilon_budget`` (``ledger.PrivacyLedger.check_next``), and the site ledger books
that budget as the bound of a client host's run. Resting the bound on the aggregator
alone let a deviating one ask for more rounds than the budget (or the job) allows and
have every client release again. So each client host keeps the same ledger over its own
clients and refuses, in one line naming the aggregator, a ``round_start`` past the job's
rounds, one that repeats or goes back to a round, or one whose releases would pass the
budget: nothing is trained or released for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from privfl.errors import PrivacyBudgetExceeded, ProtocolError
from privfl.learning import fedavg as engine
from privfl.parties.horizontal.ledger import PrivacyLedger
from privfl.parties.horizontal.rounds import make_ledger
from privfl.protocol.hfl_messages import RoundStart


@dataclass
class RoundGuard:
    """What this host has released so far, in the aggregator's round order."""

    aggregator: str
    rounds: int
    ledger: PrivacyLedger
    last: int = 0

    @classmethod
    def of(cls, setup: engine.Setup, aggregator: str) -> RoundGuard:
        return cls(aggregator, setup.config.rounds, make_ledger(setup))

    def admit(self, start: RoundStart, mine: set[int]) -> list[int]:
        """Our clients ``start`` asks, or ProtocolError if serving it would break the job."""
        if not self.last < start.round <= self.rounds:
            raise ProtocolError(
                f"{self.aggregator} opened round {start.round} after round {self.last} of a "
                f"job of {self.rounds} rounds: refused, nothing released for it"
            )
        ours = [int(c) for c in start.selected if int(c) in mine]
        try:
            self.ledger.check_next(ours)
        except PrivacyBudgetExceeded as exc:
            raise ProtocolError(
                f"{self.aggregator} asked for a round past the job's epsilon_budget ({exc}): "
                "refused, nothing released for it"
            ) from None
        self.last = start.round
        return ours

    def book(self, asked: list[int], released: list[int]) -> None:
        """Count a served round's releases (a client whose coin kept it out released none)."""
        self.ledger.record(asked, released, len(released))
