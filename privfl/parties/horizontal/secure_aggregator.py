"""The aggregator's side of networked SecAgg+: plan groups, forward keys and shares, unmask.

Per round: the hosts' adverts → random groups (OS CSPRNG, as the simulator) and one
SecAgg+ graph per group (:func:`secagg.plan_graph`) → each host gets its clients'
neighbours and every other host's advert → sealed shares are routed to their receivers
→ masked inputs → the survivors are named → the hosts' view tags are forwarded to the
hosts they are for (:func:`forward_views`; each host checks the others saw the round it
saw) → the hosts' shares rebuild the masks and each group's sum is unmasked
(:func:`secagg.unmask_sum`). A host that misses a stage's deadline (the job's
``round_timeout``) or sends something that does not fit is out of the rest of the
round: its clients drop out at that stage, which SecAgg+ is built to survive.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from privfl.config.horizontal import HflJob
from privfl.crypto import shamir
from privfl.errors import PeerUnavailable
from privfl.learning import secagg
from privfl.learning.secure_round import network_context, noise_group, round_groups
from privfl.parties.horizontal import advert_tags
from privfl.parties.horizontal.channels import try_expect
from privfl.protocol import secagg_messages as wire
from privfl.protocol.channel import Channel, body_as
from privfl.protocol.messages import Kind, Message

log = logging.getLogger("privfl.parties.horizontal.aggregator")


@dataclass
class SecureRound:
    """The aggregator's view of one secure round: hosts still in it, groups, owners."""

    round: int
    hosts: dict[str, list[int]]
    groups: list[secagg.ServerState] = field(default_factory=list)
    group_of: dict[int, int] = field(default_factory=dict)
    placed: dict[int, int] = field(default_factory=dict)  # every advertised client: -1 alone
    noise_group: int = 1
    missed: set[str] = field(default_factory=set)
    order: tuple[str, ...] = ()  # the job's client hosts: the wire's host indices
    position: dict[str, int] = field(default_factory=dict)  # each host's index in ``order``
    adverts: dict[str, wire.SecAdvertise] = field(default_factory=dict)  # forwarded verbatim
    owner: dict[int, str] = field(default_factory=dict)

    @classmethod
    def start(cls, job: HflJob, asked: dict[str, list[int]], round_: int) -> SecureRound:
        """A round with the asked hosts and their clients."""
        hosts = {h: list(ids) for h, ids in asked.items()}
        order = tuple(job.names("clients"))
        return cls(round_, hosts, order=order, position={h: i for i, h in enumerate(order)})


def gather(job: HflJob, channel: Channel, kind: Kind, state: SecureRound) -> dict[str, Message]:
    """One ``kind`` message from each host still in the round, until ``round_timeout``;
    a host that misses it leaves the rest of the round."""
    waiting = set(state.hosts)
    got: dict[str, Message] = {}
    deadline = time.monotonic() + job.config.round_timeout
    while waiting and (left := deadline - time.monotonic()) > 0:
        env = try_expect(channel, {kind}, waiting, left)
        if env is None or env.header.round != state.round:
            continue
        got[env.sender] = env.body
        waiting.discard(env.sender)
    for host in waiting:
        log.warning(
            "round %d: %s sent no %s in time; its clients drop out", state.round, host, kind
        )
    _leave(state, waiting)
    return got


def _leave(state: SecureRound, hosts: set[str]) -> None:
    state.missed |= hosts
    for host in hosts:
        state.hosts.pop(host, None)


def _refuse(state: SecureRound, host: str, why: str) -> None:
    log.warning("round %d: refused %s's secure-aggregation message: %s", state.round, host, why)
    _leave(state, {host})


def _send_each(channel: Channel, state: SecureRound, bodies: dict[str, Message]) -> None:
    for host, body in bodies.items():
        try:
            channel.send(host, body, state.round)
        except PeerUnavailable as exc:
            log.warning("round %d: %s; its clients drop out", state.round, exc)
            _leave(state, {host})


def plan(job: HflJob, state: SecureRound, adverts: dict[str, Message], dims: int) -> None:
    """Groups and graphs from the hosts' adverts; each host's clients are the ones asked."""
    keys: dict[int, secagg.Advertise] = {}
    for host, message in adverts.items():
        body = body_as(message, wire.SecAdvertise)
        ids = body.clients.tolist()
        if not set(ids) <= set(state.hosts[host]):
            _refuse(state, host, "adverts for clients it was not asked for")
            continue
        if len(body.tags) != wire.TAG_BYTES * (len(state.order) - 1):
            _refuse(state, host, "not one advert tag per other client host")
            continue
        state.hosts[host] = ids
        state.adverts[host] = body
        state.owner.update(dict.fromkeys(ids, host))
        for i, c in enumerate(ids):
            at = slice(i * wire.KEY_BYTES, (i + 1) * wire.KEY_BYTES)
            keys[c] = secagg.Advertise(c, body.c_keys[at], body.s_keys[at])
    state.noise_group = noise_group(job.config.secagg_group, len(keys))
    for members in round_groups(job.config, sorted(keys), state.round):
        if len(members) < 2:  # SecAgg needs a neighbour: a lone input is left out, not shown
            log.warning("round %d: client %s alone in its group; left out", state.round, members)
            state.placed.update(dict.fromkeys(members, -1))
            continue
        index = len(state.groups)
        server = secagg.ServerState(network_context(job.session, state.round, index), dims)
        secagg.plan_graph(server, [keys[c] for c in members])
        state.groups.append(server)
        state.group_of.update(dict.fromkeys(members, index))
        state.placed.update(dict.fromkeys(members, index))


