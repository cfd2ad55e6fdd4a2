"""A client host's reports that reach the aggregator after the round's deadline are booked.

Without a Shuffler the ledger books a release for each client whose report the
aggregator took. A host that misses the deadline (slow, or its ``round_done`` lost)
may still send its reports after it: the aggregator's transport delivers them and a
curious aggregator reads them, though the round no longer averages them. They used to
go unbooked, so the run's printed ε for those clients was one release short per such
round (the host's own guard books what it sent, so its budget held). Now every asked
client of a host that missed the deadline is booked as released — an upper bound, as
with a Shuffler. The in-memory transport, the aggregator's own collection step; the
leaky arm books only the reports taken and misses the one read after the deadline.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privfl.config.horizontal import HflConfig, HflJob, HflParty
from privfl.parties.horizontal.aggregator import collect_direct, direct_released
from privfl.protocol.channel import Channel
from privfl.protocol.hfl_messages import RoundDone, Update
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Kind

DEADLINE = 0.3  # seconds: the round's timeout
DIMS = 4


def job() -> HflJob:
    parties = {"aggregator": HflParty("aggregator", "aggregator", "tcp://127.0.0.1:6000")}
    for i in range(2):
        parties[f"clients-{i + 1}"] = HflParty(f"clients-{i + 1}", "clients", "", 2 * i, 2)
    config = HflConfig(clients=4, epsilon_budget=math.inf, round_timeout=DEADLINE)
    return HflJob(session="s-1", config=config, parties=parties)


def send_reports(channel: Channel, clients: list[int], done: bool) -> None:
    for client in clients:
        channel.send(
            "aggregator", Update(1, client, np.full(DIMS, float(client), dtype=np.float32)), 1
        )
    if done:
        channel.send("aggregator", RoundDone(1, len(clients)), 1)


@pytest.mark.parametrize("defended", [True, False])
def test_a_report_read_after_the_deadline_is_booked(defended: bool) -> None:
    # Prepare: clients-1 reports in time; clients-2 is silent until the deadline passes.
    the_job, hub = job(), InMemoryHub()
    aggregator = Channel(hub.transport("aggregator"), session="s-1", timeout=DEADLINE)
    hosts = {h: Channel(hub.transport(h), session="s-1", timeout=DEADLINE) for h in
             ("clients-1", "clients-2")}  # fmt: skip
    asked = {"clients-1": [0, 1], "clients-2": [2, 3]}
    send_reports(hosts["clients-1"], [0, 1], done=True)

    # Act: the round closes; then clients-2's report arrives and the aggregator reads it.
    got, missed = collect_direct(the_job, aggregator, asked, 1, DIMS)
    send_reports(hosts["clients-2"], [2], done=False)
    late = aggregator.expect({Kind.UPDATE}, {"clients-2"}, DEADLINE)
    booked = direct_released(got, missed, asked) if defended else sorted(got)

    # Assert: the aggregator holds client 2's report; the ledger books it only if defended.
    assert sorted(got) == [0, 1] and missed == {"clients-2"}
    assert isinstance(late.body, Update) and late.body.client == 2
    assert (2 in booked) is defended
    assert booked == ([0, 1, 2, 3] if defended else [0, 1])
