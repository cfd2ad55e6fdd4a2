"""A networked aggregator attacks one client's masked input over the SecAgg+ wire flow.

Four honest client hosts of two clients each run their real loop (``serve_secure_round``)
over the in-memory transport; the aggregator is the attacker. It plays stages 1-3 as
the protocol says, choosing its own ring order (it may), so the target (client 0) has
neighbours 1, 2, 3 (hosts clients-1, clients-2) and 5, 6, 7 (clients-3, clients-4); then:

- **Split views.** It names the target a survivor to clients-1 and clients-2 (their
  clients would return shares of its self-mask seed) and dropped to clients-3 and
  clients-4 (shares of its mask key), to rebuild both and strip every mask. The hosts'
  agreement (v6: view tags, ``secure_view.py``) stops it, the other story's tags
  forwarded or withheld, even at a threshold of half the neighbours. Leaky arm: without
  the agreement that threshold reads the input exactly; the real threshold of 4 of 6
  alone leaves it 3 shares of each secret.
- **Two self-consistent halves.** It names clients 0-3 survivors and 4-7 dropped to
  clients-1 and clients-2, and the reverse to clients-3 and clients-4: the agreement
  holds inside each half, and the threshold is what stops it (each half names 3 of the
  target's 6 neighbours). Leaky arm: at half the neighbours it reads the input.
- **A group made small.** It puts the target in a group of 2 with an accomplice's client
  where the eight clients make groups of 4. The target's host refuses it before sharing.
  Leaky arm: without that check, the group's sum less the accomplice's input is the
  target's input.
- **Shares withheld from the target.** It forwards the target none of its neighbours'
  shares: the target would mask with no neighbour (only with the neighbours that
  shared), and the neighbours' shares of its self-mask seed would read its input. The
  target's host refuses to mask with fewer than the threshold of neighbours sharing
  (Bonawitz et al.'s ``|U₂| ≥ t``). Leaky arm: without that check (and the agreement,
  which the aborted host's missing view trips) the attack reads it.
- **A lowered threshold for the target.** It also tells the target's host that the
  target's threshold is 1, so one share of each secret would do. The host checks the
  threshold against the one SecAgg+ plans for the group and aborts its clients: the
  target never sends a masked input. Leaky arm: without that check (and the agreement,
  which the split views trip) the attack reads it.

- **Substituted keys.** It hands the target's host keys of its own as the target's
  neighbours' sealing keys (and the other hosts its own as the target's), opens the
  target's sealed shares, re-seals everything so the round goes on, and rebuilds both
  of the target's secrets. Every host checks the advert tags of what it is forwarded
  (``advert_tags.py``: HMAC under a key only the two hosts can agree) and aborts.
  Leaky arm: without the tag check the attack reads the input exactly.

Malformed and oversized stage messages are refused with one line (last tests).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from secagg_harness import DIMS, ROUND, inputs_of, job_of, network, run_round

from privfl.crypto import shamir
from privfl.errors import ProtocolError
from privfl.learning import secagg
from privfl.parties.horizontal import advert_tags, secure_aggregator, secure_host
from privfl.parties.horizontal.secure_aggregator import (
    SecureRound,
    forward_views,
    gather,
    keep_masked,
    neighbours_for,
    plan,
    route,
)
from privfl.protocol import codec
from privfl.protocol import secagg_messages as wire
from privfl.protocol.channel import body_as
from privfl.protocol.messages import PROTOCOL, VERSION, Kind

TARGET = 0
SIZES = [2, 2, 2, 2]
TOLD_SURVIVED = {"clients-1", "clients-2"}  # the target's own host must be among them


@dataclass
class Loot:
    """What the attacking aggregator ends with."""

    masked: np.ndarray | None  # the target's masked input (None: never sent)
    seed_shares: list[tuple[int, int]]
    key_shares: list[tuple[int, int]]
    server: secagg.ServerState
    truth: np.ndarray


def _attack(
    lower_target_threshold: bool = False,
    hide_from_target: bool = False,
    substitute_keys: bool = False,
    withhold_views: bool = False,
    halves: bool = False,
) -> Loot:
    job = job_of(SIZES)
    inputs = inputs_of(job)
    with network(job) as net:
        for name in job.names("clients"):
            net.host(name, inputs)
        channel = net.aggregator
        state = SecureRound.start(job, net.asked(), ROUND)
        plan(job, state, gather(job, channel, Kind.SECAGG_ADVERTISE, state), DIMS)
        [server] = state.groups
        k = len(server.graph[TARGET])
        server.graph = secagg.ring_neighbours(sorted(server.adverts), k)  # its chosen ring
        home = state.owner[TARGET]
        mitm = Mitm(server, {c for c, h in state.owner.items() if h == home})
        for host in list(state.hosts):
            body = neighbours_for(state, host)
            if lower_target_threshold and TARGET in body.clients:
                thresholds = np.where(body.clients == TARGET, 1, body.thresholds)
                body = _with(body, thresholds=thresholds)
            if substitute_keys:
                body = mitm.neighbours(body, host)
            channel.send(host, body, ROUND)
        shares = gather(job, channel, Kind.SECAGG_SHARES, state)
        if substitute_keys:
            shares = {h: mitm.reseal(h, body_as(b, wire.SecShares)) for h, b in shares.items()}
        for host, body in route(state, shares).items():
            if hide_from_target and TARGET in body.receivers:
                kept = body.receivers != TARGET
                body = wire.SecShares(
                    ROUND, body.senders[kept], body.receivers[kept], _rows(body.sealed, kept)
                )
            channel.send(host, body, ROUND)
        keep_masked(state, gather(job, channel, Kind.SECAGG_MASKED, state), DIMS)
        everyone = np.arange(sum(SIZES), dtype=np.int64)
        for host in state.hosts:
            split = host not in TOLD_SURVIVED and not (hide_from_target or substitute_keys)
            view = everyone[everyone != TARGET] if split else everyone
            if halves:  # each half's clients (0-3, 4-7) survived, the other half's dropped
                view = everyone[(everyone < 4) == (host in TOLD_SURVIVED)]
            channel.send(host, wire.SecSurvivors(ROUND, view), ROUND)
        views = gather(job, channel, Kind.SECAGG_CONSISTENCY, state)
        forwarded = forward_views(state, views)
        if withhold_views:  # each host gets only the views of the hosts told its story
            for host in forwarded:
                told = host in TOLD_SURVIVED
                same = {h: v for h, v in views.items() if (h in TOLD_SURVIVED) == told}
                forwarded[host] = forward_views(state, same)[host]
        for host, body in forwarded.items():
            channel.send(host, body, ROUND)
        replies = gather(job, channel, Kind.SECAGG_UNMASK, state)
    seeds, keys = [], []
    for body in replies.values():
        assert isinstance(body, wire.SecUnmask)
        for i, (owner, subject) in enumerate(zip(body.owners, body.subjects, strict=True)):
            if subject == TARGET:
                raw = body.shares[i * shamir.SHARE_BYTES : (i + 1) * shamir.SHARE_BYTES]
                point = (int(owner) + 1, shamir.from_bytes(raw))
                (seeds if body.seeds[i] else keys).append(point)
    if substitute_keys:  # what it opened, not what the hosts returned
        seeds, keys = mitm.seed_shares, mitm.key_shares
    return Loot(server.masked.get(TARGET), seeds, keys, server, inputs[TARGET])


@dataclass
class Mitm:
    """Key pairs of the aggregator's own: posing, to the target's host, as every client
    of the other hosts, and to the other hosts as every client of the target's host. It
    opens what the two sides seal for each other, keeps the target's shares and re-seals
    everything, so the round goes on."""

    server: secagg.ServerState
    inner: set[int]  # the clients of the target's host
    fake: dict[tuple[str, int], secagg.KeyPair] = field(default_factory=dict)
    seed_shares: list[tuple[int, int]] = field(default_factory=list)
    key_shares: list[tuple[int, int]] = field(default_factory=list)
    owner: dict[int, str] = field(default_factory=dict)

    def pair(self, host: str, client: int) -> secagg.KeyPair:
        """Our key posing as ``client`` toward ``host``."""
        return self.fake.setdefault((host, client), secagg.KeyPair.fresh())

    def neighbours(self, body: wire.SecNeighbours, host: str) -> wire.SecNeighbours:
        """``body`` with every forwarded c key across the target's host's border replaced."""
        c_keys = bytearray(body.c_keys)
        home = bool(self.inner & set(body.clients.tolist()))
        for n, j in enumerate(body.advertised.tolist()):
            if home != (j in self.inner):
                at = slice(n * secagg.KEY_BYTES, (n + 1) * secagg.KEY_BYTES)
                c_keys[at] = self.pair(host, j).public
        for c in body.clients.tolist():
            self.owner[c] = host
        return _with(body, c_keys=bytes(c_keys))

    def reseal(self, host: str, body: wire.SecShares) -> wire.SecShares:
        width = wire.SEALED_BYTES
        blobs = []
        for i, (s, r) in enumerate(
            zip(body.senders.tolist(), body.receivers.tolist(), strict=True)
        ):
            blob = body.sealed[i * width : (i + 1) * width]
            if (s in self.inner) != (r in self.inner):  # across the border: ours both ways
                plain = self._open(self.pair(host, r), s, s, r, blob)
                blob = self._seal(self.pair(self.owner[r], s), r, s, r, plain)
                if s == TARGET:  # the target's shares: read them
                    seed, key = plain[: shamir.SHARE_BYTES], plain[shamir.SHARE_BYTES :]
                    self.seed_shares.append((r + 1, shamir.from_bytes(seed)))
                    self.key_shares.append((r + 1, shamir.from_bytes(key)))
            blobs.append(blob)
        return wire.SecShares(ROUND, body.senders, body.receivers, b"".join(blobs))

    def _box(self, pair: secagg.KeyPair, peer: int, s: int, r: int) -> ChaCha20Poly1305:
        shared = secagg.agree(pair.secret, self.server.adverts[peer].c_public, peer)
        context = secagg.pair_context(self.server.context, s, r)
        return ChaCha20Poly1305(secagg.derive(shared, b"share seal", context))

    def _ad(self, s: int, r: int) -> bytes:
        return self.server.context + s.to_bytes(8, "big") + r.to_bytes(8, "big")

    def _open(self, pair: secagg.KeyPair, peer: int, s: int, r: int, blob: bytes) -> bytes:
        return self._box(pair, peer, s, r).decrypt(s.to_bytes(12, "big"), blob, self._ad(s, r))

    def _seal(self, pair: secagg.KeyPair, peer: int, s: int, r: int, plain: bytes) -> bytes:
        return self._box(pair, peer, s, r).encrypt(s.to_bytes(12, "big"), plain, self._ad(s, r))


def _rows(sealed: bytes, kept: np.ndarray) -> bytes:
    width = wire.SEALED_BYTES
    return b"".join(sealed[i * width : (i + 1) * width] for i in np.flatnonzero(kept))


def _with(body: wire.SecNeighbours, **changes: object) -> wire.SecNeighbours:
    fields = {f: getattr(body, f) for f in wire.SecNeighbours.__dataclass_fields__}
    return wire.SecNeighbours(**(fields | changes))  # type: ignore[arg-type]


def _read(loot: Loot) -> np.ndarray:
    """The target's input as the attacker reconstructs it from the shares it holds."""
    assert loot.masked is not None
    server = loot.server
    seed = (shamir.combine(loot.seed_shares) % 2 ** (8 * secagg.SEED_BYTES)).to_bytes(
        secagg.SEED_BYTES, "big"
    )
    y = loot.masked - secagg.self_mask(seed, server.context, DIMS)
    if not loot.key_shares:  # the target masked with no neighbour: nothing more to strip
        return secagg.signed(y)
    key = (shamir.combine(loot.key_shares) % 2**256).to_bytes(secagg.KEY_BYTES, "big")
    for j in server.graph[TARGET]:
        secret = secagg.agree(key, server.adverts[j].s_public, j)
        ctx = secagg.pair_context(server.context, TARGET, j)
        mask = secagg.prg(secagg.derive(secret, b"pair mask", ctx), DIMS)
        y = y - mask if j > TARGET else y + mask
    return secagg.signed(y)


