"""Scripts against a party of a GLM prediction session (docs/protocol.md §6.6, §7.5).

- **guest** (the kit plays the Server and the Host): Hellos with ``features = 0`` and the
  rows by position; after the public key, a ``score_request`` of another session is
  refused; the real one (``epoch = 0``, ``split = "test"``) is answered with ``scores``
  of ``⌈rows·k / slots⌉`` fresh encryptions, packed in the clear, that decode to the
  guest's ``z = x·θ`` of every new row (row-major, k per row, 2^32) when the kit has its
  model and rows; then ``finish``.
- **host** (the Server and every Guest): its Hello; a ``score_request`` to every guest;
  the played guests send known scores (``ρ = 1``); one ``decrypt_request`` of purpose
  ``scores``, ``⌈rows·k / slots⌉`` values, masked (its plaintext is not the guests' packed
  sum) and re-randomised; ``finish`` to every guest and the Server; with its files, the
  predictions CSV is the kind's columns of ``z_H + Σ_g z_g``. Violation: a guest's
  ``scores`` one ciphertext short must make it abort.
- **server** (the Host and every Guest): the key (size, mode, the same to all); one
  masked packed ``scores`` request decrypts to the values behind mask and packing;
  a second is refused (violation).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto import packing
from privfl.crypto.encoding import VALUE_BITS, decode, encode
from privfl.crypto.guest_masks import GuestMasks, label
from privfl.crypto.paillier import PublicKey
from privfl.errors import CryptoError
from privfl.learning.glm import glm_of, mean_of
from privfl.parties.vertical.predict import Model
from privfl.protocol.channel import body_as
from privfl.protocol.messages import (
    BigInts,
    Decrypted,
    DecryptRequest,
    Kind,
    ScoreRequest,
    Scores,
)
from privfl.tools.conformance.peer import (
    Peer,
    Report,
    expect,
    key_message,
    played_masks,
    quiet,
    unmasked,
)
from privfl.tools.conformance.randomness import Freshness, checkable_key, trivial
from privfl.tools.conformance.session import (
    Scored,
    aborts,
    glm_rows,
    guest_ends,
    guest_hellos,
    host_ends,
    host_hellos,
    played,
    read_predictions,
)
from privfl.tools.conformance.target import PredictInputs, Target


def predict_guest_script(target: Target) -> None:
    """Play the Server and the Host against a guest's prediction session."""
    job, party, _, report, process = target.parts()
    inputs = target.inputs
    known = glm_rows(job, party, inputs)
    with played(job, job.server, job.host) as (server, host):
        private, order = checkable_key(job.key_bits, job.obfuscation)
        fresh_seen = Freshness(private, order)
        rows = None if known is None else len(known[1].x)
        hello = guest_hellos(report, server, host, party, job, rows)
        if hello is None:
            return
        seeds, masks = played_masks(job, party)
        key = replace(key_message(job, server.name, private), mask_seeds=seeds)
        server.channel.send(party, key)
        host.raw(party, ScoreRequest(0, "test"), session="another-session")
        quiet(report, [host, server], party, "a score_request of another session is refused")
        host.channel.send(party, ScoreRequest(0, "test"), 0)
        env = expect(report, host, Kind.SCORES, party, "score_request is answered with scores")
        if env is None:
            return
        k = glm_of(job).outputs
        z = None if known is None else (known[1].x @ known[0].weights).ravel()
        scores = body_as(env.body, Scores)
        _check_guest_scores(report, scores, fresh_seen, hello.rows * k, z, masks)
        guest_ends(report, server, host, party, job, process, fresh_seen)


def _check_guest_scores(
    report: Report,
    got: Scores,
    seen: Freshness,
    values: int,
    z: np.ndarray | None,
    masks: GuestMasks,
) -> None:
    """Echo, packed count, every slot in range and, with the guest's files, ``z`` itself."""
    n = seen.private.public_key.n
    want = packing.packed_length(values, n)
    if not report.check(
        "scores echo epoch 0 and split test, packed: ⌈rows·k / slots(n)⌉ ciphertexts",
        (got.epoch, got.split, len(got.scores)) == (0, "test", want),
        f"epoch {got.epoch}, split {got.split}, {len(got.scores)} ciphertexts, expected {want}",
    ):
        return
    plain = seen.observe("scores", got.scores.values)
    plain = unmasked(masks, n, label("predict", got.epoch, got.split), plain)
    try:
        decoded = decode(packing.unpack(plain, values, n), VALUE_BITS, n)
    except CryptoError as exc:
        report.check("every packed slot holds v + 2^88 with |v| < 2^88", False, str(exc))
        return
    if z is not None:
        error = float(np.max(np.abs(decoded - z), initial=0.0))
        report.check(
            "scores are the model's z = x·θ of every new row, in order, at 2^32",
            error < 1e-6,
            f"max error {error:.3g} on values up to {float(np.max(np.abs(z), initial=0)):.3g}",
        )


