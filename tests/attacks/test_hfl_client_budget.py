"""Attack: a deviating aggregator asks the clients for more rounds than the ε budget allows.

The site ledger books a client host's ``hfl.epsilon_budget`` as the bound of its run,
and the aggregator stops before a round would pass it. An aggregator that does not stop
(here: its budget check removed) used to get every client's report again each round:
the client host served whatever ``round_start`` came. Now each client host keeps the
job's ledger over its own clients (``parties/horizontal/guard.py``) and refuses the round,
in one line naming the aggregator, before it trains or releases anything for it.

Job: Laplace top-k at ε = 1 per report, ``epsilon_budget`` 1.5, 2 rounds: one round
fits. Two processes per arm (the aggregator and one client host), real ZeroMQ + CURVE.
Leaky arm: the client host without its check releases both rounds (ε 2 > 1.5).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_hfl_integrity_processes import WAIT, last_line, make_job, start

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("guarded", [True, False])
def test_a_client_host_refuses_rounds_past_the_budget(tmp_path: Path, guarded: bool) -> None:
    # Prepare
    job = make_job(
        tmp_path, shuffler=False, hosts=1, mechanism='"laplace-topk"', epsilon_budget="1.5"
    )

    # Act: an aggregator that never stops for the budget; the client host, checked or not.
    agg = start(job, "aggregator", "aggregator", tmp_path / "agg", "overspend")
    host = start(job, "client", "clients-1", tmp_path / "c1", *([] if guarded else ["unguarded"]))
    codes = host.wait(timeout=WAIT), agg.wait(timeout=WAIT)

    # Assert
    log = (tmp_path / "c1" / "party.log").read_text()
    assert "round 1: sent 2 report(s)" in log
    if guarded:
        assert codes == (1, 1)
        line = last_line(tmp_path / "c1")
        assert line.startswith("privfl: error: aggregator asked for a round past the job's")
        assert "round 2 would raise the worst client's total ε to 2 > budget 1.5" in line
        assert "round 2: sent" not in log
    else:
        assert codes == (0, 0)
        assert "round 2: sent 2 report(s)" in log  # ε 2 per client, over the budget 1.5
