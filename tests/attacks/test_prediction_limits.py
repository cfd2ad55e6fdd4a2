"""Attack: a deviating Host asks the Server of a prediction session for more than one sum.

A prediction session gets its own Server state (``server_rules.prediction_allowance``):
one score decryption, of every announced row, from the Host, and nothing else — no
gradient, no loss, no second request. The Host below makes its honest request and then
asks again, this time for guest-1's packed scores alone (with two guests it should only
ever see their sum). The Server refuses, audits it and aborts the session naming the
Host. With the rule off, the guests' zero-sum masks (crypto/guest_masks.py) still hold:
guest-1's vector alone decrypts to noise. Leaky arm: with the rule and the masks off, the
second answer hands the Host guest-1's score on every row (``test_packed_requests.py``
shows the other way a Host would get it: its own packing of the one request it is
allowed, which the masks close too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import run_parties
from test_packed_requests import prediction_job

from privfl.crypto import guest_masks, packing
from privfl.crypto.encoding import VALUE_BITS
from privfl.crypto.paillier import unmask
from privfl.errors import PeerAborted
from privfl.learning.kinds.base import add_all
from privfl.parties.audit import FILE_NAME as AUDIT
from privfl.parties.session import PartyContext
from privfl.parties.vertical import predict as predict_party
from privfl.parties.vertical import server_rules
from privfl.parties.vertical.handshake import receive_public_key
from privfl.protocol import fresh
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import (
    Decrypted,
    DecryptRequest,
    Finish,
    Kind,
    ScoreRequest,
    Scores,
)

ROWS = 40


def slots(plain: list[int], n: int) -> np.ndarray:
    """The ROWS packed values behind ``plain``, read without the range checks of
    ``packing.unpack`` (noise must come back as values, not as an error)."""
    per, width, offset = packing.slots(n), (1 << packing.SLOT_BITS) - 1, 1 << packing.BOUND_BITS
    out = [(p >> (packing.SLOT_BITS * i)) & width for p in plain for i in range(per)][:ROWS]
    return np.array([v - offset for v in out], dtype=np.float64) / 2**VALUE_BITS


def greedy_host(read: list[np.ndarray]) -> Any:
    """``host_predict`` that, after its honest sum, asks for guest-1's scores alone."""

    def host_predict(
        ctx: PartyContext, rows: Any, z_host: np.ndarray, out: Path, digest: str = ""
    ) -> dict[str, Any]:
        job, channel = ctx.job, ctx.channel
        predict_party.meet_guests(ctx, len(z_host), digest)
        key = receive_public_key(ctx)
        channel.broadcast(job.guests, ScoreRequest(epoch=0, split="test"))
        replies = channel.gather(Kind.SCORES, job.guests)
        vectors = {g: r.scores.values for g, r in replies.items() if isinstance(r, Scores)}
        for values in (add_all(key, list(vectors.values())), vectors["guest-1"]):
            masked, masks = fresh.mask(key, values)
            channel.send(job.server, DecryptRequest(0, 0, "scores", masked))
            reply = channel.expect_body(Decrypted, {job.server})
        read.append(slots(unmask(reply.values.values, masks, key.n), key.n))
        channel.broadcast([*job.guests, job.server], Finish(epochs=0, reason="predicted"))
        return {}

    return host_predict


@pytest.mark.parametrize(
    ("leaky", "masked"),
    [(False, True), (True, True), (True, False)],
    ids=["one request", "rule off", "rule and masks off"],
)
def test_a_second_score_request_in_a_prediction_session_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leaky: bool, masked: bool
) -> None:
    # Prepare: two guests, 40 new rows; the Host deviates.
    read: list[np.ndarray] = []
    monkeypatch.setattr(predict_party, "host_predict", greedy_host(read))
    if leaky:  # the Server's state forgets what it has decrypted
        honest = server_rules.check_scores

        def forgetful(allow: Any, at: Any, sender: str, msg: Any) -> str:
            split = honest(allow, at, sender, msg)
            at.scored.clear()
            return split

        monkeypatch.setattr(server_rules, "check_scores", forgetful)
    if not masked:
        monkeypatch.setattr(guest_masks.GuestMasks, "masks", lambda _s, _n, _w, count: [0] * count)
    job, models, tables = prediction_job()
    hub = InMemoryHub()
    transports = {n: hub.transport(n) for n in job.parties}

    # Act
    results = run_parties(
        job.parties,
        lambda name: predict_party.predict_party(
            job, name, tmp_path / name / "p.csv", model=models.get(name),
            table=tables.get(name), by_id=False, transport=transports[name],
        ),
        join=60,
    )  # fmt: skip

    # Assert
    z1 = tables["guest-1"].x @ models["guest-1"].weights
    if leaky:  # guest-1's score to 10^-6 on every row, or (masked) on none
        (scores,) = read
        close = int(np.count_nonzero(np.abs(scores - z1) < 1e-6))
        assert close == (0 if masked else ROWS)
        return
    assert read == []
    refusal = results["server"]
    assert isinstance(refusal, server_rules.Refused), refusal
    assert "host asked to decrypt" in str(refusal) and "still due: nothing" in str(refusal)
    assert isinstance(results["host"], PeerAborted) and "host" in str(results["host"])
    log = (tmp_path / "server" / AUDIT).read_text()
    assert '"refused"' in log
