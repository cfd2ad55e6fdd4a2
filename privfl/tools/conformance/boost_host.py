"""Script against a running SecureBoost Host: the tool plays the Server and every guest.

The played guests are privfl's own guest logic on the demo columns
(:mod:`privfl.parties.vertical.secureboost.guest`): they answer every ``boost_nodes``
with a packed, re-randomised histogram, make the splits they are told to and send
their decisions. The kit cannot decrypt (the Host holds the key), so it checks:

- the Host's key is the job's size and obfuscation mode, the same to every guest;
- ``boost_gradients``: the tree's rows (public seed), one ciphertext per row, valid,
  and no ciphertext ever repeated (within a message, across guests and trees);
- every ``boost_nodes``, ``boost_split``, ``boost_partition`` and ``boost_decide``
  is consistent with the partitions the tree so far defines (the guest's own rules:
  a node named once, open, at its level, the floor held);
- with ``host_check``, every ``boost_proof`` holds (the guests' own verification);
- each tree evaluated on the training and held-out rows, and ``finish`` to the Server
  and every guest, after which the Host stays silent, closes its inbox and exits 0.

The violation ending answers the first ``boost_nodes`` with one ciphertext too many:
the Host must Abort and exit non-zero.
"""

from __future__ import annotations

import time

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto.paillier import PublicKey
from privfl.crypto.pools import NoisePool
from privfl.data.alignment import row_commitment
from privfl.data.views import PartyData
from privfl.errors import PeerAborted, PrivflError
from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost import proofs
from privfl.parties.vertical.secureboost.common import params_of, wait_seconds
from privfl.parties.vertical.secureboost.guest import GuestBoost, step
from privfl.protocol.boost_messages import (
    BoostDecide,
    BoostGradients,
    BoostHistogram,
    BoostNodes,
)
from privfl.protocol.channel import body_as
from privfl.protocol.messages import (
    BigInts,
    Checkpoints,
    Finish,
    Hello,
    Kind,
    PublicKeyMessage,
    Resume,
)
from privfl.tools.conformance.peer import (
    Peer,
    Report,
    check_public_key,
    exits_nonzero,
    expect,
    finished_cleanly,
    host_counterparts,
)
from privfl.tools.conformance.target import Target


def boost_host_script(target: Target) -> None:
    """Play the Server and every guest against a running SecureBoost Host (demo data)."""
    job, party, ending, report, process = target.parts()
    data, server, guests = host_counterparts(job)
    peers = [server, *guests.values()]
    try:
        key = _handshake(job, party, report, server, guests, data)
        if key is None:
            return
        run = HostRun(job, party, report, key, data)
        try:
            run.serve(server, guests, ending)
        finally:
            run.close()
        if ending != "finish":
            exits_nonzero(report, party, process)
        elif report.passed:
            finished_cleanly(report, peers, party, job.party(party).endpoint, process)
    finally:
        for peer in peers:
            peer.close()


def _handshake(
    job: JobConfig,
    party: str,
    report: Report,
    server: Peer,
    guests: dict[str, Peer],
    data: dict[str, PartyData],
) -> PublicKey | None:
    """The Host's Hello to the Server, the guests' Hellos, its key to each, resume from scratch."""
    env = expect(report, server, Kind.HELLO, party, "Hello from the host to the server")
    if env is None:
        return None
    hello = body_as(env.body, Hello)
    first = next(iter(data.values()))
    digest = row_commitment(job.session, first.train_ids, first.test_ids)
    report.check(
        "Hello says host, with the demo split's row commitment (§2.3)",
        hello.role == "host" and hello.rows_digest == digest,
        f"{hello.role}, {hello.rows_digest[:16] or 'none'}, expected {digest[:16]}",
    )
    for name, peer in guests.items():
        features = data[name].x_train.shape[1]
        train = len(data[name].x_train)
        ours = Hello("guest", job.fingerprint(), hello.rows, features, digest, train)
        peer.channel.send(party, ours)
    keys = []
    for name, peer in guests.items():
        env = expect(report, peer, Kind.PUBLIC_KEY, party, f"the host's public key to {name}")
        if env is None:
            return None
        message = body_as(env.body, PublicKeyMessage)
        if not check_public_key(report, job, message, party):
            return None
        keys.append((message.n, message.h_s))
    report.check("the host sends every guest the same key", len(set(keys)) == 1, str(len(keys)))
    for peer in guests.values():
        peer.channel.send(party, Checkpoints(np.zeros(0, dtype=np.int64)))
    for name, peer in guests.items():
        env = expect(report, peer, Kind.RESUME, party, f"Resume sent to {name}")
        if env is None:
            return None
        report.check("resume from scratch", body_as(env.body, Resume).completed == 0)
    n, h_s = keys[0]
    return PublicKey.from_n(n, h_s)


