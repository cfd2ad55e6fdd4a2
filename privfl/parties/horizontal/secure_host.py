"""A client host's side of networked SecAgg+: one SecAgg+ state per logical client.

Each stage is a pure step (:func:`advertise_all`, :func:`share_all`, :func:`mask_all`,
:func:`agree_all`, :func:`unmask_all`) that checks what the aggregator sent against the
host's own state (its clients, the round, the group sizes the graph and the adverts
imply, the keys, the other hosts' views) before any secret is used;
:func:`serve_secure_round` is the thin loop around them. Anything
malformed aborts the round for this host's clients with one log line; the host then
answers the remaining stages empty, so nobody waits for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from privfl.crypto import shamir
from privfl.errors import ProtocolError
from privfl.learning import secagg
from privfl.learning.secure_round import network_context, smallest_group
from privfl.parties.horizontal import advert_tags
from privfl.parties.horizontal.advert_tags import HostKeys
from privfl.parties.horizontal.secure_view import View, check_agreement
from privfl.protocol import secagg_messages as wire
from privfl.protocol.channel import Channel, Envelope
from privfl.protocol.messages import Kind, Message

log = logging.getLogger("privfl.parties.horizontal.client")
Inputs = Callable[[int, int], np.ndarray]  # (client, noise group size) → its integer input


@dataclass
class HostRound:
    """This host's secure round: its clients' SecAgg+ states, who masked, the noise size."""

    round: int
    session: str
    dims: int
    states: dict[int, secagg.ClientState]
    secagg_group: int  # the job's: 0 means one group of every advertiser
    keys: HostKeys  # to tag our adverts and check the others' (advert_tags.py)
    noise_group: int = 0
    masked: list[int] = field(default_factory=list)
    covered: bytes = b""  # what our advert's tags cover (advert_tags.digest)
    view: View = field(default_factory=View)  # the round as the aggregator shows it to us

    @classmethod
    def start(
        cls,
        round_: int,
        session: str,
        dims: int,
        clients: list[int],
        secagg_group: int,
        keys: HostKeys,
        *,
        model: bytes,
    ) -> HostRound:
        """Fresh keys and seeds (OS CSPRNG) for each of ``clients``; the context is set
        once the aggregator names each client's group. ``model``: the digest of the
        ``round_start`` the host was given, which every other host must have been given
        too (part of the view the hosts agree on)."""
        states = {c: secagg.ClientState(c, b"", dims) for c in clients}
        return cls(round_, session, dims, states, secagg_group, keys, view=View(model=model))


def _key(blob: bytes, index: int) -> bytes:
    return blob[index * wire.KEY_BYTES : (index + 1) * wire.KEY_BYTES]


def advertise_all(host: HostRound) -> wire.SecAdvertise:
    """Stage 1: every client's two public keys, tagged for every other client host."""
    ads = [secagg.advertise(s) for s in host.states.values()]
    ids = np.array([a.client for a in ads], dtype=np.int64)
    c_keys = b"".join(a.c_public for a in ads)
    s_keys = b"".join(a.s_public for a in ads)
    covered = advert_tags.digest(host.session, host.round, host.keys.me, ids, c_keys + s_keys)
    tags = advert_tags.tags_for(host.keys, host.session, host.round, covered)
    host.covered = covered
    return wire.SecAdvertise(host.round, ids, c_keys, s_keys, tags)