def neighbours_for(state: SecureRound, host: str) -> wire.SecNeighbours:
    """What ``host`` needs to share: each of its grouped clients' neighbours, and every
    other host's advert with its tag for ``host``, verbatim, with each client's group
    (the host counts the clients advertised and checks its groups' sizes against them)."""
    clients = [c for c in state.hosts[host] if c in state.group_of]
    rows: list[tuple[int, int, int, int]] = []
    near: list[int] = []
    for c in clients:
        server = state.groups[state.group_of[c]]
        rows.append(
            (state.group_of[c], len(server.adverts), server.threshold, len(server.graph[c]))
        )
        near += server.graph[c]
    table = np.array(rows, dtype=np.int64).reshape(-1, 4)
    sources = [h for h in state.order if h in state.adverts and h != host]
    adverts = [state.adverts[h] for h in sources]
    advertised = np.concatenate([a.clients for a in adverts] or [np.zeros(0, np.int64)])
    return wire.SecNeighbours(
        state.round,
        np.array(clients, dtype=np.int64),
        table[:, 0].copy(),
        table[:, 1].copy(),
        table[:, 2].copy(),
        table[:, 3].copy(),
        np.array(near, dtype=np.int64),
        np.array([state.position[h] for h in sources], dtype=np.int64),
        np.array([len(a.clients) for a in adverts], dtype=np.int64),
        advertised,
        np.array([state.placed[c] for c in advertised.tolist()], dtype=np.int64),
        b"".join(a.c_keys for a in adverts),
        b"".join(a.s_keys for a in adverts),
        b"".join(_tag_for(state, h, host) for h in sources),
        state.noise_group,
    )


def _tag_for(state: SecureRound, sender: str, receiver: str) -> bytes:
    """``sender``'s advert tag for ``receiver`` (its tags follow the job's host order)."""
    index = advert_tags.slot(state.position, sender, receiver)
    return state.adverts[sender].tags[index * wire.TAG_BYTES : (index + 1) * wire.TAG_BYTES]


def route(state: SecureRound, shares: dict[str, Message]) -> dict[str, wire.SecShares]:
    """Each host's sealed shares checked (its own clients, their neighbours) and forwarded."""
    inbox: dict[int, list[secagg.SealedShares]] = {}
    for host, message in shares.items():
        body = body_as(message, wire.SecShares)
        sealed = [
            secagg.SealedShares(
                int(s), int(r), body.sealed[i * wire.SEALED_BYTES : (i + 1) * wire.SEALED_BYTES]
            )
            for i, (s, r) in enumerate(zip(body.senders, body.receivers, strict=True))
        ]
        own = set(state.hosts[host])
        ok = all(
            m.sender in own
            and m.sender in state.group_of
            and m.receiver in state.groups[state.group_of[m.sender]].graph[m.sender]
            for m in sealed
        )
        if not ok or len({(m.sender, m.receiver) for m in sealed}) != len(sealed):
            _refuse(state, host, "shares from a client not its own or to a non-neighbour")
            continue
        for m in sealed:
            secagg.route_shares(state.groups[state.group_of[m.sender]], [m])
            inbox.setdefault(m.receiver, []).append(m)
    out = {}
    for host, ids in state.hosts.items():
        mine = [m for c in ids for m in inbox.get(c, [])]
        out[host] = wire.SecShares(
            state.round,
            np.array([m.sender for m in mine], dtype=np.int64),
            np.array([m.receiver for m in mine], dtype=np.int64),
            b"".join(m.ciphertext for m in mine),
        )
    return out


def forward_views(state: SecureRound, views: dict[str, Message]) -> dict[str, wire.SecConsistency]:
    """Each host's view tags (one per other client host, in job order, or none from a host
    whose clients aborted) forwarded to the hosts they are for."""
    tags: dict[str, bytes] = {}
    for host, message in views.items():
        body = body_as(message, wire.SecConsistency)
        others = advert_tags.other_positions(state.order, host)
        if len(body.hosts) and body.hosts.tolist() != others:
            _refuse(state, host, "view tags not one per other client host in job order")
        elif len(body.hosts):
            tags[host] = body.tags
    out = {}
    for host in state.hosts:
        senders = [h for h in state.order if h in tags and h != host]
        at = [advert_tags.slot(state.position, h, host) for h in senders]
        out[host] = wire.SecConsistency(
            state.round,
            np.array([state.position[h] for h in senders], dtype=np.int64),
            b"".join(
                tags[h][i * wire.VIEW_BYTES : (i + 1) * wire.VIEW_BYTES]
                for h, i in zip(senders, at, strict=True)
            ),
        )
    return out


