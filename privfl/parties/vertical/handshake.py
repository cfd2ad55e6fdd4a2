"""The vertical handshake (Hello, row commitment, the Server's key) and a party's model file."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privfl.config.core import decode_sections, differing, encode_sections
from privfl.crypto.guest_masks import GuestMasks, decode_seeds
from privfl.crypto.paillier import PublicKey
from privfl.data.alignment import row_commitment
from privfl.errors import ConfigError, ProtocolError
from privfl.models.registry import model_entry
from privfl.parties.files import write_json
from privfl.parties.session import PartyContext
from privfl.parties.vertical.keyproof import check_key
from privfl.protocol.messages import BigInts, Hello, Kind, PublicKeyMessage

log = logging.getLogger("privfl.party")
TABLE_KEYS = ("training", "model", "label_dp", "data")  # shown as [table] in errors


def big(values: Sequence[int]) -> BigInts:
    """Wrap ciphertexts or residues for the wire."""
    return BigInts(tuple(int(v) for v in values))


def announce(
    ctx: PartyContext,
    role: str,
    rows: int,
    features: int,
    to: Sequence[str],
    rows_digest: str = "",
    train_rows: int = 0,
    plan_commit: str = "",
) -> None:
    """Send our Hello (job fingerprint, table shape, row commitment, batch-plan commitment)
    to those who check it."""
    hello = Hello(
        role=role,
        job_fingerprint=ctx.job.fingerprint(),
        rows=rows,
        features=features,
        rows_digest=rows_digest,
        train_rows=train_rows,
        job_sections=encode_sections(ctx.job.sections()),
        plan_commit=plan_commit,
    )
    ctx.channel.broadcast(to, hello)


def rows_digest(ctx: PartyContext, train_ids: Sequence[str], test_ids: Sequence[str]) -> str:
    """Our commitment to the ordered row ids, salted by the session (docs/protocol.md §2.3)."""
    return row_commitment(ctx.job.session, train_ids, test_ids)


def check_rows(sender: str, digest: str, reference: str, whose: str) -> None:
    """Refuse a party whose ordered rows differ from ``whose`` rows (its row commitment)."""
    if digest != reference:
        got = digest[:16] or "none"
        raise ConfigError(
            f"{sender}'s rows do not line up with {whose}: row commitment {got}, expected "
            f"{reference[:16]}; every party must hold the same ids in the same order and split "
            "(docs/protocol.md §2.3)"
        )


def check_hello(ctx: PartyContext, sender: str, hello: Hello) -> None:
    """Refuse a peer that runs another job file or claims another role."""
    ours = ctx.job.fingerprint()
    if hello.job_fingerprint != ours:
        raise ConfigError(f"party {sender} runs a different job file{job_difference(ctx, hello)}")
    expected = ctx.job.party(sender).role
    if hello.role != expected:
        raise ProtocolError(f"party {sender} says it is a {hello.role}, the job says {expected}")


def job_difference(ctx: PartyContext, hello: Hello) -> str:
    """``: it differs in [training], …; give every party …``: what a refused Hello's job
    changes, by section where the peer sent its section digests, else by fingerprint."""
    theirs = decode_sections(hello.job_sections)
    names = differing(ctx.job.sections(), theirs) if theirs else []
    if not names:  # an older peer, or sections that agree while the whole does not
        return (
            f" (fingerprint {hello.job_fingerprint}, ours {ctx.job.fingerprint()}); "
            "give every party the same job.toml"
        )
    shown = ", ".join(f"[{n}]" if "." in n or n in TABLE_KEYS else n for n in names)
    return f": it differs in {shown}; give every party the same job.toml"


def receive_public_key(ctx: PartyContext) -> PublicKey:
    """Wait for the Server's Paillier public key and check its size against the job."""
    return receive_key_message(ctx)[0]


def receive_key_message(ctx: PartyContext) -> tuple[PublicKey, str]:
    """The Server's public key, checked, and the plan commitments it relays (§6.1a)."""
    key, body = receive_key_body(ctx)
    return key, body.plan_commits


