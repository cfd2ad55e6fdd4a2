"""Secure aggregation in the style of SecAgg+ (Bell et al. 2020, after Bonawitz et al. 2017).

The aggregator learns the sum of the clients' integer vectors mod 2^32 and nothing else
about any one of them, even when some clients drop out mid-round. One round, four stages,
each a pure function of a state dataclass and the messages the aggregator forwards:

1. **advertise**: every client draws two fresh X25519 key pairs (``c`` encrypts its
   shares, ``s`` agrees its pairwise masks) and sends the public halves.
2. **share**: the aggregator orders the advertisers at random (OS CSPRNG) and makes each
   client a neighbour of the ``k`` nearest in that ring (a Harary graph, ``k = O(log n)``,
   so a client's work grows with ``log n``, not ``n``). Each client draws a 128-bit
   self-mask seed ``b`` and Shamir-shares ``b`` and its ``s`` private key among its
   neighbours (threshold ``t > k/2``), each pair of shares sealed with ChaCha20-Poly1305
   under a key agreed from ``c``.
3. **masked input**: ``y_i = x_i + PRG(b_i) + Σ_{j∈N(i), j>i} PRG(s_ij) − Σ_{j<i} PRG(s_ij)``
   mod 2^32, over the neighbours that shared in stage 2; PRG is AES-256-CTR keyed by
   SHA-256 (SP 800-56C's one-step KDF) of the seed or of the X25519 secret (full
   128/256-bit inputs).
4. **unmask**: the aggregator names who sent a masked input; each survivor returns, per
   neighbour, the share of ``b`` (neighbour survived) or of ``s`` (neighbour dropped),
   never both. The aggregator rebuilds ``b`` of the survivors and ``s`` of the dropped,
   strips their masks and keeps the sum.

Why ``t > k/2``: an aggregator that tells some neighbours of ``i`` "i survived" and the
others "i dropped" gets fewer than ``t`` shares of one of the two secrets, so it never
holds both ``b_i`` and ``s_i`` (which would unmask ``y_i``). Pure maths; no sockets.
"""

from __future__ import annotations

import hashlib
import math
import random
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from nacl.bindings import crypto_scalarmult, crypto_scalarmult_base
from nacl.exceptions import CryptoError

from privfl.crypto import shamir
from privfl.errors import ProtocolError
from privfl.mechanisms.skellam import zero_plaintext

MODULUS_BITS = 32  # sums live in Z/2^32 (numpy's uint32 wraps for free)
SEED_BYTES = 16  # the self-mask seed b: 128 bits
KEY_BYTES = 32  # X25519 private and public keys, raw


class SecAggAborted(ProtocolError):
    """The round cannot finish safely (too few shares, a stage out of order, a bad message)."""


def neighbour_count(n: int) -> int:
    """Degree ``k`` of the SecAgg+ graph for ``n`` clients: ``2⌈log₂ n⌉``, even, below n."""
    k = 2 * math.ceil(math.log2(max(n, 2)))
    return min(k, n - 1 - (n - 1) % 2) if n > 2 else n - 1


def threshold_for(k: int) -> int:
    """Shares needed to rebuild a secret: a strict majority of the ``k`` neighbours."""
    return k // 2 + 1


def ring_neighbours(order: Sequence[int], k: int) -> dict[int, tuple[int, ...]]:
    """The Harary graph H(k, n) over ``order``: each client's k/2 predecessors and successors."""
    n = len(order)
    if k >= n - 1:  # small rounds: everyone is everyone's neighbour
        return {c: tuple(sorted(set(order) - {c})) for c in order}
    half = k // 2
    graph: dict[int, tuple[int, ...]] = {}
    for pos, client in enumerate(order):
        near = [order[(pos + d) % n] for d in range(-half, half + 1) if d != 0]
        graph[client] = tuple(sorted(set(near) - {client}))
    return graph


_CTR = modes.CTR(bytes(16))  # each key is fresh and expands one stream: nonce 0 is safe


def _cipher_ctx(algorithm: algorithms.AES, mode: modes.CTR) -> CipherContext:
    return Cipher(algorithm, mode).encryptor()