class HostRun:
    """The played guests' states and what the Host sent them."""

    def __init__(
        self, job: JobConfig, party: str, report: Report, key: PublicKey, data: dict[str, PartyData]
    ) -> None:
        self.job, self.party, self.report = job, party, report
        self.params = params_of(job)
        self.floor = sb.node_floor(self.params.min_child_weight)
        self.noise = NoisePool(key.n, 1, key.h_s)
        self.guests = {
            g: GuestBoost(data=data[g], key=key, params=self.params, group=i + 1, noise=self.noise)
            for i, g in enumerate(job.guests)
        }
        for state in self.guests.values():  # host_check: the played guests verify its proofs
            state.check = proofs.Bounds() if job.model.host_check else None
        self.ciphertexts: set[int] = set()
        self.repeated = 0
        self.gradient_problems: list[str] = []
        self.trees: set[int] = set()
        self.decided: dict[int, set[tuple[str, str]]] = {}  # tree -> (guest, split)
        self.finish: Finish | None = None
        self.named = 0  # nodes named in boost_nodes

    def close(self) -> None:
        self.noise.close()

    def gradients(self, guest: str, body: BoostGradients) -> None:
        """Rows of the tree's subsample, one valid ciphertext each, none ever seen before."""
        train = len(self.guests[guest].data.x_train)
        want = sb.tree_rows(self.params, body.tree, train)
        if not np.array_equal(body.rows, want) or len(body.values) != len(body.rows):
            self.gradient_problems.append(
                f"tree {body.tree} to {guest}: {len(body.values)} ciphertexts for "
                f"{len(body.rows)} rows, the tree's subsample has {len(want)}"
            )
        for c in body.values.values:
            self.repeated += c in self.ciphertexts
            self.ciphertexts.add(c)
        self.trees.add(body.tree)

    def serve(self, server: Peer, guests: dict[str, Peer], ending: str) -> None:
        """Answer the Host as every guest until it finishes (or, on purpose, breaks it)."""
        report, party = self.report, self.party
        finished: set[str] = set()
        peers = [server, *guests.values()]
        deadline = time.monotonic() + wait_seconds(self.job)
        violation = ending != "finish"
        tampered = False
        abort = "a histogram with one ciphertext too many makes it Abort"
        while len(finished) < len(peers) and time.monotonic() < deadline:
            for peer in peers:
                try:
                    env = peer.channel._receive(0.02)
                except PeerAborted as exc:
                    what = abort if violation else "the host runs to the end"
                    report.check(what, tampered, str(exc))
                    return
                if env is None:
                    continue
                body = env.body
                if isinstance(body, Finish):
                    finished.add(peer.name)
                    self.finish = body
                    continue
                if peer is server:
                    what = "the host sends the server only Hello and Finish"
                    report.check(what, False, type(body).__name__)
                    return
                if isinstance(body, BoostGradients):
                    self.gradients(peer.name, body)
                if isinstance(body, BoostNodes):
                    self.named += len(body.nodes)
                if isinstance(body, BoostDecide):
                    self.decided.setdefault(body.tree, set()).add((peer.name, body.split))
                try:
                    reply = step(self.guests[peer.name], body)
                except PrivflError as exc:
                    what = f"the host's {env.header.kind} is consistent with the tree's partitions"
                    report.check(what, False, f"to {peer.name}: {exc}")
                    return
                if isinstance(reply, BoostHistogram) and violation and not tampered:
                    tampered = True
                    values = BigInts((*reply.values.values, reply.values.values[-1]))
                    reply = BoostHistogram(reply.tree, reply.level, reply.nodes, values)
                if reply is not None:
                    peer.channel.send(party, reply, env.header.round)
        if violation:
            report.check(abort, False, "no Abort came")
            return
        self._report(finished, len(peers))

    def _report(self, finished: set[str], peers: int) -> None:
        report = self.report
        report.check("Finish reached the server and every guest", len(finished) == peers)
        report.check(
            "boost_gradients: the tree's rows, one ciphertext per row",
            bool(self.trees) and not self.gradient_problems,
            "; ".join(self.gradient_problems[:3]) or "no gradients came",
        )
        report.check(
            "boost_gradients: no ciphertext repeats (fresh encryptions per guest and tree)",
            not self.repeated,
            f"{self.repeated} repeated of {len(self.ciphertexts) + self.repeated}",
        )
        report.check(
            "every boost_nodes, boost_split and boost_partition fits the tree's partitions "
            "(open nodes at their level, named once, children at the row floor)",
            self.named > 0,
            "no node was named",
        )
        trees = self.finish.epochs if self.finish else 0
        want = {(g, s) for g in self.guests for s in ("train", "test")}
        missing = [t for t in sorted(self.trees) if self.decided.get(t) != want]
        report.check(
            "every tree is evaluated: boost_decide on training and held-out rows to every guest",
            not missing,
            f"trees {missing[:4]}",
        )
        report.check(
            "finish counts the trees kept (at most those grown)",
            0 < trees <= len(self.trees) <= self.params.trees,
            f"finish says {trees}, {len(self.trees)} grown",
        )
