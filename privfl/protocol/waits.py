"""What a waiting party says about peers whose connection never came up.

A peer that failed before it could connect (bad data, its port taken, a key that
does not match) and could not tell us so is, to us, only a connection that never
came up. While we wait for anything, the terminal hears which peers those are,
within seconds and then every so often; when the wait gives up, its error names
them, not the connected peers that were merely waiting too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from privfl.errors import PeerUnavailable
from privfl.protocol.liveness import unproven_message

log = logging.getLogger("privfl.channel")

NOTICE_FIRST_SECONDS = 5.0  # a peer starting a moment after us is not worth a notice
NOTICE_EVERY_SECONDS = 15.0


def unconnected_of(transport: object) -> dict[str, str]:
    """Peers whose connection never came up, with their endpoints ({} if it cannot tell)."""
    unconnected: Callable[[], dict[str, str]] | None = getattr(transport, "unconnected_peers", None)
    return unconnected() if unconnected is not None else {}


def check_unproven(owner: str, transport: object) -> None:
    """PeerUnavailable for a peer whose endpoint fails every CURVE handshake (liveness.py);
    nothing where the transport cannot tell (the relay says who is up instead)."""
    unproven: Callable[[], dict[str, tuple[str, bool]]] | None = getattr(
        transport, "unproven_peers", None
    )
    failing = unproven() if unproven is not None else {}
    if failing:
        raise PeerUnavailable(unproven_message(owner, failing))


class UnconnectedNotices:
    """Warns (on the terminal too) about each never-connected peer during one wait."""

    def __init__(self, transport: object, limit: float) -> None:
        self._transport = transport
        self._limit = limit
        self._began = time.monotonic()
        self._next = self._began + NOTICE_FIRST_SECONDS

    def tick(self) -> None:
        """Say which peers have no connection yet, if a notice is due."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + NOTICE_EVERY_SECONDS
        for peer, endpoint in sorted(unconnected_of(self._transport).items()):
            log.warning(
                "waiting for %s %s: no connection yet (%.0f s; giving up after %.0f s)",
                peer,
                at(endpoint),
                now - self._began,
                self._limit,
            )


def never_connected_message(owner: str, unconnected: dict[str, str], waited: float) -> str:
    """The one-line error of a wait that ended with peers that never connected."""
    names = ", ".join(sorted(unconnected))
    where = ", ".join(f"{peer} {at(endpoint)}" for peer, endpoint in sorted(unconnected.items()))
    if all(e.startswith("via the relay") for e in unconnected.values()):
        return (
            f"{owner} gave up after {waited:g} s: {names} never reached the relay ({where}); "
            "the problem is between them and the relay, not here: their own terminal says "
            "why (a firewall that blocks outbound TCP to the relay, a wrong relay.key, or "
            "not started)"
        )
    return (
        f"{owner} gave up after {waited:g} s: {names} never connected (no connection to "
        f"{where} came up); check that it is running (its own terminal says why it "
        "stopped), that its endpoint is right and that it allow-lists our public key"
    )


def at(endpoint: str) -> str:
    """``at tcp://h:p`` for an address; a phrase (``via the relay at …``) as it is."""
    return endpoint if endpoint.startswith("via ") else f"at {endpoint}"
