"""What the SecureBoost Host and guests share: the plaintext layout, packing, sizes, settings.

One row's plaintext holds its gradient, its hessian and a 1 side by side::

    P_row = ((g + 2^F) · 2^(Hb + Cb)) + (h · 2^Cb) + 1          F = FRAC_BITS

with ``g`` and ``h`` the fixed-point ints of learning.secureboost (``|g| <= 2^F``,
``0 <= h <= 2^F``), so every part is non-negative. A product of row ciphertexts over a
bin is then the encryption of ``(Σg + c·2^F, Σh, c)`` in the same three fields, none
of which can overflow into the next for up to ``rows`` rows (``Cb = bits(rows)``,
``Hb = Gb = F + 1 + Cb``). A guest packs ``k = ⌊(|n| − 1) / slot⌋`` such bin sums
into one plaintext before it re-randomises and sends them; the Host removes the
``c·2^F`` offset with the count ``c`` it reads from the same slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto.gmp import mpz, powmod
from privfl.crypto.paillier import PublicKey
from privfl.errors import ConfigError, ProtocolError
from privfl.learning.secureboost import FRAC_BITS, BoostParams
from privfl.parties.session import PartyContext
from privfl.parties.vertical.keyproof import check_key
from privfl.protocol.messages import Kind, PublicKeyMessage

OFFSET = 1 << FRAC_BITS
SPLITS_OF_DATA = ("train", "test")


def params_of(job: JobConfig) -> BoostParams:
    """The booster settings of the job's ``[model]`` table (and its public seed)."""
    m = job.model
    return BoostParams(
        trees=m.trees,
        depth=m.depth,
        learning_rate=m.learning_rate,
        bins=m.bins,
        l2=m.l2,
        gamma=m.gamma,
        min_child_weight=m.min_child_weight,
        subsample=m.subsample,
        colsample=m.colsample,
        early_stopping_rounds=m.early_stopping_rounds,
        seed=job.seed,
    )


def guest_features(job: JobConfig, guest: str) -> int:
    """The feature count the job declares for a guest: the Host sizes its histograms by it."""
    declared = job.party(guest).declared_features
    if not declared:
        raise ConfigError(
            f"SecureBoost needs every guest's feature count: set feature_count under "
            f"[parties.{guest}] in the job file"
        )
    return declared


@dataclass(frozen=True, slots=True)
class Layout:
    """Field widths of one tree's plaintexts, and how many bin sums share a ciphertext."""

    rows: int
    key_bits: int

    @property
    def count_bits(self) -> int:
        return max(1, self.rows.bit_length())

    @property
    def h_bits(self) -> int:
        return FRAC_BITS + 1 + self.count_bits

    @property
    def slot(self) -> int:
        return self.count_bits + 2 * self.h_bits

    @property
    def per_ciphertext(self) -> int:
        per = (self.key_bits - 1) // self.slot
        if per < 1:
            raise ConfigError(f"a {self.key_bits}-bit key cannot hold one bin sum; use 1024+")
        return per

    def packed(self, values: int, span: int = 1) -> int:
        """Ciphertexts that ``values`` blocks of ``span`` adjacent bin sums pack into."""
        return -(-values // self.blocks(span))

    def blocks(self, span: int) -> int:
        """Whole blocks of ``span`` bin sums one plaintext holds (hidden mode's lanes)."""
        per = self.per_ciphertext // span
        if per < 1:
            raise ProtocolError(f"a block of {span} bin sums does not fit one plaintext")
        return per


def row_plaintexts(g: np.ndarray, h: np.ndarray, layout: Layout) -> list[int]:
    """The Host's per-row plaintexts ``(g + 2^F, h, 1)`` (see the module doc)."""
    if (np.abs(g) > OFFSET).any() or (h < 0).any() or (h > OFFSET).any():
        raise ProtocolError("a gradient or hessian is outside the fixed-point range")
    cb, hb = layout.count_bits, layout.h_bits
    return [
        ((gi + OFFSET) << (hb + cb)) | (hi << cb) | 1
        for gi, hi in zip(g.tolist(), h.tolist(), strict=True)
    ]


def pack_sums(sums: Sequence[Any], layout: Layout, nsquare: int, span: int = 1) -> list[int]:
    """Pack bin-sum ciphertexts ``k`` per ciphertext: ``Π c_i^(2^(slot·i))`` by Horner's rule.

    With ``span > 1`` each ciphertext already holds ``span`` adjacent slots (a hidden-mode
    lane of nodes): ``⌊k / span⌋`` of them share a plaintext, ``span·slot`` bits apart.
    Not re-randomised: the caller passes the result through protocol.fresh.rerandomize.
    """
    per, n2 = layout.blocks(span), mpz(nsquare)
    shift = mpz(1) << (layout.slot * span)
    out: list[int] = []
    for start in range(0, len(sums), per):
        group = sums[start : start + per]
        acc = mpz(group[-1])
        for c in reversed(group[:-1]):
            acc = powmod(acc, shift, n2) * c % n2
        out.append(int(acc))
    return out


def unpack_sums(plain: Sequence[int], values: int, layout: Layout, span: int = 1) -> np.ndarray:
    """Decrypted packed plaintexts to int64 ``(values·span, 3)``: Σg, Σh, count per bin sum.

    ``values`` blocks of ``span`` slots each (:func:`pack_sums`), block-major.
    """
    if len(plain) != layout.packed(values, span):
        raise ProtocolError(f"{len(plain)} packed values cannot hold {values} bin sums")
    per, slot = layout.blocks(span) * span, layout.slot
    cb, hb = layout.count_bits, layout.h_bits
    mask = (1 << slot) - 1
    values *= span
    out = np.zeros((values, 3), dtype=np.int64)
    i = 0
    for p in plain:
        here = min(per, values - i)
        if int(p) >> (slot * here):
            raise ProtocolError("a histogram plaintext has bits beyond its slots")
        for k in range(here):
            v = (int(p) >> (slot * k)) & mask
            c = v & ((1 << cb) - 1)
            h = (v >> cb) & ((1 << hb) - 1)
            g = (v >> (cb + hb)) - c * OFFSET
            out[i] = (g, h, c)
            i += 1
    return out


def receive_key(ctx: PartyContext) -> PublicKey:
    """A guest waits for the Host's boosting key and checks its size and mode against the job."""
    body = ctx.channel.expect_body(
        PublicKeyMessage, {ctx.job.host}, 2 * ctx.job.timeout_seconds, patient=True
    )
    key = PublicKey.from_n(body.n, body.h_s)
    if key.bits < ctx.job.key_bits or key.obfuscation != ctx.job.obfuscation:
        raise ProtocolError(
            f"the host sent a {key.bits}-bit {key.obfuscation} key; the job asks for "
            f"{ctx.job.key_bits} bits, {ctx.job.obfuscation}"
        )
    host = ctx.job.host
    check_key(key.n, body.proof, session=ctx.job.session, kind=Kind.PUBLIC_KEY, sender=host)
    return key


def wait_seconds(job: JobConfig) -> float:
    """How long the Server waits for the Host's finish: a timeout per level of every tree."""
    return job.timeout_seconds * (job.model.trees + 1) * (job.model.depth + 3)
