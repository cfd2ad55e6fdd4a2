"""Messages of networked SecAgg+ (horizontal mode, protocol v6), one kind per stage.

A client host speaks for several logical clients, so each message carries parallel
arrays, one entry per client (or per share): the checks here are the shape rules
(lengths agree, ids distinct and in range, keys and shares of their fixed widths); the
receiver then checks the content against its own state (``parties/horizontal/secure_*``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privfl.crypto.shamir import SHARE_BYTES
from privfl.protocol.bounds import count, require

KEY_BYTES = 32  # raw X25519 public keys
AEAD_BYTES = 16  # ChaCha20-Poly1305's tag
SEALED_BYTES = 2 * SHARE_BYTES + AEAD_BYTES  # a seed share and a key share, sealed
MAX_DEGREE = 256  # neighbours per client: 2⌈log₂ n⌉ is 64 at n = 2^32
MAX_HOSTS = 4096  # client hosts of a job whose adverts one message may carry
TAG_BYTES = 32  # HMAC-SHA256 (parties/horizontal/advert_tags.py)
# what a consistency tag covers, part by part (v7: "models", the round_start each host got)
VIEW_PARTS = ("adverts", "groups", "survivors", "models")
VIEW_BYTES = TAG_BYTES * len(VIEW_PARTS)  # one HMAC per part, so a mismatch names its part


def _ids(values: np.ndarray, what: str, *, distinct: bool = True) -> None:
    require(values.ndim == 1 and values.dtype == np.int64, f"{what} must be a 1-d int64 array")
    require(bool((values >= 0).all()), f"{what} must be >= 0")
    require(not distinct or len(np.unique(values)) == len(values), f"{what} must not repeat an id")


def _same_length(what: str, length: int, *arrays: np.ndarray) -> None:
    require(all(len(a) == length for a in arrays), f"{what}: arrays of unequal length")


def _blob(value: bytes, width: int, entries: int, what: str) -> None:
    require(len(value) == width * entries, f"{what} must hold {entries} x {width} bytes")


@dataclass(frozen=True, slots=True)
class SecAdvertise:
    """Stage 1, host → aggregator: each client's two fresh X25519 public keys."""

    round: int
    clients: np.ndarray
    c_keys: bytes  # KEY_BYTES per client, in ``clients`` order
    s_keys: bytes
    tags: bytes  # TAG_BYTES per other client host of the job, in job order

    def __post_init__(self) -> None:
        count(self.round, "round", 1)
        _ids(self.clients, "clients")
        _blob(self.c_keys, KEY_BYTES, len(self.clients), "c_keys")
        _blob(self.s_keys, KEY_BYTES, len(self.clients), "s_keys")
        require(len(self.tags) % TAG_BYTES == 0, f"tags must hold {TAG_BYTES}-byte tags")
        require(len(self.tags) <= TAG_BYTES * MAX_HOSTS, f"tags: at most {MAX_HOSTS} hosts")


@dataclass(frozen=True, slots=True)
class SecNeighbours:
    """Stage 2, aggregator → host: per client of the host, its group, the group's size,
    threshold and its neighbours (``degrees[i]`` entries of ``neighbours`` per client, in
    ``clients`` order); and, verbatim, the adverts of the other hosts whose clients are
    among them: host ``hosts[h]`` (index in the job's client hosts) advertised
    ``sizes[h]`` clients of ``advertised`` with their keys, and ``tags[h]`` is its tag
    for the receiving host. Every other host's accepted advert is forwarded (v6), so a
    host sees how many clients take part; ``placed[i]`` is the group of ``advertised[i]``
    (-1: left out, alone in its group).

    ``noise_group`` is the group size each client draws its Skellam share for
    (``secagg_group``, or every advertiser of the round when that is 0)."""

    round: int
    clients: np.ndarray
    groups: np.ndarray
    members: np.ndarray
    thresholds: np.ndarray
    degrees: np.ndarray
    neighbours: np.ndarray
    hosts: np.ndarray
    sizes: np.ndarray
    advertised: np.ndarray
    placed: np.ndarray
    c_keys: bytes
    s_keys: bytes
    tags: bytes
    noise_group: int

    def __post_init__(self) -> None:
        count(self.round, "round", 1)
        count(self.noise_group, "noise_group", 1)
        _ids(self.clients, "clients")
        for values, what in ((self.groups, "groups"), (self.members, "members")):
            _ids(values, what, distinct=False)
        _ids(self.thresholds, "thresholds", distinct=False)
        _ids(self.degrees, "degrees", distinct=False)
        n = len(self.clients)
        _same_length("neighbours", n, self.groups, self.members, self.thresholds, self.degrees)
        require(bool((self.degrees >= 1).all()), "every client needs a neighbour")
        require(bool((self.degrees <= MAX_DEGREE).all()), f"degrees must be <= {MAX_DEGREE}")
        _ids(self.neighbours, "neighbours", distinct=False)
        require(len(self.neighbours) == int(self.degrees.sum()), "neighbours: degrees entries")
        _ids(self.hosts, "hosts")
        _ids(self.sizes, "sizes", distinct=False)
        require(len(self.hosts) <= MAX_HOSTS, f"hosts: at most {MAX_HOSTS}")
        _same_length("adverts", len(self.hosts), self.sizes)
        _ids(self.advertised, "advertised")
        require(len(self.advertised) == int(self.sizes.sum()), "advertised: sizes entries")
        require(self.placed.ndim == 1 and self.placed.dtype == np.int64, "placed: 1-d int64")
        require(bool((self.placed >= -1).all()), "placed must be >= -1")
        _same_length("placed", len(self.advertised), self.placed)
        _blob(self.c_keys, KEY_BYTES, len(self.advertised), "c_keys")
        _blob(self.s_keys, KEY_BYTES, len(self.advertised), "s_keys")
        _blob(self.tags, TAG_BYTES, len(self.hosts), "tags")


