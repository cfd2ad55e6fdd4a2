"""Every message of the vertical protocol as a frozen dataclass, with its kind and envelope."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from privfl.errors import ProtocolError

PROTOCOL = "privfl"
VERSION = 1
PURPOSES = ("gradient", "scores")
SPLITS = ("train", "test")


class Kind(enum.StrEnum):
    """The kind of a message, carried in the envelope and checked before the body is decoded."""

    HELLO = "hello"
    PUBLIC_KEY = "public_key"
    BATCH = "batch"
    FORWARD = "forward"
    RESIDUAL = "residual"
    CROSS_TERM = "cross_term"
    DECRYPT_REQUEST = "decrypt_request"
    DECRYPTED = "decrypted"
    LOSS = "loss"
    EPOCH_RESULT = "epoch_result"
    SCORE_REQUEST = "score_request"
    SCORES = "scores"
    FINISH = "finish"
    ABORT = "abort"


@dataclass(frozen=True, slots=True)
class BigInts:
    """A vector of non-negative big integers (ciphertexts, or residues mod n) sent fixed-width."""

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if any(v < 0 for v in self.values):
            raise ProtocolError("BigInts holds non-negative integers only")

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True, slots=True)
class Header:
    """The envelope: who sent what to whom, in which session and round."""

    protocol: str
    version: int
    session: str
    sender: str
    receiver: str
    round: int
    msg_id: int
    kind: Kind


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise ProtocolError(what)


@dataclass(frozen=True, slots=True)
class Hello:
    """A party announces itself to the Server and the Host and proves it runs the same job."""

    role: str
    job_fingerprint: str
    rows: int
    features: int

    def __post_init__(self) -> None:
        _require(self.role in ("server", "host", "guest"), f"unknown role {self.role!r}")
        _require(self.rows >= 0 and self.features >= 0, "rows and features must be >= 0")


@dataclass(frozen=True, slots=True)
class PublicKey:
    """The Server's Paillier public key (the private key never leaves the Server).

    ``h_s`` is the DJN generator every party must use for ``obfuscation = "djn"``;
    0 (the default, and what a sender without DJN omits) means standard ``r^n``.
    """

    n: int
    bits: int
    h_s: int = 0  # performance (issue 4): DJN short-exponent obfuscation

    def __post_init__(self) -> None:
        _require(self.n > 0 and self.n % 2 == 1, "a Paillier modulus is a positive odd number")
        _require(self.n.bit_length() >= self.bits - 1, "modulus shorter than announced")
        _require(0 <= self.h_s < self.n * self.n, "the DJN generator h_s must lie in [0, n^2)")


@dataclass(frozen=True, slots=True)
class Batch:
    """The Host opens a batch; ``indices`` are training-row positions (None = all rows)."""

    epoch: int
    batch: int
    n_batches: int
    indices: np.ndarray | None

    def __post_init__(self) -> None:
        _require(0 <= self.batch < self.n_batches, "batch number out of range")
        if self.indices is not None:
            _require(self.indices.ndim == 1 and self.indices.dtype == np.int64, "bad indices")


@dataclass(frozen=True, slots=True)
class Forward:
    """A guest's encrypted partial scores ``[[z_g]]`` and ``[[Σ z_g²]]`` for the batch."""

    epoch: int
    batch: int
    scores: BigInts
    sum_squares: BigInts

    def __post_init__(self) -> None:
        _require(len(self.sum_squares) == 1, "sum_squares is one ciphertext")


@dataclass(frozen=True, slots=True)
class Residual:
    """The Host's encrypted residual ``[[4d]]`` and, with several guests, the others' scores."""

    epoch: int
    batch: int
    residual: BigInts
    others: BigInts | None


@dataclass(frozen=True, slots=True)
class CrossTerm:
    """A guest's ``[[Σ_i z_g,i · (Z_i − z_g,i)]]`` so the Host can assemble the exact loss."""

    epoch: int
    batch: int
    value: BigInts

    def __post_init__(self) -> None:
        _require(len(self.value) == 1, "a cross term is one ciphertext")


