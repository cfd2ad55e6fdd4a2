"""Zero-sum masks between guests: one guest's vector alone is uniform mod n, the sum is not masked.

With two or more guests the Host may decrypt only sums over guests (docs/security.md,
*Server decryptions*). It cannot be made to pack its requests honestly, so each guest
adds to every plaintext it sends the Host a mask ``M_g`` uniform mod n, drawn so that
``Σ_g M_g = 0 mod n``: the Host's sums are the same residues as before, bit for bit,
and whatever it decrypts of one guest's ciphertexts (or of any combination that is not
the plain sum over guests) is uniform.

The masks are pairwise, as in secure aggregation: the Server draws one 32-byte seed per
pair of guests from the OS CSPRNG and sends each guest its seeds inside its own
``public_key`` (docs/protocol.md §6.1), and guest ``g`` adds, for every other guest ``h``,
``+PRF(s_gh)`` if ``g`` comes first in the job's guest order and ``−PRF(s_gh)`` if ``h``
does. A guest that colludes with the Host removes only the pairs it is part of: the
others' masks still hide them beyond their sum. ``PRF`` is SHAKE-256 over the seed,
the session and a label naming the message, epoch and batch (or split), read as
``n``'s length plus 128 bits per value and reduced mod n (statistically uniform); the
stream position is the plaintext's index, so no mask is used twice in a run. One
guest holds no seed and adds nothing: there is no sum to hide it behind.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

SEED_BYTES = 32
DOMAIN = b"privfl-guest-mask\0"
SPARE_BITS = 128  # statistical distance of a reduced value from uniform: < 2^-128


def draw_seeds(guests: Sequence[str]) -> dict[tuple[str, str], bytes]:
    """One seed per pair of guests, ``(first, second)`` in job order, from the OS CSPRNG."""
    return {
        (a, b): secrets.token_bytes(SEED_BYTES)
        for i, a in enumerate(guests)
        for b in guests[i + 1 :]
    }


def seeds_of(guest: str, pairs: Mapping[tuple[str, str], bytes]) -> dict[str, bytes]:
    """The seeds ``guest`` holds, by the other guest of each pair."""
    out: dict[str, bytes] = {}
    for (a, b), seed in pairs.items():
        if guest == a:
            out[b] = seed
        elif guest == b:
            out[a] = seed
    return out


def stream(seed: bytes, session: str, label: str, n: int, count: int) -> list[int]:
    """``count`` values uniform mod ``n``: ``SHAKE-256(DOMAIN ‖ seed ‖ session ‖ 0 ‖ label)``."""
    width = (n.bit_length() + SPARE_BITS + 7) // 8
    shake = hashlib.shake_256(DOMAIN + seed + session.encode() + b"\0" + label.encode())
    data = shake.digest(width * count)
    return [int.from_bytes(data[i * width : (i + 1) * width], "big") % n for i in range(count)]


def label(message: str, epoch: int, part: int | str) -> str:
    """What a mask is for: the message (``forward``, ``scores``…), epoch and batch or split."""
    return f"{message}/{epoch}/{part}"


@dataclass(frozen=True)
class GuestMasks:
    """One guest's pairwise seeds and the masks they give (none with one guest)."""

    session: str
    me: str
    guests: tuple[str, ...]  # the job's guests, in job order: who adds, who subtracts
    seeds: Mapping[str, bytes] = field(default_factory=dict)  # by the other guest
    spent: set[str] = field(default_factory=set, compare=False)  # labels :meth:`add` used

    def __post_init__(self) -> None:
        others = set(self.guests) - {self.me}
        if set(self.seeds) != others or any(len(s) != SEED_BYTES for s in self.seeds.values()):
            raise ValueError(f"{self.me} needs one {SEED_BYTES}-byte seed per other guest")

    def masks(self, n: int, what: str, count: int) -> list[int]:
        """``M_g`` for ``count`` plaintexts labelled ``what``: Σ_g over guests is 0 mod n."""
        total = [0] * count
        mine = self.guests.index(self.me)
        for peer, seed in self.seeds.items():
            sign = 1 if mine < self.guests.index(peer) else -1
            pair = sorted((self.me, peer), key=self.guests.index)
            values = stream(seed, self.session, f"{pair[0]}\0{pair[1]}\0{what}", n, count)
            total = [(t + sign * v) % n for t, v in zip(total, values, strict=True)]
        return total

    def add(self, n: int, what: str, plain: Sequence[int]) -> list[int]:
        """``plain + M_g`` mod n, element by element (unchanged with one guest).

        Each label masks one vector only: two vectors under the same masks would give
        their difference away, so a label used before is refused (ValueError)."""
        if not self.seeds:
            return [int(p) % n for p in plain]
        if what in self.spent:
            raise ValueError(f"the mask {what!r} was used before")
        self.spent.add(what)
        masks = self.masks(n, what, len(plain))
        return [(int(p) + m) % n for p, m in zip(plain, masks, strict=True)]


def encode_seeds(seeds: Mapping[str, bytes]) -> str:
    """``guest=hex,…`` in the given order: the wire form of ``public_key.mask_seeds``."""
    return ",".join(f"{name}={seed.hex()}" for name, seed in seeds.items())


def decode_seeds(text: str) -> dict[str, bytes]:
    """The inverse of :func:`encode_seeds` (the message class has checked the form)."""
    return {
        k: bytes.fromhex(v) for k, v in (item.split("=", 1) for item in text.split(",") if item)
    }