def _verified_keys(host: HostRound, body: wire.SecNeighbours) -> dict[int, secagg.Advertise]:
    """Every key the aggregator forwarded, each advert's tag checked first, and our own;
    each advert's digest and clients go into the host's view of the round."""
    known = {c: secagg.Advertise(c, s.c_key.public, s.s_key.public) for c, s in host.states.items()}
    at = 0
    order = host.keys.order
    host.view.adverts[order.index(host.keys.me)] = host.covered
    host.view.owner = dict.fromkeys(host.states, host.keys.me)
    for h, (index, size) in enumerate(zip(body.hosts.tolist(), body.sizes.tolist(), strict=True)):
        if index >= len(order):
            raise secagg.SecAggAborted(f"an advert of client host #{index}, not in the job")
        ids = body.advertised[at : at + size]
        c_keys = body.c_keys[at * wire.KEY_BYTES : (at + size) * wire.KEY_BYTES]
        s_keys = body.s_keys[at * wire.KEY_BYTES : (at + size) * wire.KEY_BYTES]
        covered = advert_tags.digest(host.session, host.round, order[index], ids, c_keys + s_keys)
        tag = body.tags[h * wire.TAG_BYTES : (h + 1) * wire.TAG_BYTES]
        advert_tags.check(host.keys, order[index], host.session, host.round, covered, tag)
        for n, j in enumerate(ids.tolist()):
            if j in known:
                raise secagg.SecAggAborted(f"client {j} advertised twice")
            known[j] = secagg.Advertise(j, _key(c_keys, n), _key(s_keys, n))
            host.view.owner[j] = order[index]
        host.view.adverts[index] = covered
        at += size
    return known


def _check_group(host: HostRound, client: int, members: int, degree: int, threshold: int) -> None:
    """The graph the aggregator claims must be the one SecAgg+ plans for ``members``:
    a degree below that, or a threshold below a strict majority, would let it rebuild
    both of a client's secrets from split views."""
    k = secagg.neighbour_count(members)
    expected = min(k, members - 1)
    if members < 2 or degree != expected or threshold != secagg.threshold_for(k):
        raise secagg.SecAggAborted(
            f"client {client}: a group of {members} with {degree} neighbours and threshold "
            f"{threshold} is not SecAgg+'s ({expected} neighbours, threshold "
            f"{secagg.threshold_for(k)})"
        )
    wanted = host.secagg_group or members
    if host.noise_group != wanted:  # a larger one would make every client add less noise
        raise secagg.SecAggAborted(f"noise group {host.noise_group} where the job implies {wanted}")


def _groups_seen(
    host: HostRound, body: wire.SecNeighbours, named: list[int]
) -> dict[int, set[int]]:
    """Each group's members as the aggregator places them (ours and the forwarded adverts')."""
    placed = zip(body.advertised.tolist(), body.placed.tolist(), strict=True)
    host.view.placement = {c: g for c, g in placed if g >= 0}
    host.view.placement.update(zip(named, body.groups.tolist(), strict=True))
    members: dict[int, set[int]] = {}
    for c, g in host.view.placement.items():
        members.setdefault(g, set()).add(c)
    return members


def _check_size(host: HostRound, client: int, members: int, group: set[int], seen: int) -> None:
    """A group is as the aggregator places it, and no smaller than :func:`random_groups`
    makes of the clients advertised to us: a group made small on purpose would release a
    sum with less noise (each share is drawn for ``secagg_group``) among fewer clients."""
    least = smallest_group(seen, host.secagg_group)
    if members != len(group) or members < least:
        raise secagg.SecAggAborted(
            f"client {client}: a group of {members} ({len(group)} placed in it) where "
            f"{seen} clients advertised make groups of at least {least}"
        )


def _neighbour_keys(
    client: int, near: list[int], known: dict[int, secagg.Advertise], group: set[int]
) -> list[secagg.Advertise]:
    """The tagged keys of ``client``'s neighbours: distinct, not itself, in its group."""
    if client in near or len(set(near)) != len(near):
        raise secagg.SecAggAborted(f"client {client}: its neighbour list repeats or names it")
    if not set(near) <= known.keys():
        raise secagg.SecAggAborted(f"client {client}: a neighbour without a tagged advert")
    if not set(near) <= group:
        raise secagg.SecAggAborted(f"client {client}: a neighbour outside its group")
    return [known[j] for j in near]