def receive_guest_key(ctx: PartyContext) -> tuple[PublicKey, str, GuestMasks]:
    """A guest's :func:`receive_key_message`, and its zero-sum masks from the seeds the
    Server sent it alone (crypto/guest_masks.py; none with one guest)."""
    key, body = receive_key_body(ctx)
    return key, body.plan_commits, masks_of(ctx, body.mask_seeds)


def masks_of(ctx: PartyContext, text: str) -> GuestMasks:
    """Our masks from ``public_key.mask_seeds``: one seed per other guest, else fatal."""
    job, seeds = ctx.job, decode_seeds(text)
    others = [g for g in job.guests if g != ctx.name]
    if sorted(seeds) != sorted(others):
        got = ", ".join(sorted(seeds)) or "none"
        raise ProtocolError(
            f"{job.server} sent mask seeds for {got}; this guest needs one for each other "
            f"guest ({', '.join(others) or 'none'}), docs/protocol.md §6.1: check that every "
            "party runs the same privfl protocol version"
        )
    return GuestMasks(job.session, ctx.name, tuple(job.guests), seeds)


def receive_key_body(ctx: PartyContext) -> tuple[PublicKey, PublicKeyMessage]:
    """The Server's public key, checked, and the message that carried it."""
    # The Server sends the key only once every Hello is in, waiting up to one timeout
    # for a missing party; wait longer than that, so that the Server, which knows who
    # is missing, times out first and names that party in its Abort.
    body = ctx.channel.expect_body(
        PublicKeyMessage, {ctx.job.server}, 2 * ctx.job.timeout_seconds, patient=True
    )
    key = PublicKey.from_n(body.n, body.h_s)
    if key.bits < ctx.job.key_bits:
        raise ProtocolError(
            f"server sent a {key.bits}-bit key; the job asks for {ctx.job.key_bits}"
        )
    if key.obfuscation != ctx.job.obfuscation:
        raise ProtocolError(
            f"server sent a key for {key.obfuscation} obfuscation; the job asks for "
            f"{ctx.job.obfuscation}"
        )
    server = ctx.job.server
    check_key(key.n, body.proof, session=ctx.job.session, kind=Kind.PUBLIC_KEY, sender=server)
    log.info("received the server's %d-bit Paillier public key", key.bits)
    return key, body


def save_model(
    ctx: PartyContext,
    role: str,
    feature_names: Sequence[str],
    weights: np.ndarray,
    mean: np.ndarray,
    scale: np.ndarray,
    bias: Any = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Save this party's own weights by feature name, with the standardisation it used.

    ``weights`` of shape ``(features,)`` or ``(features, k)``: one weight per feature, or
    a list of k (multiclass, one per class); the bias likewise. ``extra``: further keys
    (the Host's private initial weights, so its centralised twin can start from them).
    """
    weights = np.asarray(weights)
    if weights.ndim == 2 and weights.shape[1] == 1:
        weights = weights[:, 0]
    model: dict[str, Any] = {
        "party": ctx.name,
        "role": role,
        "session": ctx.job.session,
        "model": model_entry(
            ctx.job.model.kind, outputs=1 if weights.ndim == 1 else weights.shape[1]
        ),
        "weights": {n: _plain(w) for n, w in zip(feature_names, weights, strict=True)},
        "standardisation": {
            n: {"mean": float(m), "scale": float(s)}
            for n, m, s in zip(feature_names, mean, scale, strict=True)
        },
        "note": "weights apply to standardised features: (x - mean) / scale",
    }
    if bias is not None:
        model["bias"] = _plain(bias)
    model.update(extra or {})
    path = ctx.out / "model.json"
    write_json(path, model)
    return path


def _plain(value: Any) -> float | list[float]:
    """A weight (or a row of k weights) as JSON numbers."""
    array = np.asarray(value, dtype=np.float64)
    if array.ndim == 0 or array.size == 1:
        return float(array.reshape(-1)[0])
    return [float(v) for v in array.reshape(-1)]