def _private_ctx() -> Callable[[algorithms.AES, modes.CTR], CipherContext]:
    """What ``Cipher(AES(key), CTR).encryptor()`` calls, without the Cipher object: its ABC
    isinstance checks and the mode's nonce check (16 bytes: _CTR above) are all it adds,
    about a third of a stream's 9 µs set-up, and a client sets up k + 1 = 21 a round.

    The constructor lives in a private module of ``cryptography``: it is used only if it
    exists, takes these arguments and gives the public path's keystream on a known key;
    any other layout or behaviour falls back to the public path."""
    try:
        from cryptography.hazmat.bindings._rust import openssl as _rust_openssl

        create = _rust_openssl.ciphers.create_encryption_ctx
        probe = algorithms.AES(bytes(range(32)))
        zeros = bytes(64)
        if create(probe, _CTR).update(zeros) == _cipher_ctx(probe, _CTR).update(zeros):
            return create
    except Exception:  # any failure of the private path means: not this one
        pass
    return _cipher_ctx


_create_ctx = _private_ctx()

_COUNTER_ONE = (1).to_bytes(4, "big")  # SP 800-56C's counter for the first (only) block


class Keystreams:
    """AES-256-CTR keystreams of ``dims`` uint32 words, written into one reused buffer.

    A client adds ``k + 1`` streams of its whole update; writing each into the same
    buffer (``update_into``) instead of a fresh ``bytes`` saves an allocation and two
    copies of the update per stream. Each call overwrites the words of the last one.
    """

    def __init__(self, dims: int) -> None:
        self.zeros = zero_plaintext(4 * dims)
        self.buffer = bytearray(4 * dims + 15)  # update_into wants a block − 1 to spare
        self.words: np.ndarray = np.frombuffer(self.buffer, dtype="<u4", count=dims)

    def __call__(self, key: bytes) -> np.ndarray:
        _create_ctx(algorithms.AES(key), _CTR).update_into(self.zeros, self.buffer)
        return self.words


def prg(key: bytes, dims: int) -> np.ndarray:
    """``dims`` uint32 words of AES-256-CTR keystream under ``key`` (32 bytes)."""
    return Keystreams(dims)(key)


def derive(secret: bytes, purpose: bytes, context: bytes) -> bytes:
    """A 32-byte key for ``purpose`` from ``secret``, bound to the round's ``context``:
    NIST SP 800-56C's one-step KDF with SHA-256, ``SHA-256(1 ‖ secret ‖ purpose|context)``
    with a 4-byte counter (one block: what ``cryptography``'s ``ConcatKDFHash`` derives,
    tested equal). A client derives 41 keys a round; one ``hashlib`` call costs about a
    sixth of an HKDF object's Python set-up and two HMACs."""
    return hashlib.sha256(_COUNTER_ONE + secret + purpose + b"|" + context).digest()


def pair_context(context: bytes, a: int, b: int) -> bytes:
    low, high = min(a, b), max(a, b)
    return context + low.to_bytes(8, "big") + high.to_bytes(8, "big")


@dataclass(frozen=True, slots=True)
class Advertise:
    """Stage 1: a client's two fresh public keys (raw 32-byte X25519)."""

    client: int
    c_public: bytes
    s_public: bytes

    def __post_init__(self) -> None:
        # libsodium reads 32 bytes from each key: a shorter one must never reach it
        if not (len(self.c_public) == len(self.s_public) == KEY_BYTES):
            raise SecAggAborted(f"client {self.client}: public keys must be {KEY_BYTES} bytes")


@dataclass(frozen=True, slots=True)
class SealedShares:
    """Stage 2: the shares of ``sender``'s secrets for ``receiver``, sealed for the receiver."""

    sender: int
    receiver: int
    ciphertext: bytes


@dataclass(frozen=True, slots=True)
class UnmaskReply:
    """Stage 4: a survivor's shares (field elements) of its neighbours' seeds or keys."""

    client: int
    seed_shares: dict[int, int]
    key_shares: dict[int, int]


