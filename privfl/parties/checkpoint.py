"""Checkpoint / resume: every party's state at each epoch boundary, and agreeing where to resume.

Each party writes ``OUT/checkpoints/epoch-NNNNN.json`` (NNNNN = completed epochs)
atomically (temporary file, fsync, rename; mode 0600) and keeps the last few.
After the handshake every party offers the Host the epochs it holds (nothing
without ``--resume``); the Host picks the latest epoch *all* parties hold and
broadcasts it, and each party reloads that checkpoint. The state saved is all
that makes the plaintext results: weights, flipped labels, RNG state, caches,
losses and metrics. Paillier randomness and masks are not saved: they cancel
exactly, so the resumed model equals the uninterrupted one.

This module is storage and the resume agreement only: each role decides what its
state is and saves and restores it itself (``save_host``/``resume_host`` in
``vertical/host.py``, and likewise for the Guest and the Server).

No checkpoint holds a ciphertext, and the Server's Paillier private key is never
written to disk: a resumed session runs under a fresh key pair. That is sound
because the only ciphertexts a party keeps across epochs — the Host's cache of the
guests' summed scores, which flipback decrypts at the end of an epoch — are all
rewritten by that epoch's own batches (every epoch's batches cover every training
row) before anything reads them.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privfl.errors import ConfigError, ProtocolError
from privfl.parties.files import write_json
from privfl.protocol.messages import Checkpoints, Resume

if TYPE_CHECKING:
    from privfl.parties.session import PartyContext

log = logging.getLogger("privfl.checkpoint")
FOLDER = "checkpoints"
LEGACY_KEY_FILE = "paillier-key.json"  # written by privfl before the key stayed in memory
KEEP = 3  # a party killed mid-epoch may lack the newest epoch another party has
FORMAT = 1
_NAME = re.compile(r"^epoch-(\d{5})\.json$")


def folder(ctx: PartyContext) -> Path:
    """Where this party keeps its checkpoints."""
    return ctx.out / FOLDER


def save(ctx: PartyContext, completed: int, state: dict[str, Any]) -> Path:
    """Write the state after ``completed`` epochs; drop all but the newest KEEP checkpoints."""
    path = folder(ctx) / f"epoch-{completed:05d}.json"
    record = {
        "format": FORMAT,
        "party": ctx.name,
        "job": ctx.job.fingerprint(),
        "completed": completed,
        "state": state,
    }
    write_json(path, record, compact=True, durable=True)  # 0600: mkstemp
    for old in available(ctx)[:-KEEP]:
        _remove(ctx, old)
    return path


def _files(ctx: PartyContext) -> dict[int, Path]:
    found: dict[int, Path] = {}
    if folder(ctx).is_dir():
        for path in folder(ctx).iterdir():
            match = _NAME.match(path.name)
            if match:
                found[int(match.group(1))] = path
    return found


def _read(ctx: PartyContext, path: Path) -> dict[str, Any] | None:
    """A checkpoint of this party and this job, or None if unreadable or foreign."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        log.warning("ignoring unreadable checkpoint %s", path)
        return None
    ours = (
        isinstance(record, dict)
        and record.get("format") == FORMAT
        and record.get("party") == ctx.name
        and record.get("job") == ctx.job.fingerprint()
    )
    if not ours:
        log.warning("ignoring checkpoint %s: it is of another party, job or format", path)
        return None
    ours_record: dict[str, Any] = record
    return ours_record


def available(ctx: PartyContext) -> list[int]:
    """Completed-epoch counts of the usable checkpoints, ascending."""
    return sorted(c for c, path in _files(ctx).items() if c >= 1 and _read(ctx, path) is not None)


def load(ctx: PartyContext, completed: int) -> dict[str, Any]:
    """The saved state after ``completed`` epochs."""
    path = _files(ctx).get(completed)
    record = _read(ctx, path) if path else None
    if record is None:
        raise ConfigError(f"checkpoint of epoch {completed} is missing from {folder(ctx)}")
    state: dict[str, Any] = record["state"]
    return state


def _remove(ctx: PartyContext, completed: int) -> None:
    path = _files(ctx).get(completed)
    if path is not None:
        path.unlink(missing_ok=True)


def agree(
    ctx: PartyContext,
    offered: list[int] | None = None,
    check: Callable[[int], None] | None = None,
) -> int:
    """Agree with every party on the epochs to resume after (0 = from scratch); see module doc.

    ``check`` (Host): sees the agreed epoch before it is broadcast; raising there ends
    the session with every party's checkpoints kept.
    """
    if offered is None:
        offered = available(ctx) if ctx.resume else []
    offered = offered[-64:]
    job = ctx.job
    if ctx.name == job.host:
        offers = ctx.channel.gather(Checkpoints, ctx.peers)
        common = set(offered)
        for offer in offers.values():
            common &= set(offer.completed.tolist())
        completed = max(common, default=0)
        if check is not None:
            check(completed)
        ctx.channel.broadcast(ctx.peers, Resume(completed=completed))
    else:
        ctx.channel.send(job.host, Checkpoints(completed=np.array(offered, dtype=np.int64)))
        body = ctx.channel.expect_body(Resume, {job.host})
        completed = body.completed
        if completed and completed not in offered:
            raise ProtocolError(f"the host resumes after epoch {completed}, which we never offered")
    for stale in available(ctx):
        if stale > completed:  # another timeline now; never offer it again
            _remove(ctx, stale)
    if completed:
        log.info("resuming after %d completed epochs", completed)
    elif ctx.resume:
        log.warning("no checkpoint is common to all parties; starting from the first epoch")
    return completed
