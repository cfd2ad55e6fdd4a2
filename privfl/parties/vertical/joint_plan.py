"""The batch plan, drawn jointly: no single party chooses which rows share a batch.

The Host's plaintext gradient gives it ``F_H + 1`` equations per batch in its guests'
scores (``learning/pinning.py``). Which rows share a batch decides what those equations
pin, so a Host free to pick its own plan could pick one that pins rows (or reshuffle,
and stack epochs). Commit and reveal (docs/protocol.md §6.1a):

1. every data party draws 32 bytes from the OS CSPRNG and puts ``commit(session, party,
   r)`` in its Hello; the Server relays every commitment it received in its PublicKey
   message, so the Host cannot show a guest other commitments than it sent the Server;
2. each guest sends its ``r`` to the Host (PlanReveal); the Host, once it has them all,
   sends every guest every ``r``, its own included; each party checks every ``r``
   against its commitment;
3. the joint seed is SHA-256 over the session and every ``r`` (Host first, then the guests
   in job order). Attempt ``a`` of the plan permutes the rows by ``SHA-256(seed, a)`` and
   cuts them by the sizes every party derives (``taylor.batch_plan``).

Every ``r`` is fixed before any is revealed, and a guest's own ``r`` is uniform, so the
seed is uniform to a Host that deviates: it can only abort. The Host then unpins the plan
with its own columns (``pinning.unpin``), which no guest can check; each guest bounds it
instead (:class:`PlanCheck`): the Host's batches must be one of the first :data:`ATTEMPTS`
attempts with at most :func:`move_cap` rows moved between batches, and repeat every epoch.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from privfl.errors import ConfigError, ProtocolError
from privfl.learning import pinning
from privfl.learning.taylor import batch_plan
from privfl.parties import checkpoint
from privfl.parties.files import write_json
from privfl.parties.session import PartyContext
from privfl.protocol.messages import PlanReveal

ATTEMPTS = 8  # plans the Host may try before one unpins (digits, b = 64: 2 of 5 need a second)
MOVE_SHARE = 16  # the Host may move at most one training row in 16 (digits b = 64: ≤ 56 of 1347)
CONTRIBUTION_BYTES = 32
SHARE_FILE = "plan-share.json"  # beside the checkpoints, 0600


def contribution() -> bytes:
    """A party's share of the seed, from the OS CSPRNG."""
    return secrets.token_bytes(CONTRIBUTION_BYTES)


def commit(session: str, party: str, share: bytes) -> str:
    """``SHA-256("privfl-plan-commit" ‖ session ‖ 0 ‖ party ‖ 0 ‖ share)``, lowercase hex."""
    text = b"privfl-plan-commit\0" + session.encode() + b"\0" + party.encode() + b"\0"
    return hashlib.sha256(text + share).hexdigest()


def joint_seed(session: str, order: Sequence[str], shares: Mapping[str, bytes]) -> bytes:
    """``SHA-256("privfl-plan" ‖ 0 ‖ session ‖ 0 ‖ r_host ‖ r_guest-1 ‖ …)`` in ``order``."""
    digest = hashlib.sha256(b"privfl-plan\0" + session.encode() + b"\0")
    for party in order:
        digest.update(shares[party])
    return digest.digest()


def encode_pairs(pairs: Mapping[str, str]) -> str:
    """``name=hex,name=hex`` in the given order (the wire form of commitments and shares)."""
    return ",".join(f"{name}={value}" for name, value in pairs.items())


def decode_pairs(text: str) -> dict[str, str]:
    """The inverse of :func:`encode_pairs`; the message classes check the form."""
    return dict(item.split("=", 1) for item in text.split(",") if item)


def drawn(
    seed: bytes, attempt: int, rows: int, batch_size: int, least: int
) -> list[np.ndarray | None]:
    """Attempt ``attempt`` of the plan: a permutation from ``SHA-256(seed ‖ attempt)``."""
    key = hashlib.sha256(seed + attempt.to_bytes(4, "big")).digest()
    rng = np.random.default_rng(int.from_bytes(key, "big"))
    return batch_plan(rows, batch_size, rng, least)


def move_cap(rows: int) -> int:
    """The most rows the Host may move between batches of a drawn plan to unpin it."""
    return math.ceil(rows / MOVE_SHARE)


def moved(plan: Sequence[np.ndarray | None], base: Sequence[np.ndarray | None]) -> int:
    """Rows of ``plan`` that sit in another batch than in ``base`` (same sizes)."""
    return sum(
        len(np.setdiff1d(p, b))
        for p, b in zip(plan, base, strict=True)
        if p is not None and b is not None
    )


@dataclass(frozen=True)
class Plan:
    """The Host's plan and where it came from: the attempt it unpinned."""

    batches: list[np.ndarray | None]
    attempt: int


