"""A party's transport from the job: direct sockets, the relay, or both (config/relay.py).

Every role of both modes opens its transport here, so a relayed site needs nothing
above the transport: the channel, the reliable layer and the protocol stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from privfl.config.core import JobFile
from privfl.config.relay import RELAY_NAME, relayed_peers
from privfl.errors import ConfigError
from privfl.parties.session import keyring
from privfl.protocol.keys import PUBLIC_SUFFIX, KeyRing, load_public_key
from privfl.protocol.liveness import DEFAULT_GRACE_SECONDS
from privfl.protocol.relayed import RelayedTransport
from privfl.protocol.routed import Direct, RoutedTransport
from privfl.protocol.transport import Listener, Outbound, ZmqTransport

Transport = Direct | RelayedTransport | RoutedTransport
D = TypeVar("D", ZmqTransport, Outbound, Listener)


def seal_context(job: JobFile[Any]) -> bytes:
    """What every seal of the run binds: the session id and the job fingerprint."""
    return job.session.encode() + b"\0" + job.fingerprint().encode()


def relay_key(job: JobFile[Any]) -> bytes:
    """The relay's public key: ``[relay] public_key``, else the key folder's relay.key."""
    if job.relay.public_key:
        return job.relay.public_key.encode()
    path = job.keys_path() / f"{RELAY_NAME}{PUBLIC_SUFFIX}"
    if not path.exists():  # generating one would make a key no relay holds: import it
        raise ConfigError(
            f"the relay's public key {path} is missing: ask the relay operator for their "
            f"{RELAY_NAME}{PUBLIC_SUFFIX} (from the kit `privfl relay` runs from) and put it "
            f"in {path.parent}, or set [relay] public_key in the job; do not generate one, "
            "a key made here is not the relay's"
        )
    return load_public_key(path)


def open_relayed(
    job: JobFile[Any],
    ring: KeyRing,
    *,
    send_timeout: float = 30.0,
    grace: float,
    watch: Collection[str] | None = None,
) -> RelayedTransport:
    """``ring.name``'s connection to the relay, reaching the peers of ``ring``."""
    relay = job.relay
    return RelayedTransport(
        ring.name,
        relay.endpoint,
        relay_key(job),
        ring,
        context=seal_context(job),
        socks_proxy=relay.socks_proxy,
        send_timeout=send_timeout,
        grace=grace,
        watch=watch,
    )


def open_links(
    job: JobFile[Any],
    name: str,
    peers: Collection[str],
    direct: Callable[[KeyRing], D],
    *,
    send_timeout: float = 30.0,
    grace: float = DEFAULT_GRACE_SECONDS,
    watch: Collection[str] | None = None,
) -> D | RelayedTransport | RoutedTransport:
    """The transport that reaches ``peers``: ``direct(ring)`` makes the direct part (its
    ring holds only the direct peers), the relay reaches the others. ``watch``: the
    relayed peers whose loss ends a wait (None: all), as an Outbound's ``watch``."""
    ring = keyring(job, name, peers)
    via = relayed_peers(job.parties, name, peers)
    if not via:
        return direct(ring)
    relayed = open_relayed(
        job, subring(ring, via), send_timeout=send_timeout, grace=grace, watch=watch
    )
    if via == set(peers):
        return relayed
    try:
        return RoutedTransport(direct(subring(ring, set(peers) - via)), relayed, via)
    except BaseException:
        relayed.close()
        raise


def subring(ring: KeyRing, peers: Collection[str]) -> KeyRing:
    """``ring`` allowing only ``peers``."""
    keys: Mapping[str, bytes] = {p: k for p, k in ring.peers.items() if p in peers}
    return KeyRing(ring.name, ring.public, ring.secret, keys)