@dataclass(frozen=True, slots=True)
class KeyPair:
    """An X25519 key pair as raw bytes (fresh each round: :meth:`fresh`)."""

    secret: bytes
    public: bytes

    @classmethod
    def of(cls, secret: bytes) -> KeyPair:
        """The pair of a raw private key; libsodium's base-point multiplication (34.5 µs
        here, against 42.4 µs for ``cryptography``'s key generation, best of five)."""
        if len(secret) != KEY_BYTES:
            raise SecAggAborted(f"a private key is {KEY_BYTES} bytes, not {len(secret)}")
        return cls(secret, crypto_scalarmult_base(secret))

    @classmethod
    def fresh(cls) -> KeyPair:
        """A new pair for one round, its private half from the OS CSPRNG (``secrets``)."""
        return cls.of(secrets.token_bytes(KEY_BYTES))


@dataclass(slots=True)
class ClientState:
    """One client's round: its secrets, its neighbours' keys and the shares it holds."""

    me: int
    context: bytes  # session and round: every key and mask is bound to it
    dims: int
    c_key: KeyPair = field(default_factory=KeyPair.fresh)
    s_key: KeyPair = field(default_factory=KeyPair.fresh)
    seed: bytes = field(default_factory=lambda: secrets.token_bytes(SEED_BYTES))
    neighbours: dict[int, Advertise] = field(default_factory=dict)
    threshold: int = 0
    # sender → its share of the seed, and of the key, held here (two dicts of ints: no
    # tuple per sender to allocate); ``held`` names the neighbours that shared
    held: dict[int, int] = field(default_factory=dict)
    key_held: dict[int, int] = field(default_factory=dict)
    # one AEAD per neighbour, agreed in stage 2: it seals this client's shares and opens theirs
    seal_boxes: dict[int, ChaCha20Poly1305] = field(default_factory=dict)
    stage: int = 1

    def advance(self, expected: int) -> None:
        if self.stage != expected:
            raise SecAggAborted(f"client {self.me}: stage {expected} out of order")
        self.stage += 1


def advertise(state: ClientState) -> Advertise:
    """Stage 1: the public halves of the client's two key pairs."""
    state.advance(1)
    return Advertise(state.me, state.c_key.public, state.s_key.public)


def share_keys(
    state: ClientState, neighbours: Iterable[Advertise], threshold: int
) -> list[SealedShares]:
    """Stage 2: Shamir shares of the seed and the ``s`` key, one sealed pair per neighbour."""
    state.advance(2)
    me = state.me
    state.neighbours = {a.client: a for a in neighbours if a.client != me}
    if not 1 <= threshold <= len(state.neighbours):
        raise SecAggAborted(f"client {me}: threshold {threshold} with too few neighbours")
    state.threshold = threshold
    points = [j + 1 for j in state.neighbours]
    secrets_ = [int.from_bytes(state.seed, "big"), int.from_bytes(state.s_key.secret, "big")]
    seed_shares, key_shares = shamir.split_many(secrets_, threshold, points)
    nonce, mine, c_secret = _nonce(me), me.to_bytes(8, "big"), state.c_key.secret
    sealed = []
    for (j, adv), b_share, s_share in zip(
        state.neighbours.items(), seed_shares, key_shares, strict=True
    ):
        # the associated data of this client's seal (me → j) and of j's (j → me); the
        # pair's context is the lower → higher one
        theirs = j.to_bytes(8, "big")
        out, back = _ad(state.context, mine, theirs), _ad(state.context, theirs, mine)
        key = derive(agree(c_secret, adv.c_public, j), b"share seal", out if me < j else back)
        box = state.seal_boxes[j] = ChaCha20Poly1305(key)
        plain = b_share.to_bytes(shamir.SHARE_BYTES, "big") + s_share.to_bytes(
            shamir.SHARE_BYTES, "big"
        )
        sealed.append(SealedShares(me, j, box.encrypt(nonce, plain, out)))
    return sealed