@pytest.mark.parametrize(
    ("withhold", "line"),
    [(False, "was shown other survivors than we were"), (True, "no view from clients-")],
)
def test_split_views_fail_the_hosts_agreement_even_at_a_half_threshold(
    withhold: bool, line: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Forwarded, the other story's view tags differ; withheld, they are missing.
    monkeypatch.setattr(secagg, "threshold_for", lambda k: k // 2)

    with caplog.at_level(logging.ERROR):
        loot = _attack(withhold_views=withhold)

    assert not loot.seed_shares and not loot.key_shares  # no host answered the unmask stage
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 4 and all(line in e and "\n" not in e for e in errors)


def test_leaky_arm_without_the_agreement_a_half_threshold_lets_split_views_read_the_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(secagg, "threshold_for", lambda k: k // 2)
    monkeypatch.setattr(secure_host, "check_agreement", lambda *args: None)

    loot = _attack()

    np.testing.assert_array_equal(_read(loot), loot.truth)


def test_without_the_agreement_the_threshold_alone_leaves_three_shares_of_each_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(secure_host, "check_agreement", lambda *args: None)

    loot = _attack()

    assert len(loot.seed_shares) == len(loot.key_shares) == 3 < loot.server.threshold == 4
    read = _read(loot)
    assert not np.array_equal(read, loot.truth)
    assert np.abs(read).max() > 2**20  # mask noise, nowhere near the input's ±1000


def test_two_self_consistent_halves_fall_short_of_the_threshold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The agreement holds inside each half; |U| >= t (3 of the 6 neighbours named, t = 4)
    # is what every host refuses.
    with caplog.at_level(logging.ERROR):
        loot = _attack(halves=True)

    assert not loot.seed_shares and not loot.key_shares
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 4 and all("fewer than 4 of its neighbours survived" in e for e in errors)


def test_leaky_arm_at_a_half_threshold_two_halves_read_the_input_despite_the_agreement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(secagg, "threshold_for", lambda k: k // 2)

    loot = _attack(halves=True)

    np.testing.assert_array_equal(_read(loot), loot.truth)


# A group made small: the target (client 0) with client 2 alone, whose host colludes (the
# aggregator knows its input); with secagg_group = 4 the eight clients make groups of 4.
SMALL = [[TARGET, 2], [1, 3, 4, 5, 6, 7]]


def _small_group(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[tuple[list[int], np.ndarray]], SecureRound, dict[int, np.ndarray]]:
    job = job_of(SIZES, secagg_group=4)
    inputs = inputs_of(job)
    monkeypatch.setattr(secure_aggregator, "round_groups", lambda config, ids, round_: SMALL)
    sums, state, net = run_round(job, inputs)
    assert not net.errors
    return sums, state, inputs


def test_a_group_made_small_on_purpose_is_refused_before_the_target_shares(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        sums, state, _ = _small_group(monkeypatch)

    assert TARGET not in state.groups[state.group_of[TARGET]].shared  # no share of it left
    assert all(TARGET not in alive for alive, _ in sums)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    line = "client 0: a group of 2 (2 placed in it) where 8 clients advertised make groups of"
    assert any("aborted for clients [0, 1]" in e and line in e for e in errors)


def test_leaky_arm_without_the_size_check_a_group_of_two_reads_the_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(secure_host, "_check_size", lambda *args: None)

    sums, _, inputs = _small_group(monkeypatch)

    [total] = [total for alive, total in sums if alive == SMALL[0]]
    np.testing.assert_array_equal(total - inputs[2], inputs[TARGET])  # the accomplice's own


# The two host checks: what the aggregator does, the check that stops it, its error line.
# Both attacks also need the other hosts to answer the unmask stage, which the agreement
# refuses (split views; a target's host that aborted sends no view): the leaky arms turn
# the agreement off as well.
HOST_CHECKS = [
    ({"lower_target_threshold": True}, ("_check_group", "check_agreement"), "threshold 1"),
    ({"hide_from_target": True}, ("_check_shared", "check_agreement"), "only 0 of its"),
]


@pytest.mark.parametrize(("attack", "checks", "line"), HOST_CHECKS)
def test_the_targets_host_aborts_before_its_input_leaves(
    attack: dict[str, bool], checks: tuple[str, ...], line: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        loot = _attack(**attack)

    assert loot.masked is None  # the target's host aborted before its masked input left
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    [error] = [e for e in errors if "aborted for clients [0, 1]" in e]
    assert line in error


@pytest.mark.parametrize(("attack", "checks", "line"), HOST_CHECKS)
def test_leaky_arm_without_the_hosts_check_the_attack_reads_the_input(
    attack: dict[str, bool], checks: tuple[str, ...], line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for check in checks:
        monkeypatch.setattr(secure_host, check, lambda *args: None)

    loot = _attack(**attack)

    np.testing.assert_array_equal(_read(loot), loot.truth)


def test_substituted_keys_fail_the_advert_tags_and_every_host_aborts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR):
        loot = _attack(substitute_keys=True)

    assert loot.masked is None and not loot.seed_shares  # nothing was sealed to its keys
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("aborted for clients [0, 1]" in e and "fails its tag" in e for e in errors)


def test_leaky_arm_without_advert_tags_substituted_keys_read_the_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(advert_tags, "check", lambda *args: None)

    loot = _attack(substitute_keys=True)  # it reads before the agreement: tags must hold

    # it opened five of the target's six sealed pairs (client 1 shares its host with it)
    assert len(loot.seed_shares) == len(loot.key_shares) == 5
    np.testing.assert_array_equal(_read(loot), loot.truth)


# ------------------------------------------------------- malformed stage messages

ONE = np.ones(1, dtype=np.int64)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: wire.SecAdvertise(1, ONE, bytes(31), bytes(32), b""), "c_keys must hold 1 x 32"),
        (lambda: wire.SecAdvertise(1, ONE.repeat(2), bytes(64), bytes(64), b""), "must not repeat"),
        (lambda: wire.SecAdvertise(1, ONE, bytes(32), bytes(32), bytes(33)), "32-byte tags"),
        (
            lambda: _neighbours(degrees=ONE * 300, neighbours=ONE.repeat(300)),
            "degrees must be <= 256",
        ),
        (
            lambda: _neighbours(neighbours=ONE.repeat(2)),
            "neighbours: degrees entries",
        ),
        (lambda: wire.SecShares(1, ONE, ONE, bytes(147)), "sealed must hold 1 x 148"),
        (lambda: wire.SecMasked(1, ONE, np.zeros((1, 4), np.int64)), "2-d uint32"),
        (lambda: wire.SecMasked(1, ONE, np.zeros((2, 4), np.uint32)), "one row per client"),
        (lambda: wire.SecSurvivors(1, -ONE), "survivors must be >= 0"),
        (lambda: _neighbours(placed=ONE), "placed: arrays of unequal length"),
        (lambda: wire.SecConsistency(1, ONE, bytes(127)), "tags must hold 1 x 128"),
        (lambda: wire.SecConsistency(1, -ONE, bytes(96)), "hosts must be >= 0"),
        (
            lambda: wire.SecUnmask(1, ONE.repeat(2), ONE.repeat(2), np.ones(2, bool), bytes(132)),
            "one share per owner and subject",
        ),
    ],
)
def test_a_malformed_stage_message_is_a_one_line_protocol_error(
    build: object, message: str
) -> None:
    with pytest.raises(ProtocolError, match=message) as caught:
        build()  # type: ignore[operator]
    assert "\n" not in str(caught.value)


def test_an_oversized_neighbour_list_on_the_wire_is_refused_with_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The aggregator sends raw frames that no honest encoder would (degree 10^6).
    job = job_of([2])
    degree = np.array([10**6], dtype=np.int64)
    fields = {f: getattr(_neighbours(), f) for f in wire.SecNeighbours.__dataclass_fields__}
    fields["degrees"] = degree
    with network(job) as net, caplog.at_level(logging.WARNING):
        net.host("clients-1", inputs_of(job))
        channel = net.aggregator
        channel.expect({Kind.SECAGG_ADVERTISE}, {"clients-1"}, 10)
        head = {"protocol": PROTOCOL, "version": VERSION, "session": job.session,
                "sender": "aggregator", "receiver": "clients-1", "round": ROUND, "msg_id": 99,
                "kind": str(Kind.SECAGG_NEIGHBOURS)}  # fmt: skip
        frames = [codec._pack(head), codec._pack(fields)]
        channel.transport.send("clients-1", frames)
    assert not net.errors  # the host refused it, kept waiting and ended with the round
    [line] = [r.getMessage() for r in caplog.records if "refused a message" in r.getMessage()]
    assert "degrees must be <= 256" in line and "\n" not in line


def _neighbours(**changes: object) -> wire.SecNeighbours:
    """A neighbour list of one client (one neighbour, no forwarded advert), with changes."""
    none = np.zeros(0, dtype=np.int64)
    fields: dict[str, object] = {
        "round": ROUND, "clients": ONE * 0, "groups": ONE * 0, "members": ONE * 2,
        "thresholds": ONE, "degrees": ONE, "neighbours": ONE, "hosts": none, "sizes": none,
        "advertised": none, "placed": none, "c_keys": b"", "s_keys": b"", "tags": b"",
        "noise_group": 2,
    }  # fmt: skip
    return wire.SecNeighbours(**(fields | changes))  # type: ignore[arg-type]
