"""A deviating party feeds a whole guessable id space into the PSI to find the other's ids.

The audit's attack: record numbers are easy to guess, so a party that puts 5,000
guessed ids into its set learns which of them the other side holds (300 of 300 found in
0.8 s). Every site now declares its largest set in the job file (``max_ids``) and each
side refuses a peer whose announced or actual set is larger, before doing any work on it.
Within its cap a party can still test guesses (that is what a PSI computes); the caps
bound how many (docs/security.md).
"""

from __future__ import annotations

import threading

import numpy as np
from psi_harness import id_table, job_of, run_stage, send_as

from privfl.crypto import psi_ecdh as ecdh
from privfl.errors import ProtocolError
from privfl.protocol import codec
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import BigInts, Kind, PsiAnswer, PsiHello, PsiQuery

rng = np.random.default_rng(7)
SPACE = [f"MRN-{i:05d}" for i in range(5000)]  # the guessable id space
VICTIM = sorted(rng.choice(SPACE, 300, replace=False).tolist())  # 300 real ids


def test_without_a_tight_cap_guessing_the_space_finds_every_id() -> None:
    """The attack as the audit ran it: caps that admit 5,000 ids let it work (so it is real)."""
    job = job_of(1, "ecdh", caps={"host": 5000})
    results = run_stage(job, {"host": id_table(SPACE), "guest-1": id_table(VICTIM)}, InMemoryHub())

    assert sorted(results["host"].ids) == VICTIM  # the Host found all 300


def test_a_host_over_its_declared_cap_is_refused_by_the_guest_before_answering() -> None:
    """A Host that declared 500 ids but queries the whole space gets no answer."""
    job = job_of(1, "ecdh", caps={"host": 500}, timeout=5)
    hub = InMemoryHub()
    guessed = ecdh.multiply(ecdh.new_secret(), ecdh.hash_to_group(SPACE, b"guess"))

    results = run_stage(
        job,
        {"guest-1": id_table(VICTIM)},
        hub,
        lambda: send_as(job, hub, "host", PsiQuery(BigInts(tuple(guessed))), to="guest-1"),
    )

    assert isinstance(results["guest-1"], ProtocolError)
    assert "host queries 5000 ids, more than its max_ids of 500" in str(results["guest-1"])
    answers = [s for s in hub.sent if isinstance(codec.decode(s.frames)[1], PsiAnswer)]
    assert not answers


def test_the_honest_host_refuses_its_own_oversize_set_before_sending() -> None:
    job = job_of(1, "ecdh", caps={"host": 500}, timeout=1)
    hub = InMemoryHub()

    results = run_stage(job, {"host": id_table(SPACE), "guest-1": id_table(VICTIM)}, hub)

    assert "this site holds 5000 ids, more than its max_ids of 500" in str(results["host"])
    assert not [s for s in hub.sent if s.sender == "host"]


def test_a_guest_announcing_more_than_its_cap_gets_no_query() -> None:
    job = job_of(1, "ecdh", caps={"guest-1": 500})
    hub = InMemoryHub()

    results = run_stage(
        job,
        {"host": id_table(VICTIM)},
        hub,
        lambda: send_as(job, hub, "guest-1", PsiHello("ecdh", 0, 0, len(SPACE))),
    )

    assert isinstance(results["host"], ProtocolError)
    assert "guest-1 announces 5000 ids, more than its max_ids of 500" in str(results["host"])
    assert not [s for s in hub.sent if s.sender == "host"]


def test_a_guest_sending_more_tags_than_it_announced_is_refused() -> None:
    """Announce 10 ids (within the cap), then answer with tags for the whole space."""
    job = job_of(1, "ecdh", caps={"guest-1": 500})
    hub = InMemoryHub()
    secret = ecdh.new_secret()
    tags = BigInts(tuple(ecdh.multiply(secret, ecdh.hash_to_group(SPACE, b"guess"))))

    def guest() -> None:
        channel = send_as(job, hub, "guest-1", PsiHello("ecdh", 0, 0, 10))
        query = channel.expect({Kind.PSI_QUERY}, {"host"}).body
        assert isinstance(query, PsiQuery)
        answer = BigInts(tuple(ecdh.multiply(secret, query.values.values)))
        channel.send("host", PsiAnswer(answer, tags))

    def start() -> None:
        threading.Thread(target=guest, daemon=True).start()

    results = run_stage(job, {"host": id_table(VICTIM)}, hub, start)

    assert isinstance(results["host"], ProtocolError)
    assert "wrong number of values" in str(results["host"])
    results_sent = [codec.decode(s.frames)[1] for s in hub.sent if s.sender == "host"]
    assert [type(b) for b in results_sent] == [PsiQuery]  # no PsiResult: nothing matched