def masked_input(state: ClientState, shares: Iterable[SealedShares], x: np.ndarray) -> np.ndarray:
    """Stage 3: keep the neighbours' shares, return ``x`` plus the self and pairwise masks."""
    state.advance(3)
    me, mine, width = state.me, state.me.to_bytes(8, "big"), shamir.SHARE_BYTES
    for msg in shares:
        j = msg.sender
        box = state.seal_boxes.get(j)  # one per neighbour since stage 2
        if box is None or msg.receiver != me or j in state.held:
            raise SecAggAborted(f"client {me}: shares from a non-neighbour or twice")
        try:
            plain = box.decrypt(
                _nonce(j), msg.ciphertext, _ad(state.context, j.to_bytes(8, "big"), mine)
            )
        except InvalidTag as exc:
            raise SecAggAborted(f"client {me}: shares from {j} fail to open") from exc
        state.held[j] = shamir.from_bytes(plain[:width])
        state.key_held[j] = shamir.from_bytes(plain[width:])
    values = np.asarray(x)
    if values.shape != (state.dims,):
        raise SecAggAborted(f"client {me}: input of shape {values.shape}, not ({state.dims},)")
    streams = Keystreams(state.dims)
    y: np.ndarray = values.astype(np.int64, copy=False).astype(np.uint32)  # wraps mod 2^32
    y += streams(derive(state.seed, b"self mask", state.context))
    s_secret = state.s_key.secret
    for j in state.held:  # only neighbours that shared: the others' masks could not be removed
        secret = agree(s_secret, state.neighbours[j].s_public, j)
        mask = streams(derive(secret, b"pair mask", pair_context(state.context, me, j)))
        if me < j:  # in place: a client adds k streams of d words
            y += mask
        else:
            y -= mask
    return y


def unmask(state: ClientState, survivors: Iterable[int]) -> UnmaskReply:
    """Stage 4: per neighbour holding shares, the seed share if it survived, else the key share."""
    state.advance(4)
    # the aggregator names the same survivors to every client: one set, not a copy each
    alive = survivors if isinstance(survivors, (set, frozenset)) else set(survivors)
    if state.me not in alive:
        raise SecAggAborted(f"client {state.me}: named as dropped but asked to unmask")
    seeds = {j: s for j, s in state.held.items() if j in alive}
    keys = {j: k for j, k in state.key_held.items() if j not in alive}
    return UnmaskReply(state.me, seeds, keys)


def self_mask(seed: bytes, context: bytes, dims: int) -> np.ndarray:
    return prg(derive(seed, b"self mask", context), dims)


def agree(secret: bytes, public: bytes, whose: int) -> bytes:
    """X25519 of a raw private and a raw public key, by libsodium on the bytes as they came:
    39.8 against 43.9 µs for ``cryptography``'s key parsing and exchange (medians of six
    alternating repeats of 1,000; its Python layer checks the backend and wraps each key
    in an object; a client agrees 40 times a round). libsodium refuses a low-order public
    key (an all-zero secret); ``Advertise`` has checked the length."""
    try:
        return crypto_scalarmult(secret, public)
    except CryptoError as exc:
        raise SecAggAborted(
            f"client {whose}'s public key is of low order: no secret can be agreed with it"
        ) from exc


def _nonce(sender: int) -> bytes:
    return sender.to_bytes(12, "big")  # each key seals once per direction: sender is unique


def _ad(context: bytes, sender: bytes, receiver: bytes) -> bytes:
    """A seal's associated data: the round's context, then sender and receiver (8 bytes)."""
    return context + sender + receiver


# ---------------------------------------------------------------- the aggregator


@dataclass
class ServerState:
    """The aggregator's round: the graph, who shared, the masked inputs and the replies."""

    context: bytes
    dims: int
    adverts: dict[int, Advertise] = field(default_factory=dict)
    graph: dict[int, tuple[int, ...]] = field(default_factory=dict)
    threshold: int = 0
    shared: set[int] = field(default_factory=set)
    masked: dict[int, np.ndarray] = field(default_factory=dict)


def plan_graph(
    server: ServerState, adverts: Iterable[Advertise], rng: random.Random | None = None
) -> dict[int, list[Advertise]]:
    """After stage 1: a random ring order (``rng``, by default the OS CSPRNG; a test may fix
    it), the Harary graph and the threshold; returns what each advertiser receives (its
    neighbours' public keys)."""
    server.adverts = {a.client: a for a in adverts}
    order = list(server.adverts)
    (rng or secrets.SystemRandom()).shuffle(order)
    k = neighbour_count(len(order))
    server.graph = ring_neighbours(order, k)
    server.threshold = threshold_for(k)
    return {i: [server.adverts[j] for j in near] for i, near in server.graph.items()}


