"""A flooding client host and a replaying Shuffler against the real admission and opening code.

A host that sends more reports than it has clients could outweigh the others or,
by flooding the window, isolate one victim's report (voiding the central ε); a
Shuffler that repeats reports does the same. The Shuffler admits one report per
single-use client token and at most the host's share; the aggregator refuses a
batch that repeats a report or opens more reports than it asked clients.
"""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from privfl.crypto.sealing import new_report_key, seal, sealed_size
from privfl.errors import ProtocolError
from privfl.parties.horizontal.aggregator import client_tokens, open_batch
from privfl.parties.horizontal.shuffler import Admission
from privfl.protocol.hfl_messages import TOKEN_BYTES, Shuffled, ShuffleWindow

SESSION, ROUND, DIMS = "s", 3, 6


def _window(asked: dict[str, list[int]], public: bytes) -> tuple[dict[str, bytes], ShuffleWindow]:
    tokens, digests, caps = client_tokens(asked)
    zeros = np.zeros(DIMS, np.float32)
    return tokens, ShuffleWindow(ROUND, 3, 1, 1.0, 0.1, zeros, public, digests, caps)


def test_a_flooding_host_gets_no_more_reports_in_than_it_has_clients() -> None:
    tokens, window = _window({"clients-1": [0, 1], "clients-2": [5]}, new_report_key()[1])
    admission = Admission.of(window)
    mine = [tokens["clients-1"][i : i + TOKEN_BYTES] for i in (0, TOKEN_BYTES)]
    attempts = [*mine, *mine, secrets.token_bytes(TOKEN_BYTES), tokens["clients-2"]]
    admitted = [t for t in attempts if admission.refuse("clients-1", t) is None]
    assert admitted == mine  # reuse, forged and the other host's token: all refused
    assert admission.refuse("clients-2", tokens["clients-2"]) is None  # the victim still gets in


def _batch(blobs: list[bytes]) -> Shuffled:
    return Shuffled(ROUND, len(blobs), sealed_size(DIMS), b"".join(blobs), 0)


def test_a_replaying_shuffler_is_refused() -> None:
    private, public = new_report_key()
    token = secrets.token_bytes(TOKEN_BYTES)
    honest = seal(np.ones(DIMS, np.float32), token, public, SESSION, ROUND)
    other = seal(np.zeros(DIMS, np.float32), token, public, SESSION, ROUND)
    valid, _ = open_batch(_batch([honest, other]), private, token, SESSION, ROUND, DIMS, 2, 1)
    assert len(valid) == 2  # the honest batch opens
    with pytest.raises(ProtocolError, match="replayed"):
        open_batch(_batch([honest, other, honest]), private, token, SESSION, ROUND, DIMS, 3, 1)
    old = seal(np.ones(DIMS, np.float32), token, public, SESSION, ROUND - 1)
    valid, dropped = open_batch(_batch([honest, old]), private, token, SESSION, ROUND, DIMS, 2, 1)
    assert len(valid) == 1 and dropped == 1  # last round's report does not open this round


def test_more_valid_reports_than_asked_clients_are_refused() -> None:
    private, public = new_report_key()
    token = secrets.token_bytes(TOKEN_BYTES)
    extra = [seal(np.ones(DIMS, np.float32), token, public, SESSION, ROUND) for _ in range(3)]
    with pytest.raises(ProtocolError, match="2 asked"):
        open_batch(_batch(extra), private, token, SESSION, ROUND, DIMS, 2, 3)
    with pytest.raises(ProtocolError, match="batch refused"):
        open_batch(_batch(extra), private, token, SESSION, ROUND, DIMS, 2, 1)
