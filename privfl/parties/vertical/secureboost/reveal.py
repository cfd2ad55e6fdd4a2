"""Both sides of oblivious split selection (oblivious.py): the guest's sets, the Host's picks.

The guest makes its own key pair, sends its candidate sets once (``boost_candidates``)
and decrypts exactly one ``boost_reveal`` per split node, of exactly ``count``
ciphertexts; it never learns which candidate, if any, the request holds. In training
its key, pads and answers are the job's (ledger.py), so a node grown again at a later
start is answered as before or not at all. The Host checks the guest's key and sets,
and turns a pick into a request (masked by its per-job seed) and a reply into a left
set.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto.engine import Engine
from privfl.crypto.paillier import PrivateKey, PublicKey, unmask
from privfl.errors import ConfigError, CryptoError, ProtocolError
from privfl.parties.files import write_json
from privfl.parties.vertical import keyproof
from privfl.parties.vertical.secureboost import oblivious
from privfl.parties.vertical.secureboost.ledger import Ledger
from privfl.protocol import fresh
from privfl.protocol.bigints import BigInts
from privfl.protocol.boost_messages import BoostCandidates, BoostReveal, BoostRevealed

log = logging.getLogger("privfl.host")
KIND = "boost_candidates"  # the proof's role: this message kind and the guest's name


@dataclass
class GuestSets:
    """A guest's own key, its answers of the job (ledger) and of this session (one per node)."""

    ledger: Ledger
    rows: int
    count: int
    answered: set[tuple[int, int]] = field(default_factory=set)  # (tree, node), this session

    @property
    def key(self) -> PrivateKey:
        return self.ledger.key


def candidates(
    job: JobConfig,
    guest: str,
    binned: np.ndarray,
    split: str,
    engine: Engine,
    workers: int,
    ledger: Ledger,
) -> tuple[GuestSets, BoostCandidates]:
    """The ledger's key (of the job's size), its modulus proof and the candidate sets over
    ``binned``'s rows, padded from the ledger's seed (fresh ciphertexts every start)."""
    private = ledger.key
    public = private.public_key
    plain = oblivious.pack(
        oblivious.candidate_sets(binned, job.model.bins), public.bits, ledger.seed
    )
    pool = engine.pool(public.n, workers, public.h_s, nice=0)
    try:
        values = fresh.encrypt(public, plain, pool.take(len(plain)))
    finally:
        pool.close()
    rows = binned.shape[0]
    count = oblivious.shape(rows, public.bits)[1]
    proof = keyproof.prove_key(private, session=job.session, kind=KIND, sender=guest)
    body = BoostCandidates(public.n, public.h_s, split, rows, len(plain) // count, values, proof)
    return GuestSets(ledger, rows, count), body


def answer(sets: GuestSets, msg: BoostReveal, allowed: Callable[[int, int], bool]) -> BoostRevealed:
    """Decrypt one request: a node ``allowed`` names, not answered this session, ``count``
    values; its decryption sent only if the node was never answered or decrypts as before."""
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
    plain = sets.ledger.answer(msg.tree, msg.node, sets.key.decrypt(list(msg.values.values)))
    return BoostRevealed(msg.tree, msg.node, BigInts(plain))


@dataclass
class HostSets:
    """A guest's key and candidate ciphertexts as the Host holds them; ``seed``: the Host's
    per-job mask seed (training), None for CSPRNG masks (prediction)."""

    key: PublicKey
    rows: int
    count: int
    values: tuple[int, ...]
    seed: bytes | None = None

    def request(self, tree: int, node: int, pick: int | None) -> tuple[BoostReveal, list[int]]:
        """Candidate ``pick``'s ciphertexts masked, or a dummy (None); and the masks."""
        chosen = None
        if pick is not None:
            chosen = self.values[pick * self.count : (pick + 1) * self.count]
        mask = oblivious.masks(self.seed, self.key.n, tree, node, pick, self.count)
        values, masks = oblivious.masked_request(self.key, chosen, self.count, mask)
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
    job: JobConfig,
    guest: str,
    body: BoostCandidates,
    split: str,
    rows: int,
    columns: int,
    seed: bytes | None = None,
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
    return HostSets(key, rows, count, body.values.values, seed)


MASKS_FILE = "reveal-masks.json"


def host_seed(out: Path, fingerprint: str) -> bytes:
    """The Host's mask seed of this job (``OUT/reveal-masks.json``, 0600, drawn once from
    the OS CSPRNG, kept by ``--overwrite``): a node grown again at a later start gets the
    request it got before, which the guest's ledger answers as before (ledger.py)."""
    path = out / MASKS_FILE
    try:
        record = json.loads(path.read_text()) if path.exists() else None
        if record is not None and record.get("job") == fingerprint:
            seed = bytes.fromhex(str(record["seed"]))
            if len(seed) != oblivious.SEED_BYTES:
                raise ValueError(f"a seed of {len(seed)} bytes")
            return seed
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        raise ConfigError(
            f"{path} is unreadable ({exc}): restore it from your backup; without it every "
            "guest refuses the nodes it answered before (they start over with --forget-reveals)"
        ) from exc
    if record is not None:
        log.warning("%s is of another job; drawing this job's mask seed", path)
    seed = secrets.token_bytes(oblivious.SEED_BYTES)
    write_json(path, {"job": fingerprint, "seed": seed.hex()}, durable=True)  # 0600: mkstemp
    return seed
