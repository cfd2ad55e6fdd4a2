"""Under secure aggregation a client host refuses a repeated round, as in a plain round.

Each client host keeps the job's rounds and ε budget over its own clients
(``guard.py``) and refuses a ``round_start`` that repeats or goes back to a round, or
passes the job's rounds, before anything is trained or released. Under SecAgg+ the host
used to skip that check: an aggregator could send round 1 again and again, and every
time the host's clients trained the same update (the batch order is the job's) and
masked it with a fresh Skellam share, so averaging k group sums divides the noise's
variance by k, past every ε the job books. Now the second ``round_start`` of round 1 is
refused in one line naming the aggregator. Leaky arm: the host without its check
advertises fresh keys for round 1 again, the first stage of a second release.

The real host step (``serve_start``) over the in-memory transport, in a thread; the test
plays the aggregator: it takes the host's advert and then cuts the round short.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from secagg_harness import HOST_WAIT, Net, job_of

from privfl.errors import PrivflError, ProtocolError
from privfl.learning import fedavg as engine
from privfl.learning.models import get_flat
from privfl.mechanisms.noise import private_source
from privfl.parties.horizontal.client import Serving, serve_start
from privfl.parties.horizontal.guard import RoundGuard
from privfl.protocol.channel import Channel
from privfl.protocol.hfl_messages import RoundEnd, RoundStart
from privfl.protocol.messages import Kind


def _serve(net: Net, host: Serving, guard: RoundGuard, start: RoundStart) -> list[Any]:
    """One ``serve_start`` in a thread; the test takes its advert (if any) and ends the
    round. Returns what the aggregator got, or the host's refusal."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            serve_start(host, guard, start)
        except ProtocolError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while thread.is_alive():  # an advert, or the host's refusal ends its thread
        try:
            env = net.aggregator.expect({Kind.SECAGG_ADVERTISE}, {"clients-1"}, 0.2)
        except PrivflError:
            continue
        outcome.append(env.body)
        net.aggregator.send("clients-1", RoundEnd(start.round, 0.0, False, "cut"), start.round)
        break
    thread.join(timeout=HOST_WAIT)
    assert not thread.is_alive()
    return outcome


@pytest.mark.parametrize("guarded", [True, False])
def test_a_repeated_secure_round_is_refused_before_anything_is_released(
    monkeypatch: pytest.MonkeyPatch, guarded: bool
) -> None:
    # Prepare: a host of clients 0 and 1 in a secure job; round 1's round_start.
    job = job_of([2, 2])
    net = Net(job)
    setup = engine.make_setup(job.config)
    channel = Channel(net.hub.transport("clients-1"), session=job.session, timeout=HOST_WAIT)
    keys = net.keys["clients-1"]
    host = Serving(job, setup, channel, {0, 1}, "aggregator", None, private_source(), keys)
    guard = RoundGuard.of(setup, "aggregator")
    if not guarded:  # the host before its check: serves every round it is sent
        monkeypatch.setattr(RoundGuard, "admit", lambda self, start, mine: sorted(mine))
    weights = get_flat(setup.model).numpy().astype(np.float32)
    start = RoundStart(
        1, weights, np.arange(4, dtype=np.int64), np.zeros(0, np.int64), bytes(32), b""
    )

    # Act: round 1, then round 1 again.
    first = _serve(net, host, guard, start)
    again = _serve(net, host, guard, start)

    # Assert: the first is served; the replay is refused unless the check is off.
    assert [type(x).__name__ for x in first] == ["SecAdvertise"]
    if guarded:
        assert len(again) == 1 and isinstance(again[0], ProtocolError)
        assert "opened round 1 after round 1" in str(again[0])
        assert "nothing released for it" in str(again[0])
    else:
        assert [type(x).__name__ for x in again] == ["SecAdvertise"]
        assert not np.array_equal(first[0].c_keys, again[0].c_keys)  # a fresh release
