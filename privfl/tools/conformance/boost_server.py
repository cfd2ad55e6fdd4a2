"""Script against the Server of a SecureBoost job, in training and in prediction.

In SecureBoost the Host holds the key (docs/protocol.md §6.9, §7.9): the Server only
checks every Hello — the job's fingerprint, the role, every guest's row commitment equal
to the Host's — and waits for the Host's ``finish``. The kit plays the Host and every
guest: a Hello of another session is refused; after the real Hellos the Server sends
nothing (no key, no message); the Host's ``finish`` ends it cleanly. Violation: a guest
whose row commitment differs from the Host's must make it abort.
"""

from __future__ import annotations

from privfl.protocol.messages import Finish, Hello
from privfl.tools.conformance.peer import finished_cleanly, quiet
from privfl.tools.conformance.session import aborts, commitment, played
from privfl.tools.conformance.target import Target

ROWS = 100  # the rows every played party announces


def boost_server_script(target: Target) -> None:
    """Play the Host and every guest against a SecureBoost Server's training session."""
    _play(target, predicting=False)


def boost_predict_server_script(target: Target) -> None:
    """The same against its prediction session (Hellos with ``features = 0``)."""
    _play(target, predicting=True)


def _play(target: Target, predicting: bool) -> None:
    job, party, ending, report, process = target.parts()
    with played(job, job.host, *job.guests) as peers:
        host = peers[0]
        digest = commitment(job, ROWS)
        hello = Hello("host", job.fingerprint(), ROWS, 0, digest)
        host.raw(party, hello, session="another-session")
        quiet(report, peers, party, "a Hello of another session is refused")
        for i, peer in enumerate(peers):
            features = 0 if predicting else job.party(peer.name).declared_features + (i == 0)
            theirs = commitment(job, ROWS - 1) if ending == "violation" and i == 1 else digest
            role = "host" if i == 0 else "guest"
            peer.channel.send(party, Hello(role, job.fingerprint(), ROWS, features, theirs))
        if ending == "violation":
            what = "a guest's rows not lined up with the host's make it Abort"
            aborts(report, host, party, what, process)
            return
        quiet(
            report,
            peers,
            party,
            "the server sends nothing after the Hellos (the host holds the key)",
        )
        reason = "predicted" if predicting else "conformance"
        host.channel.send(party, Finish(epochs=0 if predicting else job.model.trees, reason=reason))
        finished_cleanly(report, peers, party, job.party(party).endpoint, process)