@dataclass(frozen=True, slots=True)
class SecShares:
    """Stage 2's output, both ways: sealed share pairs ``senders[i]`` → ``receivers[i]``
    (host → aggregator: its clients' shares; aggregator → host: those for its clients)."""

    round: int
    senders: np.ndarray
    receivers: np.ndarray
    sealed: bytes  # SEALED_BYTES per entry

    def __post_init__(self) -> None:
        count(self.round, "round", 1)
        _ids(self.senders, "senders", distinct=False)
        _ids(self.receivers, "receivers", distinct=False)
        _same_length("shares", len(self.senders), self.receivers)
        _blob(self.sealed, SEALED_BYTES, len(self.senders), "sealed")


@dataclass(frozen=True, slots=True)
class SecMasked:
    """Stage 3, host → aggregator: each client's masked input, ``dims`` uint32 words a row."""

    round: int
    clients: np.ndarray
    masked: np.ndarray  # (len(clients), dims), uint32

    def __post_init__(self) -> None:
        count(self.round, "round", 1)
        _ids(self.clients, "clients")
        require(
            self.masked.ndim == 2 and self.masked.dtype == np.uint32,
            "masked must be a 2-d uint32 array",
        )
        require(self.masked.shape[0] == len(self.clients), "masked: one row per client")


@dataclass(frozen=True, slots=True)
class SecSurvivors:
    """Stage 4, aggregator → host: the clients whose masked input it holds (all groups)."""

    round: int
    survivors: np.ndarray

    def __post_init__(self) -> None:
        count(self.round, "round", 1)
        _ids(self.survivors, "survivors")


@dataclass(frozen=True, slots=True)
class SecUnmask:
    """Stage 4, host → aggregator: shares ``owners[i]`` holds of ``subjects[i]``'s self-mask
    seed (``seeds[i]``: the subject survived) or mask key (it dropped), never both."""

    round: int
    owners: np.ndarray
    subjects: np.ndarray
    seeds: np.ndarray  # bool
    shares: bytes  # SHARE_BYTES per entry

    def __post_init__(self) -> None:
        count(self.round, "round", 1)
        _ids(self.owners, "owners", distinct=False)
        _ids(self.subjects, "subjects", distinct=False)
        require(self.seeds.ndim == 1 and self.seeds.dtype == np.bool_, "seeds must be 1-d bool")
        _same_length("unmask", len(self.owners), self.subjects, self.seeds)
        pairs = set(zip(self.owners.tolist(), self.subjects.tolist(), strict=True))
        require(len(pairs) == len(self.owners), "one share per owner and subject")
        _blob(self.shares, SHARE_BYTES, len(self.owners), "shares")


@dataclass(frozen=True, slots=True)
class SecConsistency:
    """Stage 5, both ways (v6): the hosts' agreement on the round's view before unmasking.

    Host → aggregator: ``tags[h]`` (VIEW_BYTES) is this host's tag of its view (the
    adverts, the groups and the survivors it was told, and since v7 the digest of the
    round_start it was given: the model) for host ``hosts[h]``, every other
    client host of the job in job order (none: its clients are out of the round).
    Aggregator → host: ``hosts[h]`` made ``tags[h]`` for the receiving host."""

    round: int
    hosts: np.ndarray  # indices among the job's client hosts (job-file order)
    tags: bytes

    def __post_init__(self) -> None:
        count(self.round, "round", 1)
        _ids(self.hosts, "hosts")
        require(len(self.hosts) <= MAX_HOSTS, f"hosts: at most {MAX_HOSTS}")
        _blob(self.tags, VIEW_BYTES, len(self.hosts), "tags")
