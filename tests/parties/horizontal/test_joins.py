"""The aggregator's join window over the in-memory transport: who is in, who is left out."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from privfl.config.horizontal import HflConfig, HflJob, HflParty
from privfl.errors import PeerUnavailable
from privfl.parties.horizontal.aggregator import wait_for_joins
from privfl.protocol.channel import Channel
from privfl.protocol.hfl_messages import JoinRequest
from privfl.protocol.memory import InMemoryHub

WINDOW = 0.3  # seconds: every present host has joined long before


def job_of(hosts: int) -> HflJob:
    parties = {"aggregator": HflParty("aggregator", "aggregator", "tcp://127.0.0.1:6000")}
    for i in range(hosts):
        name = f"clients-{i + 1}"
        parties[name] = HflParty(name, "clients", "", 2 * i, 2)
    config = HflConfig(clients=2 * hosts, epsilon_budget=math.inf, timeout_seconds=WINDOW)
    return HflJob(session="s-1", config=config, parties=parties)


def join(hub: InMemoryHub, job: HflJob, host: str, fingerprint: str = "") -> None:
    spec = job.party(host)
    clients = np.arange(spec.first_client, spec.first_client + spec.num_clients)
    channel = Channel(hub.transport(host), session=job.session, timeout=WINDOW)
    body = JoinRequest(0, "clients", fingerprint or job.fingerprint(), clients)
    channel.send("aggregator", body, 0)


def test_an_absent_host_is_left_out_when_the_window_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Prepare: three hosts in the job; clients-3 never starts.
    job = job_of(3)
    hub = InMemoryHub()
    aggregator = Channel(hub.transport("aggregator"), session=job.session, timeout=WINDOW)
    join(hub, job, "clients-1")
    join(hub, job, "clients-2")

    # Act
    with caplog.at_level(logging.WARNING):
        roster = wait_for_joins(job, aggregator, None)

    # Assert: the two that joined take part with their own clients; the absent one is named.
    assert roster.hosts == {"clients-1": {0, 1}, "clients-2": {2, 3}}
    assert "starting without clients-3 (did not join in time)" in caplog.text


def test_no_host_in_the_window_is_a_one_line_error_naming_them() -> None:
    # Prepare: one host joins with another job's fingerprint.
    job = job_of(2)
    hub = InMemoryHub()
    aggregator = Channel(hub.transport("aggregator"), session=job.session, timeout=WINDOW)
    hub.transport("clients-2")
    join(hub, job, "clients-1", fingerprint="0" * 64)

    # Act / Assert
    with pytest.raises(PeerUnavailable, match=r"no client host joined .*missing: clients-2"):
        wait_for_joins(job, aggregator, None)