def host_plan(
    seed: bytes, x_host: np.ndarray, batch_size: int, least: int, unpin: bool = True
) -> Plan:
    """The first attempt the Host's columns (bias included) unpin within the move cap.

    Deterministic in the seed and the columns, so the plaintext twin repeats it. A job no
    attempt unpins is refused in one line (as a seed was before the plan was joint).
    """
    rows = len(x_host)
    left = 0
    for attempt in range(ATTEMPTS):
        base = drawn(seed, attempt, rows, batch_size, least)
        if not unpin:
            return Plan(base, attempt)
        plan = pinning.unpin(x_host, base)
        left = pinning.pinned(x_host, plan)
        if not left and moved(plan, base) <= move_cap(rows):
            return Plan(plan, attempt)
    raise ConfigError(
        f"the host's columns single out {left or 'some'} training rows in every batch plan "
        f"tried ({ATTEMPTS} drawn jointly): its gradient would give their guest scores away; "
        "try another training.batch_size (the full batch pins the fewest) or set "
        "training.allow_small_batches = true"
    )


@dataclass
class PlanCheck:
    """A guest's check that every Batch follows the joint plan (docs/protocol.md §6.2).

    It derives the drawn attempts itself; the first Batch names the attempt (the one whose
    batch 0 shares the most rows with it), and from then on every batch of epoch 0 may
    move at most :func:`move_cap` rows in all; later epochs repeat epoch 0's row sets.
    """

    host: str
    seed: bytes
    rows: int
    batch_size: int
    least: int
    free: bool = False  # allow_small_batches: the Host does not unpin, so nothing may move
    attempt: int | None = None
    seen: dict[int, str | None] = field(default_factory=dict)  # batch → digest of its rows
    base: list[np.ndarray | None] = field(default_factory=list)
    moves: int = 0

    def check(self, epoch: int, number: int, indices: np.ndarray | None) -> None:
        rows = None if indices is None else np.sort(indices)
        if number in self.seen:
            if self.seen[number] != rows_digest(rows):
                raise ProtocolError(
                    f"{self.host} sent batch {number} of epoch {epoch} with other rows than "
                    "under that number before (in this session or the one it resumes); every "
                    "epoch must repeat the same batches (docs/protocol.md §6.2): refused"
                )
            return
        if self.attempt is None:
            plans = [
                drawn(self.seed, a, self.rows, self.batch_size, self.least)
                for a in range(1 if self.free else ATTEMPTS)
            ]
            self.attempt = best_attempt(plans, number, rows)
            self.base = plans[self.attempt]
        base = self.base
        if number >= len(base) or (rows is None) != (base[number] is None):
            raise ProtocolError(
                f"{self.host} sent batch {number} of epoch {epoch}, which the jointly drawn "
                f"plan does not have (docs/protocol.md §6.2): refused"
            )
        if rows is not None:
            expected = base[number]
            assert expected is not None
            if len(rows) != len(expected):
                raise ProtocolError(
                    f"{self.host} sent batch {number} of epoch {epoch} with {len(rows)} rows, "
                    f"the jointly drawn plan {len(expected)} (docs/protocol.md §6.2): refused"
                )
            self.moves += len(np.setdiff1d(rows, expected))
            cap = 0 if self.free else move_cap(self.rows)
            if self.moves > cap:
                raise ProtocolError(
                    f"{self.host}'s batches do not follow the jointly drawn plan: "
                    f"{self.moves} rows moved by batch {number} of epoch {epoch}, at most "
                    f"{cap} allowed (docs/protocol.md §6.2): refused"
                )
        self.seen[number] = rows_digest(rows)

    def record(self) -> dict[str, object]:
        """What a checkpoint keeps, so a resumed session is held to the same batches: the
        attempt, the rows moved so far and each batch's rows (as digests)."""
        seen = {str(number): digest for number, digest in self.seen.items()}
        return {"attempt": self.attempt, "moves": self.moves, "seen": seen}

    def restore(self, record: Mapping[str, object]) -> None:
        """Take up a checkpoint's :meth:`record`: a resumed Host must send every batch number
        the rows it sent under it before (another attempt's rows would stack with them)."""
        attempt, moves, seen = record.get("attempt"), record.get("moves"), record.get("seen")
        if not (
            (attempt is None or isinstance(attempt, int))
            and isinstance(moves, int)
            and isinstance(seen, dict)
        ):
            raise ConfigError("the checkpoint's batch plan record is corrupt; resume refused")
        self.attempt, self.moves = attempt, moves
        self.seen = {int(number): digest for number, digest in seen.items()}
        if attempt is not None:
            self.base = drawn(self.seed, attempt, self.rows, self.batch_size, self.least)


def rows_digest(rows: np.ndarray | None) -> str | None:
    """SHA-256 of a batch's sorted row positions (None: the full batch)."""
    if rows is None:
        return None
    return hashlib.sha256(np.asarray(rows, dtype="<i8").tobytes()).hexdigest()


