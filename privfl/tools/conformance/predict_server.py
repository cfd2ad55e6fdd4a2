"""Script against the Server of a GLM prediction session (docs/protocol.md §6.6, §7.5).

The kit plays the Host and every Guest: Hellos with ``features = 0`` and the same rows
by position; the key must be the job's size and mode, the same to all; a request of
another session is refused; the Host's one masked, packed ``scores`` request
(``⌈rows·k / slots⌉`` values) decrypts to exactly what was packed; ``finish`` ends it.
Violation: the same request a second time (a prediction session allows one) must make
the Server abort.
"""

from __future__ import annotations

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto import packing
from privfl.crypto.encoding import VALUE_BITS, encode
from privfl.crypto.paillier import PublicKey
from privfl.learning.glm import glm_of
from privfl.protocol import fresh
from privfl.protocol.channel import body_as
from privfl.protocol.messages import Decrypted, DecryptRequest, Hello, Kind, PublicKeyMessage
from privfl.tools.conformance.peer import Peer, Report, check_public_key, expect, quiet
from privfl.tools.conformance.server import _check_decrypted
from privfl.tools.conformance.session import (
    aborts,
    commitment,
    end_predicted,
    played,
)
from privfl.tools.conformance.target import Target

ROWS = 40  # the new rows every played party announces


def predict_server_script(target: Target) -> None:
    """Play the Host and every guest against a Server's prediction session."""
    job, party, ending, report, process = target.parts()
    with played(job, job.host, *job.guests) as peers:
        host = peers[0]
        key = _hellos_and_key(job, party, report, peers)
        if key is None:
            return
        values = encode(np.linspace(-2.0, 3.0, ROWS * glm_of(job).outputs), VALUE_BITS, key.n)
        masked, masks = fresh.mask(key, key.encrypt(packing.pack_plain(values, key.n)))
        request = DecryptRequest(0, 0, "scores", masked)
        host.raw(party, request, session="another-session")
        quiet(report, peers, party, "a decrypt_request of another session is refused")
        host.channel.send(party, request, 0)
        env = expect(report, host, Kind.DECRYPTED, party, "the scores request → decrypted")
        if env is None:
            return
        _check_decrypted(report, body_as(env.body, Decrypted), request, masks, values, key.n)
        if ending == "violation":
            host.raw(party, request, session=job.session)
            aborts(report, host, party, "a second scores request makes it Abort", process)
            return
        end_predicted(report, host, peers, party, job, process)


def _hellos_and_key(
    job: JobConfig, party: str, report: Report, peers: list[Peer]
) -> PublicKey | None:
    """Every played party's Hello; the key each gets back, checked and the same for all."""
    for i, peer in enumerate(peers):
        role = "host" if i == 0 else "guest"
        peer.channel.send(party, Hello(role, job.fingerprint(), ROWS, 0, commitment(job, ROWS)))
    keys = set()
    for peer in peers:
        env = expect(report, peer, Kind.PUBLIC_KEY, party, f"public key sent to {peer.name}")
        if env is None:
            return None
        body = body_as(env.body, PublicKeyMessage)
        if not check_public_key(report, job, body, party):
            return None
        keys.add((body.n, body.h_s))
    report.check("every party gets the same key (n and h_s)", len(keys) == 1, str(len(keys)))
    n, h_s = keys.pop()
    return PublicKey.from_n(n, h_s)
