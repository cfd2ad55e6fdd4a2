"""Messages of the horizontal mode as frozen dataclasses (registered in messages.py's registry).

Field types are the codec's plain ones (int, float, str, bytes, ndarray), so the
one codec validates them like every other message.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privfl.crypto.sealing import TOKEN_BYTES as TOKEN_BYTES  # part of the wire format
from privfl.errors import ProtocolError
from privfl.protocol.bounds import count, text

HFL_ROLES = ("clients", "shuffler")
REPORT_KEY_BYTES = 32
DIGEST_BYTES = 32  # round_digest: SHA-256


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise ProtocolError(what)


def _ids(values: np.ndarray, what: str) -> None:
    _require(values.ndim == 1 and values.dtype == np.int64, f"{what} must be a 1-d int64 array")
    _require(bool((values >= 0).all()), f"{what} must be >= 0")


def _vector(values: np.ndarray, what: str, *, finite: bool = True) -> None:
    _require(values.ndim == 1 and values.dtype == np.float32, f"{what} must be a 1-d float32 array")
    _require(not finite or bool(np.isfinite(values).all()), f"{what} holds NaN or infinity")


def _digest(value: bytes | None, what: str) -> None:
    _require(value is None or len(value) == DIGEST_BYTES, f"{what} must be {DIGEST_BYTES} bytes")


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """A client host (or the Shuffler) joins: the job it runs and the logical clients it hosts."""

    round: int
    role: str
    job_fingerprint: str
    clients: np.ndarray

    def __post_init__(self) -> None:
        count(self.round, "round")
        _require(self.role in HFL_ROLES, f"unknown horizontal role {self.role!r}")
        text(self.job_fingerprint, "job_fingerprint", 128)
        _ids(self.clients, "clients")


@dataclass(frozen=True, slots=True)
class RoundStart:
    """The aggregator opens a round: global weights, who is asked, the token and report key.

    ``indices`` are the public top-k coordinates (empty when unused); ``token`` is the
    round's validity token sealed inside every report, ``client_tokens`` one single-use
    token per selected client (in ``selected`` order) that the Shuffler checks, and
    ``report_key`` the aggregator's X25519 public key (all only with a Shuffler).
    """

    round: int
    weights: np.ndarray
    selected: np.ndarray
    indices: np.ndarray
    token: bytes
    report_key: bytes
    client_tokens: bytes | None = None  # None (left off the wire) without a Shuffler

    def __post_init__(self) -> None:
        count(self.round, "round", 1)
        _vector(self.weights, "weights")
        _ids(self.selected, "selected")
        _ids(self.indices, "indices")
        _require(len(self.token) in (0, TOKEN_BYTES), "bad token length")
        _require(len(self.report_key) in (0, REPORT_KEY_BYTES), "bad report key length")
        _require(
            self.client_tokens is None
            or len(self.client_tokens) == TOKEN_BYTES * len(self.selected),
            "client_tokens must hold one token per selected client",
        )


@dataclass(frozen=True, slots=True)
class Update:
    """One logical client's report, sent straight to the aggregator (no Shuffler).

    Non-finite values pass here: the aggregator refuses and counts every report
    outside the mechanism's range (NaN and ±∞ included) in one place.
    """

    round: int
    client: int
    report: np.ndarray

    def __post_init__(self) -> None:
        count(self.round, "round")
        count(self.client, "client id")
        _vector(self.report, "report", finite=False)


@dataclass(frozen=True, slots=True)
class RoundDone:
    """A client host has sent every report it will send this round."""

    round: int
    sent: int

    def __post_init__(self) -> None:
        count(self.round, "round")
        count(self.sent, "sent")


@dataclass(frozen=True, slots=True)
class Sealed:
    """A report sealed for the aggregator (X25519, ChaCha20-Poly1305); opaque to the Shuffler.

    ``token`` is the client's single-use token of the round, which the Shuffler checks
    against the digests the aggregator gave it and strips before forwarding;
    ``round_digest`` is the digest of the ``round_start`` the host was given, which the
    Shuffler compares with the aggregator's commitment (the aggregator tags no host).
    """

    round: int
    blob: bytes
    token: bytes | None = None
    round_digest: bytes | None = None

    def __post_init__(self) -> None:
        count(self.round, "round")
        _require(self.token is None or len(self.token) == TOKEN_BYTES, "bad token length")
        _digest(self.round_digest, "round_digest")


@dataclass(frozen=True, slots=True)
class ShuffleWindow:
    """The aggregator tells the Shuffler about a round: how many may report, the dummy.

    ``token_digests`` are the SHA-256 digests of the round's client tokens (each usable
    once); ``host_caps`` is ``host:count,…``, the most reports each host may send;
    ``round_digest`` commits to the ``round_start`` every host must have been given.
    """

    round: int
    expected: int
    min_reports: int
    beta: float
    slot_seconds: float
    dummy: np.ndarray
    report_key: bytes
    token_digests: bytes | None = None
    host_caps: str = ""
    round_digest: bytes | None = None

    def __post_init__(self) -> None:
        count(self.round, "round")
        count(self.expected, "expected")
        _digest(self.round_digest, "round_digest")
        count(self.min_reports, "min_reports")
        _require(
            self.token_digests is None or len(self.token_digests) % TOKEN_BYTES == 0,
            "bad token digests length",
        )
        _require(len(self.host_caps) <= 1 << 16, "host_caps too long")
        _require(0 < self.beta <= 1 and 0 < self.slot_seconds < 86400, "bad window parameters")
        _vector(self.dummy, "dummy")
        _require(len(self.report_key) == REPORT_KEY_BYTES, "bad report key length")


@dataclass(frozen=True, slots=True)
class Shuffled:
    """The Shuffler's permuted batch: ``count`` sealed reports of ``size`` bytes, concatenated."""

    round: int
    count: int
    size: int
    blobs: bytes
    padded: int

    def __post_init__(self) -> None:
        count(self.round, "round")
        for value, what in ((self.count, "count"), (self.size, "size"), (self.padded, "padded")):
            count(value, what)
        _require(
            len(self.blobs) == self.count * self.size, "blob length does not match count x size"
        )


@dataclass(frozen=True, slots=True)
class RoundEnd:
    """The aggregator's verdict on a round (sent to the Shuffler and client hosts)."""

    round: int
    accuracy: float
    stop: bool
    reason: str

    def __post_init__(self) -> None:
        count(self.round, "round")
        text(self.reason, "reason", 256)
