"""Script against a running server: the tool plays the Host and one Guest."""

from __future__ import annotations

import subprocess

import numpy as np

from privfl.config import JobConfig
from privfl.conformance.peer import (
    Peer,
    Report,
    check_public_key,
    exits_nonzero,
    expect,
    expect_abort,
    finished_cleanly,
    quiet,
)
from privfl.crypto import fresh, packing
from privfl.crypto.encoding import VALUE_BITS, encode
from privfl.crypto.paillier import PublicKey as PaillierKey
from privfl.crypto.paillier import unmask
from privfl.data.alignment import positions, row_commitment
from privfl.errors import CryptoError
from privfl.protocol.messages import (
    Decrypted,
    DecryptRequest,
    EpochResult,
    Finish,
    Hello,
    Kind,
    Loss,
    PublicKey,
    Resume,
)


def server_script(
    job: JobConfig,
    party: str,
    ending: str,
    report: Report,
    process: subprocess.Popen[bytes] | None = None,
) -> None:
    """Play the Host and every Guest against a running server (the first guest asks)."""
    host = Peer(job, job.host, job.timeout_seconds)
    guests = [Peer(job, name, job.timeout_seconds) for name in job.guests]
    guest = guests[0]
    fingerprint = job.fingerprint()
    rows, host_features, guest_features = 100, 4, 3
    try:
        digest = row_commitment(job.session, positions(range(rows)), ())
        host.channel.send(party, Hello("host", fingerprint, rows, host_features, digest))
        for peer in guests:
            peer.channel.send(party, Hello("guest", fingerprint, rows, guest_features, digest))
        keys = {}
        for peer in (host, *guests):
            env = expect(report, peer, Kind.PUBLIC_KEY, party, f"public key sent to {peer.name}")
            if env is None:
                return
            assert isinstance(env.body, PublicKey)
            keys[peer.name] = (env.body.n, env.body.h_s)
            if not check_public_key(report, job, env.body):
                return
        report.check("every party gets the same key (n and h_s)", len(set(keys.values())) == 1)
        key = PaillierKey.from_n(*keys[host.name])
        if expect(report, host, Kind.CHECKPOINTS, party, "Checkpoints offer to the host") is None:
            return
        host.channel.send(party, Resume(completed=0))
        # A guest's gradient as a correct guest sends it: packed, masked, re-randomised.
        values = [5, 0, key.n - 1]  # 5, 0 and −1 as residues mod n
        masked, masks = fresh.mask(key, packing.pack(key, key.encrypt(values)))
        request = DecryptRequest(0, 0, "gradient", masked)
        guest.raw(party, request, session="another-session")
        quiet(report, [guest, host], party, "a request from another session is refused")
        guest.channel.send(party, request, 0)
        env = expect(report, guest, Kind.DECRYPTED, party, "DecryptRequest → Decrypted")
        if env is not None and isinstance(env.body, Decrypted):
            _check_decrypted(report, env.body, request, masks, values, key.n)
        loss = encode([8 * 10 * 0.25], VALUE_BITS, key.n)
        host.channel.send(party, Loss(0, 0, 1, fresh.encrypt(key, loss), 80, VALUE_BITS))
        env = expect(report, host, Kind.EPOCH_RESULT, party, "Loss → EpochResult")
        if env is not None:
            assert isinstance(env.body, EpochResult)
            report.check("loss is decrypted and averaged", abs(env.body.loss - 0.25) < 1e-9)
        _score_requests(report, party, host, key, rows)
        if ending == "violation":
            # The same gradient twice: not allowed (raw: our channel sends a vector once).
            guest.raw(party, request, session=job.session)
            expect_abort(report, guest, party, "a repeated gradient decryption makes it Abort")
            exits_nonzero(report, party, process)
            return
        host.channel.send(party, Finish(epochs=1, reason="conformance"))
        finished_cleanly(report, [host, *guests], party, job.party(party).endpoint, process)
    finally:
        host.close()
        for peer in guests:
            peer.close()


def _score_requests(report: Report, party: str, host: Peer, key: PaillierKey, rows: int) -> None:
    """The Host's two score decryptions of an epoch, packed as a correct Host packs them.

    Flipback: every training row, packed by the Host under encryption (the longest
    request the Server allows, ⌈rows / slots(n)⌉). Evaluation: the test rows, packed by
    the guests before encryption.
    """
    n = key.n
    train = encode(np.linspace(-3.0, 3.0, rows), VALUE_BITS, n)
    test = encode(np.linspace(2.0, -1.0, rows // 4), VALUE_BITS, n)
    flipback = packing.pack(key, key.encrypt(train))
    evaluation = key.encrypt(packing.pack_plain(test, n))
    for what, ciphertexts, values in (("flipback", flipback, train), ("test", evaluation, test)):
        masked, masks = fresh.mask(key, ciphertexts)
        request = DecryptRequest(0, 0, "scores", masked)
        host.channel.send(party, request, 0)
        env = expect(report, host, Kind.DECRYPTED, party, f"packed {what} scores → Decrypted")
        if env is None or not isinstance(env.body, Decrypted):
            return
        _check_decrypted(report, env.body, request, masks, values, n)


def _check_decrypted(
    report: Report,
    got: Decrypted,
    request: DecryptRequest,
    masks: list[int],
    values: list[int],
    n: int,
) -> None:
    """The echo, one plaintext per packed ciphertext, and the values behind mask and packing."""
    echo = (got.epoch, got.batch, got.purpose) == (request.epoch, request.batch, request.purpose)
    if not report.check(
        f"{request.purpose} decryption echoes the request, one plaintext per ciphertext",
        echo and len(got.values) == len(request.values),
        f"{len(got.values)} values for {len(request.values)}",
    ):
        return
    try:
        plain = packing.unpack(unmask(got.values.values, masks, n), len(values), n)
    except CryptoError as exc:
        report.check(f"{request.purpose} decryption is correct", False, str(exc))
        return
    report.check(f"{request.purpose} decryption is correct", plain == values, str(plain[:3]))