def predict_host_script(target: Target) -> None:
    """Play the Server and every guest against a Host's prediction session."""
    job, party, ending, report, process = target.parts()
    inputs = target.inputs
    known = glm_rows(job, party, inputs)
    with played(job, job.server, *job.guests) as peers:
        server, guests = peers[0], {peer.name: peer for peer in peers[1:]}
        rows = None if known is None else len(known[1].x)
        hello = host_hellos(report, server, guests, party, job, rows)
        if hello is None:
            return
        private, order = checkable_key(job.key_bits, job.obfuscation)
        key = private.public_key
        for peer in peers:
            peer.channel.send(party, key_message(job, server.name, private))
        answered = _answer_score_requests(report, job, party, guests, key, hello.rows, ending)
        if ending == "violation":
            aborts(report, server, party, "scores one ciphertext short make it Abort", process)
            return
        if answered is None:
            return
        guest_z, packed_sum = answered
        seen = Freshness(private, order)
        if not _serve_decryption(report, party, server, seen, guest_z.size, packed_sum):
            return
        host_ends(report, peers, party, job, process, seen)
        if known is not None and inputs.predictions is not None:
            _check_predictions(report, job, known, guest_z, inputs)


def _answer_score_requests(
    report: Report,
    job: JobConfig,
    party: str,
    guests: dict[str, Peer],
    key: PublicKey,
    rows: int,
    ending: str,
) -> tuple[np.ndarray, list[int]] | None:
    """Each guest's known scores (sent with ρ = 1) for the Host's request; their sum
    (row-major) and the sum of their packed plaintexts, what an unmasked request holds.

    Violation: the first guest's scores one ciphertext short."""
    k, n = glm_of(job).outputs, key.n
    total, packed_sum = np.zeros(rows * k), [0] * packing.packed_length(rows * k, n)
    for i, (name, peer) in enumerate(guests.items()):
        env = expect(report, peer, Kind.SCORE_REQUEST, party, f"score_request to {name}")
        if env is None:
            return None
        body = body_as(env.body, ScoreRequest)
        what = f"score_request to {name}: epoch 0, split test"
        report.check(what, (body.epoch, body.split) == (0, "test"), str(body))
        z = np.linspace(-1.5, 1.5, rows * k) * (i + 1) / 2 + 0.25 * (np.arange(rows * k) % 3)
        packed = packing.pack_plain(encode(z, VALUE_BITS, n), n)
        values = trivial(key, packed)[: len(packed) - (ending == "violation" and i == 0)]
        peer.channel.send(party, Scores(0, "test", BigInts(tuple(values))), 0)
        total += z
        packed_sum = [(a + b) % n for a, b in zip(packed_sum, packed, strict=True)]
    return total, packed_sum


def _serve_decryption(
    report: Report, party: str, server: Peer, seen: Freshness, values: int, bare: list[int]
) -> bool:
    """The Host's one ``scores`` request: sized, masked, fresh; answered as the Server does."""
    env = expect(report, server, Kind.DECRYPT_REQUEST, party, "decrypt_request to the server")
    if env is None:
        return False
    body = body_as(env.body, DecryptRequest)
    n = seen.private.public_key.n
    want = packing.packed_length(values, n)
    report.check(
        "decrypt_request: epoch 0, batch 0, purpose scores, ⌈rows·k / slots(n)⌉ values",
        (body.epoch, body.batch, body.purpose, len(body.values)) == (0, 0, "scores", want),
        f"({body.epoch}, {body.batch}, {body.purpose}), {len(body.values)} values, expected {want}",
    )
    plain = seen.observe("decrypt_request (scores)", body.values.values)
    report.check(
        "the server sees the guests' packed sum only under the host's mask",
        not set(plain) & set(bare),
        "a decrypted value equals an unmasked packed sum",
    )
    server.channel.send(party, Decrypted(0, 0, body.purpose, BigInts(tuple(plain))), 0)
    return True


def _check_predictions(
    report: Report,
    job: JobConfig,
    known: tuple[Model, Scored],
    guest_z: np.ndarray,
    inputs: PredictInputs,
) -> None:
    """The Host's CSV: the kind's columns (§6.6, §6.8) of ``z_H + bias + Σ_g z_g``."""
    model, scored = known
    glm = glm_of(job)
    bias = 0.0 if model.bias is None else model.bias
    eta = (scored.x @ model.weights + bias).reshape(len(scored.x), glm.outputs)
    eta = eta + guest_z.reshape(eta.shape)
    header, cells = glm.prediction_columns(mean_of(glm, eta), scored.table.exposure)
    got = read_predictions(report, inputs)
    if got is None:
        return
    ids = scored.table.ids
    want = [["id", *header], *([i, *map(str, row)] for i, row in zip(ids, cells, strict=True))]
    report.check(
        "predictions are the kind's columns of z_H + bias + Σ_g z_g, one row per new row",
        _same_table(got, want),
        f"first rows {got[:2]}, expected {want[:2]}",
    )


def _same_table(got: list[list[str]], want: list[list[str]]) -> bool:
    """Equal headers and ids; every number within 1e-5 (the file's 6 decimals)."""
    if len(got) != len(want) or got[:1] != want[:1]:
        return False
    for a, b in zip(got[1:], want[1:], strict=True):
        if len(a) != len(b) or a[0] != b[0]:
            return False
        if not np.allclose([float(v) for v in a[1:]], [float(v) for v in b[1:]], atol=1e-5):
            return False
    return True