def share_all(host: HostRound, body: wire.SecNeighbours) -> wire.SecShares:
    """Stage 2: check each client's neighbours, group and graph; seal its shares for them.
    Clients of ours the aggregator left out of every group drop out of the round."""
    _check_round(host, body.round)
    named = body.clients.tolist()
    if not set(named) <= set(host.states):
        raise secagg.SecAggAborted(
            f"neighbours for clients {sorted(set(named) - set(host.states))} "
            "this host did not advertise"
        )
    known = _verified_keys(host, body)
    seen = len(host.states) + len(body.advertised)  # every client advertised to us
    groups = _groups_seen(host, body, named)
    host.states = {c: host.states[c] for c in named}
    host.noise_group = body.noise_group
    sealed: list[secagg.SealedShares] = []
    at = 0
    for i, client in enumerate(named):
        degree = int(body.degrees[i])
        near = body.neighbours[at : at + degree].tolist()
        at += degree
        group = groups[int(body.groups[i])]
        ads = _neighbour_keys(client, near, known, group)
        _check_size(host, client, int(body.members[i]), group, seen)
        _check_group(host, client, int(body.members[i]), degree, int(body.thresholds[i]))
        state = host.states[client]
        state.context = network_context(host.session, host.round, int(body.groups[i]))
        sealed += secagg.share_keys(state, ads, int(body.thresholds[i]))
    return wire.SecShares(
        host.round,
        np.array([s.sender for s in sealed], dtype=np.int64),
        np.array([s.receiver for s in sealed], dtype=np.int64),
        b"".join(s.ciphertext for s in sealed),
    )


def mask_all(host: HostRound, body: wire.SecShares, inputs: Inputs) -> wire.SecMasked:
    """Stage 3: open the shares forwarded to our clients; each client's masked input."""
    _check_round(host, body.round)
    inbox: dict[int, list[secagg.SealedShares]] = {c: [] for c in host.states}
    for i, (sender, receiver) in enumerate(zip(body.senders, body.receivers, strict=True)):
        if int(receiver) not in inbox:
            raise secagg.SecAggAborted(f"shares for client {int(receiver)}, not one of ours")
        blob = body.sealed[i * wire.SEALED_BYTES : (i + 1) * wire.SEALED_BYTES]
        inbox[int(receiver)].append(secagg.SealedShares(int(sender), int(receiver), blob))
    rows = []
    for client, state in host.states.items():
        y = secagg.masked_input(state, inbox[client], inputs(client, host.noise_group))
        _check_shared(state)
        rows.append(y)
    host.masked = list(host.states)
    masked = np.stack(rows) if rows else np.zeros((0, host.dims), dtype=np.uint32)
    return wire.SecMasked(host.round, np.array(host.masked, dtype=np.int64), masked)


def _check_shared(state: secagg.ClientState) -> None:
    """Bonawitz et al.'s ``|U₂| ≥ t``: a client masks with the neighbours that shared with
    it only, so an aggregator that withheld their shares would get an input masked by
    the self mask alone, and the self-mask seed from the neighbours."""
    if len(state.held) < state.threshold:
        raise secagg.SecAggAborted(
            f"client {state.me}: only {len(state.held)} of its neighbours shared "
            f"(threshold {state.threshold})"
        )


def agree_all(host: HostRound, body: wire.SecSurvivors) -> wire.SecConsistency:
    """Stage 4: check the survivors named (each advertised; each of our clients that masked
    among them, with at least ``threshold`` of its neighbours) and tag our view of the
    round (adverts, groups, survivors) for every other client host."""
    _check_round(host, body.round)
    alive = frozenset(body.survivors.tolist())
    if not alive <= set(host.view.owner):
        raise secagg.SecAggAborted(
            f"survivors {sorted(alive - set(host.view.owner))} never advertised"
        )
    for client in host.masked:
        state = host.states[client]
        if client not in alive:
            raise secagg.SecAggAborted(f"client {client}: named as dropped but it masked")
        if len(alive & set(state.held)) < state.threshold:  # Bonawitz et al.: |U| ≥ t
            raise secagg.SecAggAborted(
                f"client {client}: fewer than {state.threshold} of its neighbours survived"
            )
    host.view.alive = alive
    tags = advert_tags.view_tags_for(host.keys, host.session, host.round, host.view.digests())
    others = advert_tags.other_positions(host.keys.order, host.keys.me)
    return wire.SecConsistency(host.round, np.array(others, dtype=np.int64), tags)