def best_attempt(plans: list[list[np.ndarray | None]], number: int, rows: np.ndarray | None) -> int:
    """The attempt whose batch ``number`` shares the most rows with ``rows``."""
    if rows is None:
        return 0
    overlap = []
    for p in plans:
        batch = p[number] if number < len(p) else None
        overlap.append(-1 if batch is None else len(np.intersect1d(batch, rows)))
    return int(np.argmax(overlap))


def own_share(ctx: PartyContext) -> bytes:
    """This party's seed share: a fresh one, or with ``--resume`` the one saved beside the
    checkpoints (0600), so a resumed session draws the same plan (a guest checks it)."""
    path = checkpoint.folder(ctx) / SHARE_FILE
    if ctx.resume and path.exists():
        try:
            share = bytes.fromhex(json.loads(path.read_text())["share"])
        except (ValueError, KeyError, TypeError) as err:
            raise ConfigError(f"{path} is not a plan share file: {err}") from None
        if len(share) == CONTRIBUTION_BYTES:
            return share
    share = contribution()
    write_json(path, {"share": share.hex()})
    return share


def host_exchange(
    ctx: PartyContext, share: bytes, commits: Mapping[str, str], relayed: str
) -> bytes:
    """The Host's side of the reveal: check the Server relayed every commitment as sent,
    gather each guest's share, send every guest all shares; the joint seed.

    ``commits``: the Host's and each guest's commitment as their Hellos carried them.
    """
    job = ctx.job
    check_relayed(job.server, commits, decode_pairs(relayed))
    shares = {job.host: share}
    for guest, reveal in ctx.channel.gather(PlanReveal, job.guests).items():
        theirs = decode_pairs(reveal.shares)
        if set(theirs) != {guest}:
            raise ProtocolError(f"{guest}'s plan reveal holds other shares than its own: refused")
        shares[guest] = checked_share(guest, theirs[guest], ctx.job.session, commits[guest])
    order = [job.host, *job.guests]
    everything = PlanReveal(encode_pairs({p: shares[p].hex() for p in order}))
    ctx.channel.broadcast(job.guests, everything)
    return joint_seed(job.session, order, shares)


def guest_exchange(ctx: PartyContext, share: bytes, relayed: str) -> bytes:
    """A guest's side: check the Server relayed our commitment and one per data party, send
    our share to the Host, check every share the Host returns; the joint seed."""
    job = ctx.job
    order = [job.host, *job.guests]
    commits = decode_pairs(relayed)
    if set(commits) != set(order):
        raise ProtocolError(
            f"{job.server} relayed plan commitments for {sorted(commits) or 'no party'}, the "
            f"job's data parties are {order} (docs/protocol.md §6.1a): refused"
        )
    if commits[ctx.name] != commit(job.session, ctx.name, share):
        raise ProtocolError(f"{job.server} relayed another plan commitment than ours: refused")
    ctx.channel.send(job.host, PlanReveal(encode_pairs({ctx.name: share.hex()})))
    reveal = ctx.channel.expect_body(PlanReveal, {job.host})
    theirs = decode_pairs(reveal.shares)
    if set(theirs) != set(order):
        raise ProtocolError(
            f"{job.host}'s plan reveal holds shares of {sorted(theirs)}, not of {order}: refused"
        )
    shares = {p: checked_share(p, theirs[p], job.session, commits[p], job.host) for p in order}
    if shares[ctx.name] != share:
        raise ProtocolError(f"{job.host} revealed another share for us than ours: refused")
    return joint_seed(job.session, order, shares)


def check_relayed(server: str, sent: Mapping[str, str], relayed: Mapping[str, str]) -> None:
    """Refuse a Server that relays other commitments than the Hellos carried."""
    if dict(relayed) != dict(sent):
        raise ProtocolError(
            f"{server} relayed other plan commitments than the Hellos carried "
            "(docs/protocol.md §6.1a): refused"
        )


def checked_share(party: str, value: str, session: str, committed: str, via: str = "") -> bytes:
    """``value`` (hex) as bytes, if it opens ``party``'s commitment."""
    share = bytes.fromhex(value) if len(value) == 2 * CONTRIBUTION_BYTES else b""
    if not share or commit(session, party, share) != committed:
        source = f" (sent by {via})" if via and via != party else ""
        raise ProtocolError(
            f"{party}'s plan share{source} does not open its commitment "
            "(docs/protocol.md §6.1a): refused"
        )
    return share


def require_commit(sender: str, hello_commit: str) -> str:
    """A data party's commitment from its training Hello; refuses a Hello without one."""
    if not hello_commit:
        raise ProtocolError(
            f"{sender} sent no batch-plan commitment in its Hello; every data party of a "
            "training session commits to a seed share (docs/protocol.md §6.1a): refused"
        )
    return hello_commit