def keep_masked(state: SecureRound, masked: dict[str, Message], dims: int) -> None:
    """The masked inputs of clients that shared, one row of ``dims`` words each."""
    for host, message in masked.items():
        body = body_as(message, wire.SecMasked)
        ids = body.clients.tolist()
        own = set(state.hosts[host])
        shared = all(c in own and c in state.group_of for c in ids) and all(
            c in state.groups[state.group_of[c]].shared for c in ids
        )
        if not shared or (ids and body.masked.shape[1] != dims):
            _refuse(state, host, f"masked inputs of clients that did not share, or not {dims} wide")
            continue
        for row, c in zip(body.masked, ids, strict=True):
            state.groups[state.group_of[c]].masked[c] = row.copy()


def replies_of(state: SecureRound, unmask: dict[str, Message]) -> list[list[secagg.UnmaskReply]]:
    """Each group's unmask replies; a host's reply is refused whole if any share does not
    fit (:func:`_fits`)."""
    per_group: list[list[secagg.UnmaskReply]] = [[] for _ in state.groups]
    for host, message in unmask.items():
        body = body_as(message, wire.SecUnmask)
        owners, subjects, seeds = body.owners.tolist(), body.subjects.tolist(), body.seeds.tolist()
        entries = list(zip(owners, subjects, seeds, strict=True))
        own = set(state.hosts[host])
        if not all(_fits(state, own, *entry) for entry in entries):
            _refuse(state, host, "shares of a non-neighbour or of the wrong secret")
            continue
        replies: dict[int, secagg.UnmaskReply] = {}
        width = shamir.SHARE_BYTES
        for i, (owner, subject, seed) in enumerate(entries):
            reply = replies.setdefault(owner, secagg.UnmaskReply(owner, {}, {}))
            share = shamir.from_bytes(body.shares[i * width : (i + 1) * width])
            (reply.seed_shares if seed else reply.key_shares)[subject] = share
        for owner, reply in replies.items():
            per_group[state.group_of[owner]].append(reply)
    return per_group


def _fits(state: SecureRound, own: set[int], owner: int, subject: int, seed: bool) -> bool:
    """A share ``owner`` may send: it is a survivor among the sending host's clients
    (``own``), ``subject`` is its neighbour, and the share is of the secret the named
    survivors call for (the seed of a survivor, the key of a dropped client)."""
    if owner not in state.group_of or owner not in own:
        return False
    server = state.groups[state.group_of[owner]]
    named = subject in server.masked
    return owner in server.masked and subject in server.graph[owner] and seed == named


def secure_collect(
    job: HflJob, channel: Channel, asked: dict[str, list[int]], round_: int, dims: int
) -> tuple[list[tuple[list[int], np.ndarray]], SecureRound]:
    """Run the five stages with the asked hosts; returns each unmasked group's survivors
    and signed sum, and the round's state (who missed a stage, the noise group size)."""
    state = SecureRound.start(job, asked, round_)
    plan(job, state, gather(job, channel, Kind.SECAGG_ADVERTISE, state), dims)
    _send_each(channel, state, {h: neighbours_for(state, h) for h in state.hosts})
    shares = gather(job, channel, Kind.SECAGG_SHARES, state)
    _send_each(channel, state, dict(route(state, shares)))
    keep_masked(state, gather(job, channel, Kind.SECAGG_MASKED, state), dims)
    alive = sorted(c for server in state.groups for c in server.masked)
    named = wire.SecSurvivors(round_, np.array(alive, dtype=np.int64))
    _send_each(channel, state, dict.fromkeys(state.hosts, named))
    views = gather(job, channel, Kind.SECAGG_CONSISTENCY, state)
    _send_each(channel, state, dict(forward_views(state, views)))
    per_group = replies_of(state, gather(job, channel, Kind.SECAGG_UNMASK, state))
    sums = []
    for index, (server, replies) in enumerate(zip(state.groups, per_group, strict=True)):
        if len(server.masked) < 2:  # one survivor's sum would be its input
            log.warning("round %d: group %d has under two survivors; not unmasked", round_, index)
            continue
        try:
            total = secagg.signed(secagg.unmask_sum(server, replies))
        except secagg.SecAggAborted as exc:
            log.warning("round %d: group %d not unmasked: %s", round_, index, exc)
            continue
        sums.append((sorted(server.masked), total))
    return sums, state