def unmask_all(host: HostRound, body: wire.SecConsistency) -> wire.SecUnmask:
    """Stage 5: once every other host with a survivor in our clients' groups has tagged
    the same view (:func:`secure_view.check_agreement`): per client, the seed shares of
    surviving neighbours and the key shares of dropped ones."""
    _check_round(host, body.round)
    groups = {host.view.placement[c] for c in host.masked}
    check_agreement(host.keys, host.session, host.round, host.view, groups, body)
    alive = host.view.alive
    owners, subjects, seeds, shares = [], [], [], []
    for client in host.masked:
        reply = secagg.unmask(host.states[client], alive)
        for values, is_seed in ((reply.seed_shares, True), (reply.key_shares, False)):
            for subject, share in values.items():
                owners.append(client)
                subjects.append(subject)
                seeds.append(is_seed)
                shares.append(shamir.to_bytes(share))
    return wire.SecUnmask(
        host.round,
        np.array(owners, dtype=np.int64),
        np.array(subjects, dtype=np.int64),
        np.array(seeds, dtype=np.bool_),
        b"".join(shares),
    )


def _check_round(host: HostRound, round_: int) -> None:
    if round_ != host.round:
        raise secagg.SecAggAborted(f"a message of round {round_} in round {host.round}")


def _empty(round_: int, kind: Kind) -> Message:
    """The reply of a host whose clients are out of the round (nothing to wait for)."""
    none = np.zeros(0, dtype=np.int64)
    if kind is Kind.SECAGG_SHARES:
        return wire.SecShares(round_, none, none, b"")
    if kind is Kind.SECAGG_MASKED:
        return wire.SecMasked(round_, none, np.zeros((0, 0), dtype=np.uint32))
    if kind is Kind.SECAGG_CONSISTENCY:
        return wire.SecConsistency(round_, none, b"")
    return wire.SecUnmask(round_, none, none, np.zeros(0, dtype=np.bool_), b"")


NEXT = {
    Kind.SECAGG_NEIGHBOURS: Kind.SECAGG_SHARES,
    Kind.SECAGG_SHARES: Kind.SECAGG_MASKED,
    Kind.SECAGG_SURVIVORS: Kind.SECAGG_CONSISTENCY,
    Kind.SECAGG_CONSISTENCY: Kind.SECAGG_UNMASK,
}
ROUND_KINDS = {Kind.ROUND_START, Kind.ROUND_END}


def serve_secure_round(
    channel: Channel, aggregator: str, host: HostRound, inputs: Inputs, wait: float
) -> Envelope | None:
    """Run the five stages with the aggregator; returns the next round's message if one
    comes first (the aggregator left this host out of the rest of the round).

    A stage the host cannot check aborts its clients for the round (one log line) and it
    answers the rest empty; an aggregator that stays silent past ``wait`` is the
    channel's one-line error, as in a plaintext round.
    """
    channel.send(aggregator, advertise_all(host), host.round)
    aborted = False
    for kind in NEXT:
        env = channel.expect({kind, *ROUND_KINDS}, {aggregator}, wait)
        if env.header.kind in ROUND_KINDS:
            return env
        reply = _empty(host.round, NEXT[kind])
        if not aborted:
            try:
                _check_round(host, env.header.round)
                reply = _step(host, env.body, inputs)
            except (secagg.SecAggAborted, ProtocolError) as exc:
                log.error(
                    "round %d: secure aggregation aborted for clients %s: %s",
                    host.round, sorted(host.states), exc,
                )  # fmt: skip
                aborted = True  # ``reply`` is still the empty one
        channel.send(aggregator, reply, host.round)
    return None


def _step(host: HostRound, body: object, inputs: Inputs) -> Message:
    if isinstance(body, wire.SecNeighbours):
        return share_all(host, body)
    if isinstance(body, wire.SecShares):
        return mask_all(host, body, inputs)
    if isinstance(body, wire.SecSurvivors):
        return agree_all(host, body)
    if isinstance(body, wire.SecConsistency):
        return unmask_all(host, body)
    raise ProtocolError(f"unexpected {type(body).__name__} in a secure round")
