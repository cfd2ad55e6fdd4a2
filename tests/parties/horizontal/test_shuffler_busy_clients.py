"""The Shuffler's window counts from the round's first report, so busy clients are not absent.

A client host on a loaded machine can take longer to train than the whole adaptive
window (expected × slot seconds). Before, the window's clock started when the
aggregator opened it, so such a round closed with no report and the run stopped
("round 1: only 0 valid report(s)"). The clock now starts at the first admitted
report, and the job's round timeout bounds the wait for it.
"""

from __future__ import annotations

import secrets
import threading

import numpy as np

from privfl.crypto.sealing import new_report_key
from privfl.parties.horizontal import shuffler
from privfl.parties.horizontal.aggregator import client_tokens
from privfl.parties.horizontal.client import seal_report
from privfl.parties.horizontal.integrity import round_digest
from privfl.protocol.channel import Channel
from privfl.protocol.hfl_messages import TOKEN_BYTES, RoundStart, ShuffleWindow
from privfl.protocol.memory import InMemoryHub

SESSION, ROUND, DIMS = "busy-clients", 1, 4
ASKED = {"clients-1": [0, 1, 2], "clients-2": [3, 4, 5]}


def _round() -> tuple[dict[str, RoundStart], ShuffleWindow]:
    tokens, digests, caps = client_tokens(ASKED)
    _, key = new_report_key()
    token = secrets.token_bytes(TOKEN_BYTES)
    weights, indices = np.zeros(DIMS, np.float32), np.arange(2, dtype=np.int64)
    starts = {
        host: RoundStart(ROUND, weights, np.array(ids, np.int64), indices, token, key, tokens[host])
        for host, ids in ASKED.items()
    }
    digest = round_digest(SESSION, ROUND, token, key, weights, indices)
    # a window of 6 × 0.01 s: far shorter than any client's local training
    window = ShuffleWindow(ROUND, 6, 6, 1.0, 0.01, weights, key, digests, caps, digest)
    return starts, window


def _report(hub: InMemoryHub, starts: dict[str, RoundStart], go: threading.Event) -> None:
    go.wait()
    for host, start in starts.items():
        channel = Channel(hub.transport(host), session=SESSION, timeout=30.0)
        for i in range(len(start.selected)):
            channel.send("shuffler", seal_report(SESSION, start, i, np.ones(DIMS)), ROUND)


def _collect(first_wait: float, clients_late: bool) -> list[bytes]:
    """The real collect over reports that busy clients send 50 windows in, or after it closed."""
    hub = InMemoryHub(record=False)
    inbox = Channel(hub.transport("shuffler"), session=SESSION, timeout=30.0)
    starts, window = _round()
    go = threading.Event()
    sender = threading.Thread(target=_report, args=(hub, starts, go))
    sender.start()
    timer = threading.Timer(0.5, go.set)  # the clients report 50 windows after it opened
    if not clients_late:
        timer.start()
    arrived = shuffler.collect(inbox, list(ASKED), window, first_wait=first_wait)
    go.set()  # late clients report only after that window closed
    sender.join()
    timer.cancel()
    return arrived


def test_clients_slower_than_the_window_are_all_collected() -> None:
    assert len(_collect(first_wait=120.0, clients_late=False)) == 6


def test_leaky_arm_a_window_timed_from_its_opening_closes_before_busy_clients() -> None:
    assert _collect(first_wait=0.0, clients_late=True) == []
