"""A party that fails before its transport is up still tells the peers it can reach.

Reading the data or binding the inbox can fail (a bad CSV cell, a port in use)
before :func:`~privfl.parties.session.run_role` has a channel to abort on. The
peers would then hear nothing until their timeout. Instead the party connects out
to every peer — over DEALERs only, which need no port of ours, or through the relay —
and sends each one
that answers within ``REACH_SECONDS`` an Abort carrying its one-line error. The
Abort is authenticated like any message (CURVE with our key pair), so a party
whose own keys are unusable cannot send one: its peers name it when they give up,
as the peer whose connection never came up (protocol/waits.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from privfl.config.vertical import JobConfig
from privfl.errors import PrivflError
from privfl.parties.audit import FILE_NAME as AUDIT_FILE
from privfl.parties.audit import AuditLog
from privfl.parties.links import open_links
from privfl.parties.session import log_stop
from privfl.protocol.channel import Channel
from privfl.protocol.keys import KeyRing
from privfl.protocol.relayed import RelayedTransport
from privfl.protocol.reliable import ReliableTransport
from privfl.protocol.routed import RoutedTransport
from privfl.protocol.transport import Outbound

log = logging.getLogger("privfl.party")

REACH_SECONDS = 10.0  # how long a failed party tries to reach peers that are not up yet
POLL_SECONDS = 0.05


DATA_FAILED = "could not read its data (its own terminal says why)"


@contextmanager
def telling_peers(
    job: JobConfig, name: str, out: Path | None, reason: str | None = None
) -> Iterator[None]:
    """Run a start-up step; if it fails, log why, tell the peers we can reach, re-raise.

    ``reason``: what the peers are told instead of the error's own text, for a step
    whose errors quote local data (a CSV cell must not leave the site in an Abort).
    Ctrl-C is told as such.
    """
    try:
        yield
    except BaseException as exc:
        log_stop(name, exc)
        told = exc if reason is None or isinstance(exc, KeyboardInterrupt) else PrivflError(reason)
        abort_outbound(job, name, told, out)
        raise


def abort_outbound(
    job: JobConfig, name: str, error: BaseException, out: Path | None = None
) -> list[str]:
    """Send our Abort to every peer that connects within ``REACH_SECONDS``; return them.

    ``out``: our folder, whose audit log records the Aborts that left.
    """
    peers = {n: p.endpoint for n, p in job.parties.items() if n != name}

    def direct(ring: KeyRing) -> Outbound:
        return Outbound(name, {p: peers[p] for p in ring.peers}, ring, watch=ring.peers)

    try:
        sockets = open_links(job, name, peers, direct)
    except PrivflError as exc:  # no usable key pair: no peer would accept our Abort
        log.info("could not tell the peers that we stopped: %s", exc)
        return []
    transport = ReliableTransport(sockets)
    audit = AuditLog(out / AUDIT_FILE) if out is not None and out.is_dir() else None
    channel = Channel(transport, session=job.session, timeout=REACH_SECONDS, observer=audit)
    try:
        told = _tell_as_they_connect(sockets, channel, sorted(peers), error)
    finally:
        transport.close()
    missed = sorted(set(peers) - set(told))
    log.info("told %s that we stopped%s", ", ".join(told) or "no peer", _missed(missed))
    return told


def _tell_as_they_connect(
    sockets: Outbound | RelayedTransport | RoutedTransport,
    channel: Channel,
    peers: list[str],
    error: BaseException,
) -> list[str]:
    """Abort each peer as soon as its connection is up, until all are told or time is up."""
    told: list[str] = []
    deadline = time.monotonic() + REACH_SECONDS
    while len(told) < len(peers) and time.monotonic() < deadline:
        for peer in peers:
            if peer not in told and sockets.connected(peer):
                channel.abort([peer], error)
                told.append(peer)
        time.sleep(POLL_SECONDS)
    return told


def _missed(missed: list[str]) -> str:
    return f"; {', '.join(missed)} did not connect within {REACH_SECONDS:g} s" if missed else ""