@dataclass(frozen=True, slots=True)
class DecryptRequest:
    """Masked ciphertexts the Server is asked to decrypt (it cannot tell them from noise)."""

    epoch: int
    batch: int
    purpose: str
    values: BigInts

    def __post_init__(self) -> None:
        _require(self.purpose in PURPOSES, f"unknown purpose {self.purpose!r}")


@dataclass(frozen=True, slots=True)
class Decrypted:
    """The Server's plaintext residues of a DecryptRequest, in the same order."""

    epoch: int
    batch: int
    purpose: str
    values: BigInts

    def __post_init__(self) -> None:
        _require(self.purpose in PURPOSES, f"unknown purpose {self.purpose!r}")


@dataclass(frozen=True, slots=True)
class Loss:
    """The Host's encrypted Taylor loss of one batch, ``[[denominator · L]]`` at 2^scale_bits."""

    epoch: int
    batch: int
    n_batches: int
    value: BigInts
    denominator: int
    scale_bits: int

    def __post_init__(self) -> None:
        _require(len(self.value) == 1 and self.denominator > 0, "bad loss message")
        _require(0 <= self.batch < self.n_batches, "batch number out of range")


@dataclass(frozen=True, slots=True)
class EpochResult:
    """The Server's verdict after an epoch: the mean Taylor loss and whether to stop."""

    epoch: int
    loss: float
    stop: bool
    reason: str

    def __post_init__(self) -> None:
        _require(not math.isnan(self.loss), "loss is NaN")


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """The Host asks every guest for its encrypted scores on a split (evaluation)."""

    epoch: int
    split: str

    def __post_init__(self) -> None:
        _require(self.split in SPLITS, f"unknown split {self.split!r}")


@dataclass(frozen=True, slots=True)
class Scores:
    """A guest's encrypted partial scores ``[[z_g]]`` on every row of a split, packed.

    ``privfl.crypto.packing.pack_plain`` puts several rows in each plaintext.
    """

    epoch: int
    split: str
    scores: BigInts

    def __post_init__(self) -> None:
        _require(self.split in SPLITS, f"unknown split {self.split!r}")


@dataclass(frozen=True, slots=True)
class Finish:
    """The Host ends the session; every party saves its own model and exits."""

    epochs: int
    reason: str


@dataclass(frozen=True, slots=True)
class Abort:
    """A party stops because of an error and tells its peers why, so nobody waits for it."""

    reason: str


Message = (
    Hello
    | PublicKey
    | Batch
    | Forward
    | Residual
    | CrossTerm
    | DecryptRequest
    | Decrypted
    | Loss
    | EpochResult
    | ScoreRequest
    | Scores
    | Finish
    | Abort
)

MESSAGE_TYPES: dict[Kind, type] = {
    Kind.HELLO: Hello,
    Kind.PUBLIC_KEY: PublicKey,
    Kind.BATCH: Batch,
    Kind.FORWARD: Forward,
    Kind.RESIDUAL: Residual,
    Kind.CROSS_TERM: CrossTerm,
    Kind.DECRYPT_REQUEST: DecryptRequest,
    Kind.DECRYPTED: Decrypted,
    Kind.LOSS: Loss,
    Kind.EPOCH_RESULT: EpochResult,
    Kind.SCORE_REQUEST: ScoreRequest,
    Kind.SCORES: Scores,
    Kind.FINISH: Finish,
    Kind.ABORT: Abort,
}
KIND_OF: dict[type, Kind] = {cls: kind for kind, cls in MESSAGE_TYPES.items()}


def kind_of(message: object) -> Kind:
    """The kind of a message object."""
    try:
        return KIND_OF[type(message)]
    except KeyError as exc:
        raise ProtocolError(f"{type(message).__name__} is not a protocol message") from exc
