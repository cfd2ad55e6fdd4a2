"""The audit log: one JSON line per message a party sends, receives or refuses — never the payload.

Each message line: ``time`` (UTC, ISO 8601), ``direction`` (sent / received / refused),
``peer``, ``kind``, ``session``, ``round``, ``msg_id``, ``size`` (bytes of all
frames), ``key_id``, ``hmac_sha256``: HMAC-SHA256 of the body frame (the payload)
under this party's audit key for this session, and ``link``: the digest of the whole
message that its sender and its receiver both record (:mod:`privfl.parties.audit_links`).
A refused message may have no readable header: its kind, round and id are null.

Why keyed: many payloads are low-entropy (a ``boost_split`` is four small
integers), so a plain sha256 of one is reversed by hashing every candidate. Each
session of a party draws a fresh 256-bit key from the OS CSPRNG and appends it,
with its ``key_id``, to ``audit-keys.jsonl`` next to the log (mode 0600, like every
run file): a reader of the log alone learns nothing about a payload, while the
party can still show which payload a line records (:func:`verify`), and two sites
can compare a message by disclosing that one session's key.

Why chained: every line also carries ``seq`` (its 0-based line number in the file)
and ``prev`` (the sha256 of the previous line's bytes; 64 zeros on the first line),
so an edited, deleted or moved line breaks the chain at the next one. Each session
opens with an ``opened`` line binding the party, the session and the job fingerprint,
and ends with a ``closed`` line, so a log cut after a session shows it
(:mod:`privfl.tools.audit` checks all of it).

Why anchored: a party can recompute its whole chain after rewriting every line (its
times, its ``hmac_sha256``), and the chain alone cannot tell. So each party sends each
peer the head of its chain (``audit_head``: ``seq`` lines so far and the sha256 of the
last) after its first message to that peer and every ANCHOR_EVERY messages after; the
peer records the head in its own chain (``anchor``). ``privfl audit verify`` then checks
every recorded head against the sender's log, so a rewrite of any anchored line is
caught with any one peer's log present. The head is authenticated by CURVE and by the
link digest both ends record, not by a signature: either end of the link could have
written it, so two logs that disagree show that one of them was rewritten, and a third
party's log tells which.

Why a closing exchange (:meth:`AuditLog.settle`): a head sent as a party stops, never
waited for, reached no peer once its peers had stopped reading, and the session's last
lines were then anchored nowhere. On an orderly end each party sends every peer it
wrote to a HEAD_DONE head and waits until each peer that sent it heads sent its own;
then, when no peer sends anything but heads any more, a HEAD_LAST head, and it waits
for each such peer's HEAD_LAST and for the link layer's ACK of its own (a peer ACKs
what its channel read, and its channel records what it reads). Every line before our
last HEAD_LAST is then anchored in a peer's log; what follows is HEAD_LAST heads sent
and received, which both ends record, and the closed line. A peer that stops (its
Abort, its connection lost past the grace) or the job's timeout ends the wait for it:
the verifier then names the lines its log does not anchor.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import threading
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from privfl.config.core import JobFile
from privfl.errors import PrivflError
from privfl.parties.audit_links import link_digest, link_keys
from privfl.parties.files import append_jsonl, open_private, private_dir
from privfl.protocol import codec
from privfl.protocol.messages import HEAD_DONE, HEAD_LAST, AuditHead, Header, Kind

log = logging.getLogger("privfl.audit")

FILE_NAME = "audit.jsonl"
KEYS_FILE = "audit-keys.jsonl"
KEY_BYTES = 32
GENESIS = "0" * 64  # the ``prev`` of a log's first line
ANCHOR_EVERY = 8  # messages to a peer between two heads sent to it

# One chain per file and process: a start-up Abort's log may write the same file.
_CHAINS: dict[Path, _Chain] = {}
_CHAINS_LOCK = threading.Lock()


def digest(key: bytes, payload: bytes) -> str:
    """The payload's HMAC-SHA256 under the session's audit key (hex)."""
    return hmac.new(key, payload, hashlib.sha256).hexdigest()


def line_hash(line: str) -> str:
    """The sha256 (hex) of one log line as written, without its newline: the next ``prev``."""
    return hashlib.sha256(line.encode()).hexdigest()


class _Chain:
    """The next ``seq`` and ``prev`` of one file, read from the file whenever it changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.size = -1  # bytes of the file after our last line; -1: read it first
        self.seq, self.prev = 0, GENESIS  # set from the file before the first append
        self.cut = False  # the file ends inside a line (a crash while writing it)

    def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` with its ``seq`` and ``prev`` as the file's next line."""
        with self.lock:
            if self._size_now() != self.size:  # new to us, or written by another: read it
                self._read_tail()
            line = json.dumps({**record, "seq": self.seq, "prev": self.prev})
            with open_private(self.path, "a") as handle:
                # A cut line stays a line of its own (verify flags it), never glued to ours.
                handle.write(("\n" if self.cut else "") + line + "\n")
            self.seq, self.prev, self.cut = self.seq + 1, line_hash(line), False
            self.size = self._size_now()

    def head(self) -> tuple[int, str]:
        """How many lines the file has and the sha256 of the last (``prev`` of the next)."""
        with self.lock:
            if self._size_now() != self.size:
                self._read_tail()
            return self.seq, self.prev

    def _size_now(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def _read_tail(self) -> None:
        text = self.path.read_text() if self.path.exists() else ""
        lines = text.splitlines()
        self.seq = len(lines)
        self.prev = line_hash(lines[-1]) if lines else GENESIS
        self.cut = bool(text) and not text.endswith("\n")


def _chain(path: Path) -> _Chain:
    with _CHAINS_LOCK:
        key = path.resolve()
        if key not in _CHAINS:
            _CHAINS[key] = _Chain(key)
        return _CHAINS[key]


def _now(timespec: str = "microseconds") -> str:
    return datetime.now(UTC).isoformat(timespec=timespec)


class Teller(Protocol):
    """What sends our heads and waits for the peers' at the end: a Channel."""

    def tell(self, peer: str, body: AuditHead) -> None: ...

    def settle(self, done: Callable[[], bool], timeout: float | None = None) -> bool: ...

    def gone(self, peer: str) -> bool: ...

    def delivered(self, peer: str) -> bool: ...


class AuditLog:
    """Appends chained audit records to a file; usable as a Channel observer (thread-safe).

    ``links``: each peer's link key for this session (no entry: ``link`` is null).
    """

    def __init__(
        self,
        path: Path,
        *,
        party: str,
        session: str,
        job: str,
        links: Mapping[str, bytes] | None = None,
    ) -> None:
        self.path = path
        private_dir(path.parent)
        self.party, self.session = party, session
        self._links = dict(links or {})
        self._sent: dict[str, int] = {}  # messages sent to each peer, audit heads aside
        self._heard: dict[str, int] = {}  # each peer that sent us heads: the highest stage
        self._gone: set[str] = set()  # peers the closing exchange does not wait for
        self._channel: Teller | None = None
        self._channels: dict[str, Teller] = {}
        self._key = secrets.token_bytes(KEY_BYTES)  # this session's; never reused
        self.key_id = secrets.token_hex(8)
        append_jsonl(
            path.parent / KEYS_FILE,
            {"key_id": self.key_id, "key": self._key.hex(), "created": _now("seconds")},
        )
        self._chain = _chain(path)
        self._chain.append(
            {"time": _now(), "direction": "opened", "party": party, "session": session,
             "job": job, "key_id": self.key_id}
        )  # fmt: skip

    def __call__(
        self, direction: str, peer: str, header: Header | None, frames: list[bytes]
    ) -> None:
        """Record one message; ``frames[-1]`` is the payload that gets digested.

        A received ``audit_head`` also records the head it carries (``anchor``)."""
        link = self._links.get(peer)
        anchor = _anchor(header, frames) if direction != "refused" else None
        if anchor is not None and direction == "received":
            self._heard[peer] = max(self._heard.get(peer, 0), anchor.get("stage", 0))
        counted = header is not None and direction == "sent" and header.kind != Kind.AUDIT_HEAD
        if counted:
            self._sent[peer] = self._sent.get(peer, 0) + 1
        self._chain.append(
            {
                "time": _now(),
                "direction": direction,
                "peer": peer,
                "kind": str(header.kind) if header else None,
                "session": header.session if header else None,
                "round": header.round if header else None,
                "msg_id": header.msg_id if header else None,
                "size": sum(len(f) for f in frames),
                "key_id": self.key_id,
                "hmac_sha256": digest(self._key, frames[-1] if frames else b""),
                "link": link_digest(link, frames) if link is not None else None,
            }
            | ({"anchor": anchor} if anchor else {})
        )
        sent = self._sent.get(peer, 0)
        if counted and (sent == 1 or sent % ANCHOR_EVERY == 0):
            self._send_head(peer)  # after the line: the head covers this message too

    def head(self, stage: int = 0) -> AuditHead:
        """The chain's head now, to send a peer."""
        seq, prev = self._chain.head()
        return AuditHead(seq=seq, head=prev, stage=stage)

    def attach(self, channel: Teller, peers: Collection[str] | None = None) -> None:
        """Send our chain's head to ``peers`` (None: every peer) over ``channel``: after
        our first message to each, every ANCHOR_EVERY messages, and at :meth:`settle`.
        A party with two channels (the Shuffler) attaches each with its peers."""
        if peers is None:
            self._channel = channel
        else:
            self._channels.update(dict.fromkeys(peers, channel))

    def settle(self, *, gone: Collection[str] = (), timeout: float | None = None) -> list[str]:
        """The closing exchange, at the orderly end of our part of the session (module
        docstring): afterwards every peer still running has recorded our last head, and we
        each peer's. ``gone``: peers known to have stopped (not waited for); ``timeout``:
        each stage's window where a lost peer cannot be told (a listener's client hosts),
        else the job's timeout without progress. Returns the peers the wait gave up on:
        our lines after the heads they recorded are anchored nowhere."""
        self._gone = set(gone)
        for stage in (HEAD_DONE, HEAD_LAST):
            for peer in sorted(self._sent):
                self._send_head(peer, stage)
            for channel in self._all_channels():
                channel.settle(partial(self._settled, channel, stage), timeout)
        missing = [
            peer
            for channel in self._all_channels()
            for peer in self._waited_on(channel)
            if self._heard[peer] < HEAD_LAST or not channel.delivered(peer)
        ]
        if missing:
            log.warning(
                "%s: %s did not record our last audit head: `privfl audit verify` will name "
                "the lines of our log that no peer anchors",
                self.party,
                ", ".join(sorted(missing)),
            )
        return sorted(missing)

    def _all_channels(self) -> list[Teller]:
        channels = [self._channel, *self._channels.values()]
        return list({id(c): c for c in channels if c is not None}.values())

    def _waited_on(self, channel: Teller) -> list[str]:
        """The peers on ``channel`` we wait for: those that sent us heads so far. One that
        sent none keeps no log (a conformance kit) or never writes to us (a client host to
        the Shuffler, which waits for our heads itself)."""
        return [p for p in sorted(self._heard) if self._channels.get(p, self._channel) is channel]

    def _settled(self, channel: Teller, stage: int) -> bool:
        """Whether the wait of ``stage`` on ``channel`` is over: each peer's head of that
        stage recorded and, at the last, every message we sent it ACKed (read, so
        recorded); or the peer stopped. Asked again as heads arrive (a peer's first may
        still have been on its way)."""
        return all(
            peer in self._gone
            or channel.gone(peer)
            or (self._heard[peer] >= stage and (stage < HEAD_LAST or channel.delivered(peer)))
            for peer in self._waited_on(channel)
        )

    def _send_head(self, peer: str, stage: int = 0) -> None:
        channel = self._channels.get(peer, self._channel)
        if channel is not None:
            channel.tell(peer, self.head(stage))

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Close with outcome ok, or error when the session ends by an exception."""
        self.close("ok" if kind is None else "error")

    def close(self, outcome: str) -> None:
        """End this session's records (``outcome``: ok or error): a cut log then shows it."""
        self._chain.append(
            {"time": _now(), "direction": "closed", "party": self.party,
             "session": self.session, "outcome": outcome}
        )  # fmt: skip


def open_audit_log(job: JobFile[Any], name: str, out: Path, peers: Collection[str]) -> AuditLog:
    """``name``'s audit log for this session in ``out``, with a link key per peer in
    ``peers`` from the job's CURVE keys (none where there is no key folder: tests)."""
    from privfl.parties.session import keyring

    try:
        links = link_keys(keyring(job, name, peers), job.session)
    except (PrivflError, OSError):  # in-memory test jobs have no key folder: no link digests
        links = {}
    return AuditLog(
        out / FILE_NAME, party=name, session=job.session, job=job.fingerprint(), links=links
    )


def _anchor(header: Header | None, frames: list[bytes]) -> dict[str, Any] | None:
    """The head an ``audit_head`` carries, as its sender and its receiver record it."""
    if header is None or header.kind != Kind.AUDIT_HEAD or len(frames) != 2:
        return None
    body = codec.decode_body(header.kind, frames[1])
    assert isinstance(body, AuditHead)
    return {"seq": body.seq, "head": body.head} | ({"stage": body.stage} if body.stage else {})


def verify(folder: Path, record: dict[str, object], payload: bytes) -> bool:
    """Whether ``record`` (a line of ``folder``'s audit log) records ``payload``.

    Needs the party's own ``audit-keys.jsonl``: only the log's owner can check.
    """
    keys = {}
    for line in (folder / KEYS_FILE).read_text().splitlines():
        entry = json.loads(line)
        keys[entry["key_id"]] = bytes.fromhex(entry["key"])
    key = keys.get(str(record.get("key_id")))
    return key is not None and hmac.compare_digest(
        digest(key, payload), str(record.get("hmac_sha256"))
    )
