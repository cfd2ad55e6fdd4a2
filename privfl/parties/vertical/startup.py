"""A party that fails before its transport is up still tells the peers it can reach.

Reading the data or binding the inbox can fail (a bad CSV cell, a port in use)
before :func:`~privfl.parties.session.run_role` has a channel to abort on. The
peers would then hear nothing until their timeout. Instead the party connects out
to every peer — over DEALERs only, which need no port of ours, or through the relay —
and sends each one that answers within ``REACH_SECONDS`` an Abort carrying its one-line error. The
Abort is authenticated like any message (CURVE with our key pair), so a party
whose own keys are unusable cannot send one. It listens at its endpoint for a few
seconds under a key pair nobody knows instead: the peers' connections fail their
CURVE handshake there, which tells them that it cannot prove its key
(protocol/liveness.py), and they stop at once, naming it. A peer that starts after
that window names it when it gives up, as the peer that never connected.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import zmq
from zmq.utils.monitor import recv_monitor_message

from privfl.config.vertical import JobConfig
from privfl.errors import PrivflError
from privfl.parties.audit import AuditLog, open_audit_log
from privfl.parties.links import open_links
from privfl.parties.session import log_stop
from privfl.protocol.channel import Channel
from privfl.protocol.keys import KeyRing
from privfl.protocol.liveness import UNPROVEN_AFTER
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
        show_now(exc)  # the user reads it at once, not after up to REACH_SECONDS of telling
        told = exc if reason is None or isinstance(exc, KeyboardInterrupt) else PrivflError(reason)
        abort_outbound(job, name, told, out)
        raise


def show_now(error: BaseException) -> None:
    """Print our one-line error before telling the peers, and mark it shown (the command
    line prints it only if not: cli/errors.py)."""
    if isinstance(error, PrivflError) and not getattr(error, "shown", False):
        print(f"privfl: error: {error}", file=sys.stderr, flush=True)
        error.shown = True  # type: ignore[attr-defined]


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
        if job.party(name).endpoint:  # a relayed party listens nowhere: peers time out
            show_unusable_key(job.party(name).endpoint, len(peers))
        return []
    transport = ReliableTransport(sockets)
    audit = open_audit(job, name, out) if out is not None and out.is_dir() else None
    channel = Channel(transport, session=job.session, timeout=REACH_SECONDS, observer=audit)
    try:
        told = _tell_as_they_connect(sockets, channel, sorted(peers), error)
    finally:
        transport.close()
        if audit is not None:
            audit.close("error")
    missed = sorted(set(peers) - set(told))
    log.info("told %s that we stopped%s", ", ".join(told) or "no peer", _missed(missed))
    return told


def show_unusable_key(endpoint: str, peers: int) -> None:
    """Listen at ``endpoint`` under a fresh key pair until the peers have tried us.

    Every peer's handshake fails (it expects the key the job lists), so it learns,
    within a second, that we cannot prove our key — no Abort could say so credibly.
    Nothing is accepted: a CURVE client gives up before it sends anything. Ends
    after ``REACH_SECONDS`` or once each peer has tried ``UNPROVEN_AFTER`` + 1 times.
    """
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    public, secret = zmq.curve_keypair()
    router.setsockopt(zmq.CURVE_SERVER, 1)
    router.setsockopt(zmq.CURVE_PUBLICKEY, public)
    router.setsockopt(zmq.CURVE_SECRETKEY, secret)
    monitor = router.get_monitor_socket(zmq.EVENT_ACCEPTED)
    try:
        router.bind(endpoint)
        tries, deadline = 0, time.monotonic() + REACH_SECONDS
        while tries < (UNPROVEN_AFTER + 1) * peers and time.monotonic() < deadline:
            if monitor.poll(round(POLL_SECONDS * 1000)):
                recv_monitor_message(monitor)
                tries += 1
        log.info("showed %d connection attempts that we cannot prove our key", tries)
    except zmq.ZMQError as exc:  # the port is taken: the peers find out at their timeout
        log.info("could not listen at %s to show the peers our key is unusable: %s", endpoint, exc)
    finally:
        router.disable_monitor()
        monitor.close(linger=0)
        router.close(linger=0)
        ctx.term()


def open_audit(job: JobConfig, name: str, out: Path) -> AuditLog:
    """Our audit log for this session, with a link key per peer from the job's CURVE keys."""
    return open_audit_log(job, name, out, [n for n in job.parties if n != name])


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