def route_shares(
    server: ServerState, sealed: Iterable[SealedShares]
) -> dict[int, list[SealedShares]]:
    """After stage 2: forward each sealed pair to its receiver; the senders are ``shared``."""
    inbox: dict[int, list[SealedShares]] = {}
    for msg in sealed:
        if msg.receiver not in server.graph.get(msg.sender, ()):
            raise SecAggAborted(f"shares from {msg.sender} to a non-neighbour {msg.receiver}")
        server.shared.add(msg.sender)
        inbox.setdefault(msg.receiver, []).append(msg)
    return inbox


def unmask_sum(server: ServerState, replies: Iterable[UnmaskReply]) -> np.ndarray:
    """Stage 4 at the aggregator: the sum mod 2^32 of the survivors' inputs."""
    alive = set(server.masked)
    seed_shares: dict[int, list[tuple[int, int]]] = {}
    key_shares: dict[int, list[tuple[int, int]]] = {}
    for reply in replies:
        if reply.client not in alive:
            continue
        for i, share in reply.seed_shares.items():
            seed_shares.setdefault(i, []).append((reply.client + 1, share))
        for i, share in reply.key_shares.items():
            key_shares.setdefault(i, []).append((reply.client + 1, share))
    total = np.zeros(server.dims, dtype=np.uint32)
    for y in server.masked.values():
        total += y
    streams = Keystreams(server.dims)
    for i in alive:
        seed = _rebuild(server, seed_shares.get(i, []), i, SEED_BYTES)
        total -= streams(derive(seed, b"self mask", server.context))
    for d in server.shared - alive:
        key = _rebuild(server, key_shares.get(d, []), d, KEY_BYTES)
        for j in set(server.graph[d]) & alive:  # j added ±PRG(s_jd); d never sent its −/+
            secret = agree(key, server.adverts[j].s_public, j)
            mask = streams(derive(secret, b"pair mask", pair_context(server.context, j, d)))
            if j < d:
                total -= mask
            else:
                total += mask
    return total


def _rebuild(server: ServerState, shares: list[tuple[int, int]], whose: int, width: int) -> bytes:
    """Client ``whose``'s secret of ``width`` bytes from the first ``threshold`` shares."""
    if len(shares) < server.threshold:
        raise SecAggAborted(
            f"only {len(shares)} of the {server.threshold} shares needed for client {whose}"
        )
    value = shamir.combine(shares[: server.threshold])
    if value >> (8 * width):  # shares of different polynomials: a secret out of range
        raise SecAggAborted(f"the shares of client {whose} rebuild no {width}-byte secret")
    return value.to_bytes(width, "big")


def signed(total: np.ndarray) -> np.ndarray:
    """A sum mod 2^32 read as a signed integer (valid while |sum| < 2^31)."""
    out: np.ndarray = np.asarray(total, dtype=np.uint32).view(np.int32).astype(np.int64)
    return out


def run_round(
    inputs: Mapping[int, np.ndarray],
    context: bytes,
    dropped: Iterable[int] = (),
    cpu: dict[str, float] | None = None,
    rng: random.Random | None = None,
) -> tuple[np.ndarray, list[int]]:
    """Every stage in one process: ``dropped`` clients vanish after sharing (before stage 3).

    Returns the signed sum of the survivors' inputs and the survivors. For tests,
    simulations and the benchmark; ``cpu`` (if given) receives the process CPU seconds of
    the clients' stages and of the aggregator's unmasking; ``rng`` orders the ring
    (:func:`plan_graph`).
    """
    start = time.process_time()
    dims = len(next(iter(inputs.values())))
    clients = {i: ClientState(i, context, dims) for i in inputs}
    server = ServerState(context, dims)
    keys = plan_graph(server, [advertise(c) for c in clients.values()], rng)
    sealed = [m for i, c in clients.items() for m in share_keys(c, keys[i], server.threshold)]
    inbox = route_shares(server, sealed)
    gone = set(dropped)
    for i, c in clients.items():
        if i not in gone:
            server.masked[i] = masked_input(c, inbox.pop(i, []), inputs[i])  # freed as read
    survivors = frozenset(server.masked)
    replies = [unmask(clients[i], survivors) for i in server.masked]
    middle = time.process_time()
    total = signed(unmask_sum(server, replies))
    if cpu is not None:
        cpu["clients_and_routing"] = middle - start
        cpu["unmasking"] = time.process_time() - middle
    return total, sorted(server.masked)
