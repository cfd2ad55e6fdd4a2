"""The row commitment: a digest of a party's ordered training and test row ids.

Every data-holding party puts it in its Hello; the Host and the Server compare them,
so parties whose rows do not line up (another PSI result, another split) stop before
the first batch instead of training on misaligned rows. Rows matched by id (PSI)
are named by their id; rows aligned by position by their 0-based position in the
file (or the demo table) as a decimal string. See docs/protocol.md §2.3.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence

DOMAIN = b"privfl-rows-v1\x00"


def _strings(values: Sequence[str]) -> Iterable[bytes]:
    yield struct.pack(">Q", len(values))
    for value in values:
        raw = value.encode("utf-8")
        yield struct.pack(">I", len(raw))
        yield raw


def row_commitment(session: str, train_ids: Sequence[str], test_ids: Sequence[str]) -> str:
    """SHA-256 (hex) of the domain, the session and both ordered id lists, length-prefixed.

    ``DOMAIN ‖ u32(len(session)) ‖ session ‖ u64(#train) ‖ (u32(len(id)) ‖ id)… ‖
    u64(#test) ‖ (u32(len(id)) ‖ id)…``, big-endian lengths, UTF-8 strings.
    """
    digest = hashlib.sha256(DOMAIN)
    raw = session.encode("utf-8")
    digest.update(struct.pack(">I", len(raw)) + raw)
    for ids in (train_ids, test_ids):
        for part in _strings(ids):
            digest.update(part)
    return digest.hexdigest()


def positions(indices: Iterable[int]) -> tuple[str, ...]:
    """Row ids of position-aligned rows: their 0-based positions as decimal strings."""
    return tuple(str(int(i)) for i in indices)
