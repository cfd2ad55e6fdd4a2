"""The horizontal roles' transport and channel: a listener (aggregator, Shuffler) or outbound
connections (client hosts), and receiving with the envelope's round checked against the body's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from pathlib import Path

from privfl.config.horizontal import HflJob
from privfl.errors import PeerUnavailable, ProtocolError
from privfl.parties.audit import AuditLog, open_audit_log
from privfl.parties.files import private_dir
from privfl.parties.links import Transport as Links
from privfl.parties.links import open_links
from privfl.protocol.channel import Channel, Envelope
from privfl.protocol.keys import KeyRing
from privfl.protocol.messages import Kind
from privfl.protocol.transport import Listener, Outbound
from privfl.protocol.waits import UnconnectedNotices, check_unproven, never_connected_message

CONNECT_POLL_SECONDS = 0.05

log = logging.getLogger("privfl.hfl")


def open_listener(job: HflJob, name: str, peers: Collection[str]) -> Links:
    """The aggregator's or Shuffler's way in: a listener, or the relay (parties/links.py)."""

    def direct(ring: KeyRing) -> Listener:
        return Listener(name, job.party(name).endpoint, ring)

    # Like a Listener, it ends no wait when a client host leaves (only the relay's loss does).
    return open_links(job, name, peers, direct, watch=())


def open_outbound(job: HflJob, name: str, targets: Collection[str]) -> Links:
    """Connections out to the listeners in ``targets`` (or to the relay, for relayed ones)."""
    # Only the aggregator's loss ends the job; the Shuffler may leave first at the end.
    aggregators = [t for t in targets if job.party(t).role == "aggregator"]

    def direct(ring: KeyRing) -> Outbound:
        endpoints = {t: job.party(t).endpoint for t in ring.peers}
        return Outbound(name, endpoints, ring, watch=[a for a in aggregators if a in ring.peers])

    return open_links(job, name, targets, direct, watch=aggregators)


def wait_until_connected(job: HflJob, transport: Links, peer: str) -> None:
    """Wait, up to the job's timeout, for our connection to ``peer`` (the aggregator).

    Sites start their processes by hand, in any order: a client host or Shuffler
    started before the aggregator waits for it, saying so on the terminal, instead of
    failing its first send after a few seconds.
    """
    if isinstance(transport, Listener):  # it connects to nobody: others come to it
        return
    limit = job.config.timeout_seconds
    notices = UnconnectedNotices(transport, limit)
    began = time.monotonic()
    while not transport.connected(peer):
        check_unproven(transport.name, transport)
        waited = time.monotonic() - began
        if waited >= limit:
            endpoint = {peer: job.party(peer).endpoint}
            raise PeerUnavailable(never_connected_message(transport.name, endpoint, limit))
        notices.tick()
        time.sleep(CONNECT_POLL_SECONDS)


def make_channel(
    job: HflJob, transport: Links, audit: AuditLog | None = None, peers: Collection[str] = ()
) -> Channel:
    """The role's channel; with ``audit``, every message to or from ``peers`` is logged
    there and the log's chain heads go to them (parties/audit.py)."""
    channel = Channel(
        transport, session=job.session, timeout=job.config.timeout_seconds, observer=audit
    )
    if audit is not None:
        audit.attach(channel, peers)
    return channel


def open_hfl_audit(job: HflJob, name: str, out: Path, peers: Collection[str]) -> AuditLog:
    """The role's ``audit.jsonl`` in ``out`` for this session, with link keys to ``peers``."""
    private_dir(out)
    return open_audit_log(job, name, out, peers)


def expect_round(
    channel: Channel, kinds: set[Kind], senders: Collection[str], timeout: float
) -> Envelope:
    """Like Channel.expect, also checking that the body's round matches the envelope's."""
    env = channel.expect(kinds, senders, timeout)
    if getattr(env.body, "round", env.header.round) != env.header.round:
        raise ProtocolError(f"{env.sender}: envelope round differs from the body's")
    return env


def try_expect(
    channel: Channel, kinds: set[Kind], senders: Collection[str], timeout: float
) -> Envelope | None:
    """expect_round, or None when nothing came within ``timeout`` (a deadline, not an error)."""
    if timeout <= 0:
        return None
    try:
        return expect_round(channel, kinds, senders, timeout)
    except PeerUnavailable:
        return None
    except ProtocolError as exc:
        log.warning("refused a message: %s", exc)
        return None
