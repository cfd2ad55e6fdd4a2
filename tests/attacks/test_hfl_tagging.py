"""A tagging aggregator gives each client host its own round, to read whose report is whose.

The Shuffler hides who sent which report only if every report of a round looks
alike to the aggregator. An aggregator that gives each host its own round token
(or report key) opens every shuffled report with each token (or key) in turn and
attributes it to its host: 10 of 10 before this check. Now each host sends, with
every sealed report, the digest of the ``round_start`` it was given; the
aggregator commits to that digest in the Shuffler's window; the real Shuffler
(``collect``, over an in-memory transport) stops the run on any difference. The
leaky arm takes the check out and runs the attribution. The shuffle-model ε
states that it rests on this (and on an honest Shuffler).
"""

from __future__ import annotations

import secrets
from dataclasses import replace

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privfl.config.horizontal import HflConfig
from privfl.crypto.sealing import new_report_key, open_sealed
from privfl.errors import ProtocolError
from privfl.parties.horizontal import shuffler
from privfl.parties.horizontal.aggregator import client_tokens
from privfl.parties.horizontal.client import seal_report
from privfl.parties.horizontal.integrity import round_digest
from privfl.parties.horizontal.ledger import PrivacyLedger
from privfl.protocol.channel import Channel
from privfl.protocol.hfl_messages import TOKEN_BYTES, RoundStart, ShuffleWindow
from privfl.protocol.memory import InMemoryHub

SESSION, ROUND, DIMS = "tagging-session", 2, 8
ASKED = {"clients-1": [0, 1, 2, 3, 4], "clients-2": [5, 6, 7, 8, 9]}
WEIGHTS = np.linspace(-1, 1, DIMS, dtype=np.float32)
INDICES = np.arange(2, dtype=np.int64)
Starts = dict[str, RoundStart]
Openers = dict[str, tuple[X25519PrivateKey, bytes]]  # what the aggregator opens each host's with


def _rounds(tag: str) -> tuple[Starts, ShuffleWindow, Openers]:
    """The aggregator's round_starts (tagged by ``tag`` unless "none"), its window, its secrets."""
    tokens, digests, caps = client_tokens(ASKED)
    keys = {h: new_report_key() for h in ASKED}
    shared_token, (shared_private, shared_key) = secrets.token_bytes(TOKEN_BYTES), keys["clients-1"]
    starts: Starts = {}
    opener: Openers = {}
    for n, (host, ids) in enumerate(ASKED.items()):
        token = secrets.token_bytes(TOKEN_BYTES) if tag == "token" else shared_token
        private, key = keys[host] if tag == "report_key" else (shared_private, shared_key)
        weights = WEIGHTS + np.float32(n) if tag == "model" else WEIGHTS
        starts[host] = RoundStart(
            ROUND, weights, np.array(ids, np.int64), INDICES, token, key, tokens[host]
        )
        opener[host] = (private, token)
    first = starts["clients-1"]
    commitment = round_digest(SESSION, ROUND, first.token, first.report_key, WEIGHTS, INDICES)
    dummy = np.zeros(DIMS, np.float32)
    window = ShuffleWindow(
        ROUND, 10, 10, 1.0, 5.0, dummy, first.report_key, digests, caps, commitment
    )
    return starts, window, opener


def _shuffle(starts: Starts, window: ShuffleWindow) -> list[bytes]:
    """Honest hosts seal one report per client and send it; the real Shuffler collects."""
    hub = InMemoryHub(record=False)
    inbox = Channel(hub.transport("shuffler"), session=SESSION, timeout=30.0)
    for host, start in starts.items():
        channel = Channel(hub.transport(host), session=SESSION, timeout=30.0)
        for i in range(len(start.selected)):
            report = np.full(DIMS, float(start.selected[i]), np.float32)
            channel.send("shuffler", seal_report(SESSION, start, i, report), ROUND)
    arrived = shuffler.collect(inbox, list(starts), window)
    batch, _ = shuffler.pad_and_permute(arrived, window, SESSION, secrets.SystemRandom())
    return batch


def _attribute(batch: list[bytes], opener: Openers) -> int:
    """The aggregator's attack: a report that opens with one host's secrets only is that host's.

    Returns how many reports it attributes correctly.
    """
    hits = 0
    for blob in batch:
        opened = {
            h: open_sealed(blob, *secret, SESSION, ROUND, DIMS) for h, secret in opener.items()
        }
        owners = [(h, r) for h, r in opened.items() if r is not None]
        hits += len(owners) == 1 and int(owners[0][1][0]) in ASKED[owners[0][0]]
    return hits


def test_an_honest_aggregator_passes_and_its_shuffle_hides_the_hosts() -> None:
    starts, window, opener = _rounds("none")
    batch = _shuffle(starts, window)
    assert len(batch) == 10
    assert _attribute(batch, opener) == 0  # every report opens with both hosts' secrets


@pytest.mark.parametrize("tag", ["token", "report_key", "model"])
def test_a_tagging_aggregator_is_detected_and_the_run_stops(tag: str) -> None:
    starts, window, _ = _rounds(tag)
    with pytest.raises(ProtocolError, match="clients-2 was given another round token"):
        _shuffle(starts, window)


def test_a_window_without_a_commitment_is_refused() -> None:
    starts, window, _ = _rounds("none")
    with pytest.raises(ProtocolError, match="another round token, report key or model"):
        _shuffle(starts, replace(window, round_digest=None))


@pytest.mark.parametrize("tag", ["token", "report_key"])
def test_leaky_without_the_check_every_report_is_attributed(
    monkeypatch: pytest.MonkeyPatch, tag: str
) -> None:
    monkeypatch.setattr(shuffler, "check_round_digest", lambda *args: None)
    starts, window, opener = _rounds(tag)
    batch = _shuffle(starts, window)
    assert _attribute(batch, opener) == 10  # 10 of 10 reports traced to their host


def test_the_shuffle_model_epsilon_names_the_aggregator_among_its_assumptions() -> None:
    config = HflConfig(mechanism="pnpm", epsilon=1.0, shuffler=True, participation=0.5)
    ledger = PrivacyLedger(config, dims=10, k=1)
    ledger.record([0, 1], None, 2)
    why = ledger.snapshot()["epsilon_assumptions"]
    for figure in ("epsilon_central_round", "epsilon_total"):
        assert "an aggregator that does not tag client hosts" in why[figure], figure
        assert "honest Shuffler" in why[figure], figure
    assert any("does not tag client hosts" in line for line in ledger.lines())
