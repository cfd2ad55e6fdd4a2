"""Both sides of oblivious split selection (oblivious.py): the guest's sets, the Host's picks.

The guest makes its own key pair, sends its candidate sets once (``boost_candidates``)
and decrypts exactly one ``boost_reveal`` per split node, of exactly ``count``
ciphertexts; it never learns which candidate, if any, the request holds. The Host
checks the guest's key and sets, and turns a pick into a request and a reply into a
left set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto.engine import Engine
from privfl.crypto.paillier import PrivateKey, PublicKey, generate_keypair, unmask
from privfl.errors import CryptoError, ProtocolError
from privfl.parties.vertical import keyproof
from privfl.parties.vertical.secureboost import oblivious
from privfl.protocol import fresh
from privfl.protocol.bigints import BigInts
from privfl.protocol.boost_messages import BoostCandidates, BoostReveal, BoostRevealed

KIND = "boost_candidates"  # the proof's role: this message kind and the guest's name


@dataclass
class GuestSets:
    """A guest's own key and how many requests it has answered (one per node at most)."""

    key: PrivateKey
    rows: int
    count: int
    answered: set[tuple[int, int]] = field(default_factory=set)  # (tree, node)


def candidates(
    job: JobConfig, guest: str, binned: np.ndarray, split: str, engine: Engine, workers: int
) -> tuple[GuestSets, BoostCandidates]:
    """A fresh key pair of the job's size, its modulus proof and the candidate sets over
    ``binned``'s rows."""
    public, private = generate_keypair(job.key_bits, job.obfuscation)
    plain = oblivious.pack(oblivious.candidate_sets(binned, job.model.bins), public.bits)
    pool = engine.pool(public.n, workers, public.h_s, nice=0)
    try:
        values = fresh.encrypt(public, plain, pool.take(len(plain)))
    finally:
        pool.close()
    rows = binned.shape[0]
    count = oblivious.shape(rows, public.bits)[1]
    proof = keyproof.prove_key(private, session=job.session, kind=KIND, sender=guest)
    body = BoostCandidates(public.n, public.h_s, split, rows, len(plain) // count, values, proof)
    return GuestSets(private, rows, count), body


def answer(sets: GuestSets, msg: BoostReveal, allowed: Callable[[int, int], bool]) -> BoostRevealed:
    """Decrypt one request: a node ``allowed`` names, not answered before, ``count`` values."""
    where = (msg.tree, msg.node)
    if where in sets.answered or not allowed(msg.tree, msg.node):
        raise ProtocolError(
            f"the host deviated from the protocol: a second or unexpected decryption request "
            f"for tree {msg.tree} node {msg.node}; the session stops"
        )
    if len(msg.values) != sets.count:
        raise ProtocolError(
            f"the host deviated from the protocol: {len(msg.values)} ciphertexts to decrypt "
            f"for tree {msg.tree} node {msg.node}, expected {sets.count}; the session stops"
        )
    try:
        sets.key.public_key.check_ciphertexts(msg.values.values)
    except CryptoError as exc:
        raise ProtocolError(f"the host's decryption request is malformed: {exc}") from exc
    sets.answered.add(where)
    plain = sets.key.decrypt(list(msg.values.values))
    return BoostRevealed(msg.tree, msg.node, BigInts(tuple(plain)))


@dataclass
class HostSets:
    """A guest's key and candidate ciphertexts as the Host holds them."""

    key: PublicKey
    rows: int
    count: int
    values: tuple[int, ...]

    def request(self, tree: int, node: int, pick: int | None) -> tuple[BoostReveal, list[int]]:
        """Candidate ``pick``'s ciphertexts masked, or a dummy (None); and the masks."""
        chosen = None
        if pick is not None:
            chosen = self.values[pick * self.count : (pick + 1) * self.count]
        values, masks = oblivious.masked_request(self.key, chosen, self.count)
        return BoostReveal(tree, node, values), masks

    def read(
        self, guest: str, body: BoostRevealed, tree: int, node: int, masks: list[int]
    ) -> np.ndarray:
        """The picked candidate's left set over ``rows`` from the guest's decryptions."""
        if (body.tree, body.node) != (tree, node) or len(body.values) != self.count:
            raise ProtocolError(
                f"{guest} answered another decryption request than tree {tree} node {node}"
            )
        if any(v >= self.key.n for v in body.values.values):
            raise ProtocolError(f"{guest} sent a decryption outside [0, n)")
        plain = unmask(body.values.values, masks, self.key.n)
        return oblivious.unpack(plain, self.rows, self.key.bits)


def check_candidates(
    job: JobConfig, guest: str, body: BoostCandidates, split: str, rows: int, columns: int
) -> HostSets:
    """The guest's key as the job says (size, obfuscation, a valid modulus proof) and its
    sets of the right shape."""
    try:
        key = PublicKey.from_n(body.n, body.h_s)
    except CryptoError as exc:
        raise ProtocolError(f"{guest}'s candidate key is invalid: {exc}") from exc
    if key.bits < job.key_bits or key.obfuscation != job.obfuscation:
        raise ProtocolError(
            f"{guest} sent a {key.bits}-bit {key.obfuscation} key; the job asks for "
            f"{job.key_bits} bits, {job.obfuscation}"
        )
    keyproof.check_key(key.n, body.proof, session=job.session, kind=KIND, sender=guest)
    count = oblivious.shape(rows, key.bits)[1]
    want = columns * (job.model.bins - 1)
    if (body.split, body.rows, body.candidates) != (split, rows, want):
        raise ProtocolError(
            f"{guest} sent {body.candidates} candidate sets of {body.rows} rows ({body.split}); "
            f"expected {want} of {rows} ({split})"
        )
    if len(body.values) != want * count:
        raise ProtocolError(
            f"{guest} sent {len(body.values)} candidate ciphertexts, expected {want * count}"
        )
    try:
        key.check_ciphertexts(body.values.values)
    except CryptoError as exc:
        raise ProtocolError(f"{guest}'s candidate sets are malformed: {exc}") from exc
    return HostSets(key, rows, count, body.values.values)
