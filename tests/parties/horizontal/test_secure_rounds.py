"""Networked SecAgg+ over the in-memory transport: the unmasked sum against a plaintext sum.

Three client hosts of 2, 2 and 1 clients form one group of five (every client is every
other's neighbour, threshold 3), so a dropout's outcome does not depend on the random ring.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
from secagg_harness import DIMS, ROUND, inputs_of, job_of, network, run_round

from privfl.parties.horizontal import secure_aggregator
from privfl.parties.horizontal.secure_aggregator import SecureRound, secure_collect
from privfl.protocol.channel import body_as
from privfl.protocol.messages import Kind, Message
from privfl.protocol.secagg_messages import SecNeighbours, SecShares, SecSurvivors

SIZES = [2, 2, 1]


def plain_sum(inputs: dict[int, np.ndarray], clients: list[int]) -> np.ndarray:
    total: np.ndarray = np.sum([inputs[c] for c in clients], axis=0)
    return total


def test_the_unmasked_sum_is_the_plaintext_sum() -> None:
    job = job_of(SIZES)
    inputs = inputs_of(job)

    sums, state, net = run_round(job, inputs)

    assert not net.errors
    [(alive, total)] = sums
    assert alive == [0, 1, 2, 3, 4] and not state.missed
    np.testing.assert_array_equal(total, plain_sum(inputs, alive))


@pytest.mark.parametrize(
    ("sends", "alive"),
    [
        # after its advert: it never shares, so nobody masks with it; the four others' sum
        (1, [0, 1, 2, 3]),
        # after its view tags: its seed is rebuilt from the four others' shares (t = 3)
        (4, [0, 1, 2, 3, 4]),
    ],
)
def test_a_host_that_goes_silent_mid_round_drops_out_and_the_rest_unmasks(
    sends: int, alive: list[int]
) -> None:
    # clients-3 (client 4) sends `sends` messages of the round, then nothing.
    job = job_of(SIZES)
    inputs = inputs_of(job)

    sums, state, net = run_round(job, inputs, silent={"clients-3": sends})

    assert not net.errors and state.missed == {"clients-3"}
    [(survivors, total)] = sums
    assert survivors == alive
    np.testing.assert_array_equal(total, plain_sum(inputs, alive))


def test_a_host_silent_between_its_masked_input_and_its_view_stops_its_group(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # clients-3 masks, then sends no view tags: the others cannot tell that from an
    # aggregator hiding a view that disagrees, so they refuse to unmask (one line each).
    job = job_of(SIZES)

    with caplog.at_level(logging.ERROR):
        sums, state, net = run_round(job, inputs_of(job), silent={"clients-3": 3})

    assert sums == [] and not net.errors and state.missed == {"clients-3"}
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(lines) == 2 and all("no view from clients-3" in line for line in lines)


def test_an_advert_hidden_from_one_host_of_a_group_fails_the_agreement_of_that_group_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Four groups of two across four hosts; clients-1 (0, 1) shares its groups with
    # clients-3 (4, 5) only. The aggregator hides clients-4's advert from clients-1: its
    # groups still look right to it (6 clients make groups of 2), but its view of the
    # adverts is not clients-3's (nor, as it is named only clients it saw advertised, its
    # view of the groups and survivors). The two other groups do not depend on clients-1.
    job = job_of([2, 2, 2, 2], secagg_group=2)
    inputs = inputs_of(job)
    groups = [[0, 4], [1, 5], [2, 6], [3, 7]]
    monkeypatch.setattr(secure_aggregator, "round_groups", lambda config, ids, round_: groups)
    shown = secure_aggregator.neighbours_for

    def hiding(state: SecureRound, host: str) -> SecNeighbours:
        body = shown(state, host)
        if host != "clients-1":
            return body
        keep = body.hosts != job.names("clients").index("clients-4")
        mine = np.repeat(keep, body.sizes)
        return dataclasses.replace(
            body,
            hosts=body.hosts[keep],
            sizes=body.sizes[keep],
            advertised=body.advertised[mine],
            placed=body.placed[mine],
            c_keys=_rows(body.c_keys, mine, 32),
            s_keys=_rows(body.s_keys, mine, 32),
            tags=_rows(body.tags, keep, 32),
        )

    monkeypatch.setattr(secure_aggregator, "neighbours_for", hiding)

    with network(job) as net, caplog.at_level(logging.ERROR):
        for name in job.names("clients"):
            net.host(name, inputs)
        send = net.aggregator.send

        def naming(peer: str, body: Message, round_: int = 0) -> None:
            if peer == "clients-1" and isinstance(body, SecSurvivors):
                body = SecSurvivors(round_, body.survivors[body.survivors < 6])
            send(peer, body, round_)

        monkeypatch.setattr(net.aggregator, "send", naming)
        sums, _ = secure_collect(job, net.aggregator, net.asked(), ROUND, DIMS)

    assert not net.errors
    assert sorted(alive for alive, _ in sums) == [[2, 6], [3, 7]]
    lines = sorted(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    assert len(lines) == 2
    assert (
        "[0, 1]: clients-3 was shown other adverts, groups and survivors than we were" in lines[0]
    )
    assert (
        "[4, 5]: clients-1 was shown other adverts, groups and survivors than we were" in lines[1]
    )


def _rows(blob: bytes, keep: np.ndarray, width: int) -> bytes:
    return b"".join(blob[i * width : (i + 1) * width] for i in np.flatnonzero(keep))


def test_two_groups_unmask_separately_and_a_lone_client_is_never_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # secagg_group = 2 over five clients: groups of 2 and 3; each sum is its members'.
    job = job_of(SIZES, secagg_group=2)
    inputs = inputs_of(job)

    sums, _, net = run_round(job, inputs)

    assert not net.errors
    assert sorted(len(alive) for alive, _ in sums) == [2, 3]
    assert sorted(c for alive, _ in sums for c in alive) == [0, 1, 2, 3, 4]
    for alive, total in sums:
        np.testing.assert_array_equal(total, plain_sum(inputs, alive))

    # One host of one client in the job: it is alone in its group, and left out.
    lone = job_of([1], secagg_group=2)
    with caplog.at_level(logging.WARNING):
        sums, _, _ = run_round(lone, inputs_of(lone))
    assert sums == [] and "alone in its group; left out" in caplog.text


def test_a_host_advertising_a_client_it_was_not_asked_for_is_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # clients-3 speaks for client 4 and for client 1, which is clients-1's.
    job = job_of(SIZES)
    inputs = inputs_of(job)
    with network(job) as net, caplog.at_level(logging.WARNING):
        net.host("clients-1", inputs)
        net.host("clients-2", inputs)
        net.host("clients-3", inputs, clients=[1, 4])
        sums, state = secure_collect(job, net.aggregator, net.asked(), ROUND, DIMS)

    [(alive, total)] = sums
    assert alive == [0, 1, 2, 3] and state.missed == {"clients-3"} and not net.errors
    np.testing.assert_array_equal(total, plain_sum(inputs, alive))
    assert "refused clients-3's secure-aggregation message: adverts for clients" in caplog.text


def test_a_host_refuses_neighbours_for_a_client_it_did_not_advertise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Prepare: the aggregator's side played by hand, naming client 9 to clients-1.
    job = job_of([2])
    one = np.ones(1, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    bad = SecNeighbours(
        ROUND, one * 9, one * 0, one * 2, one, one, one * 0, none, none, none, none, b"", b"",
        b"", 2,
    )  # fmt: skip
    with network(job) as net, caplog.at_level(logging.ERROR):
        net.host("clients-1", inputs_of(job))
        channel = net.aggregator
        channel.expect({Kind.SECAGG_ADVERTISE}, {"clients-1"}, 10)
        # Act
        channel.send("clients-1", bad, ROUND)
        reply = body_as(channel.expect({Kind.SECAGG_SHARES}, {"clients-1"}, 10).body, SecShares)
    # Assert: one error line, an empty answer (nothing sealed), and the host moved on.
    assert reply.senders.size == 0 and not net.errors
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "secure aggregation aborted for clients [0, 1]" in line and "\n" not in line
