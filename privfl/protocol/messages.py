"""Every message of the vertical protocol as a frozen dataclass, with its kind and envelope."""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass

import numpy as np

from privfl.crypto.encoding import LOSS_FACTOR
from privfl.errors import ProtocolError
from privfl.protocol.bigints import EMPTY
from privfl.protocol.bigints import BigInts as BigInts
from privfl.protocol.boost_messages import (
    BoostCandidates,
    BoostDecide,
    BoostDecisions,
    BoostGradients,
    BoostHistogram,
    BoostMasked,
    BoostNodes,
    BoostPartition,
    BoostProof,
    BoostReveal,
    BoostRevealed,
    BoostSplit,
)
from privfl.protocol.bounds import MAX_COUNT, MAX_KEY_BITS, MAX_SCALE_BITS, count, text
from privfl.protocol.hfl_messages import (
    JoinRequest,
    RoundDone,
    RoundEnd,
    RoundStart,
    Sealed,
    Shuffled,
    ShuffleWindow,
    Update,
)
from privfl.protocol.secagg_messages import (
    SecAdvertise,
    SecConsistency,
    SecMasked,
    SecNeighbours,
    SecShares,
    SecSurvivors,
    SecUnmask,
)

PROTOCOL = "privfl"
VERSION = 7
PURPOSES = ("gradient", "scores")
SPLITS = ("train", "test")
VERDICTS = ("", "converged", "diverged", "max_epochs")  # EpochResult.reason
# AuditHead.stage: during the session; our part is over (no message but heads follows);
# our last head, sent once every peer's HEAD_DONE is recorded (docs/protocol.md §11).
HEAD_DURING, HEAD_DONE, HEAD_LAST = 0, 1, 2
HEAD_STAGES = (HEAD_DURING, HEAD_DONE, HEAD_LAST)
MIN_LOSS_DENOMINATOR = LOSS_FACTOR  # the Host sends [[8·b·L]] for a batch of b >= 1 rows


class Kind(enum.StrEnum):
    """The kind of a message, carried in the envelope and checked before the body is decoded."""

    HELLO = "hello"
    PUBLIC_KEY = "public_key"
    PLAN_REVEAL = "plan_reveal"
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
    AUDIT_HEAD = "audit_head"
    # PSI and prediction
    PSI_HELLO = "psi_hello"
    PSI_QUERY = "psi_query"
    PSI_ANSWER = "psi_answer"
    PSI_RESULT = "psi_result"
    # horizontal mode (bodies in hfl_messages.py)
    JOIN = "join"
    ROUND_START = "round_start"
    UPDATE = "update"
    ROUND_DONE = "round_done"
    SEALED = "sealed"
    SHUFFLE_WINDOW = "shuffle_window"
    SHUFFLED = "shuffled"
    ROUND_END = "round_end"
    # --- checkpoint / resume (issue 3) ---
    CHECKPOINTS = "checkpoints"
    RESUME = "resume"
    # --- vertical SecureBoost (bodies in boost_messages.py) ---
    BOOST_GRADIENTS = "boost_gradients"
    BOOST_NODES = "boost_nodes"
    BOOST_HISTOGRAM = "boost_histogram"
    BOOST_SPLIT = "boost_split"
    BOOST_PARTITION = "boost_partition"
    BOOST_DECIDE = "boost_decide"
    BOOST_DECISIONS = "boost_decisions"
    BOOST_MASKED = "boost_masked"
    # liveness: a party in a long step says how far it is (busy is not dead)
    PROGRESS = "progress"
    BOOST_PROOF = "boost_proof"
    # hidden instance space: oblivious split selection (secureboost/oblivious.py)
    BOOST_CANDIDATES = "boost_candidates"
    BOOST_REVEAL = "boost_reveal"
    BOOST_REVEALED = "boost_revealed"
    # networked SecAgg+ (bodies in secagg_messages.py; protocol v5, the agreement v6)
    SECAGG_ADVERTISE = "secagg_advertise"
    SECAGG_NEIGHBOURS = "secagg_neighbours"
    SECAGG_SHARES = "secagg_shares"
    SECAGG_MASKED = "secagg_masked"
    SECAGG_SURVIVORS = "secagg_survivors"
    SECAGG_UNMASK = "secagg_unmask"
    SECAGG_CONSISTENCY = "secagg_consistency"


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


def _position(epoch: int, batch: int = 0) -> None:
    """Epoch and batch numbers: non-negative and bounded (range-checked, never trusted)."""
    count(epoch, "epoch")
    count(batch, "batch")


def _is_sha256_hex(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


# One ``name=digest`` pair of ``Hello.job_sections``: a job key or ``parties.<party>``.
_SECTION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,80}=[0-9a-f]{16}")


@dataclass(frozen=True, slots=True)
class Hello:
    """A party announces itself to the Server and the Host and proves it runs the same job.

    ``train_rows``: how many of the ``rows`` are training rows (0: not said, and then
    the Server derives it from ``rows``; with an id column the split is by id).
    """

    role: str
    job_fingerprint: str
    rows: int
    features: int
    rows_digest: str = ""  # issue 13: commitment to the ordered row ids ("" = none)
    train_rows: int = 0  # the agreed training rows (0 = the job's own split of ``rows``)
    # A digest per job section (config/core.py: section_digests), so that a receiver
    # whose fingerprint differs can name the sections; "" = not sent (older peers).
    job_sections: str = ""
    # The batch plan's commit and reveal (docs/protocol.md §6.1a): SHA-256 of the party's
    # seed share, "" = none (the Server and SecureBoost parties send none).
    plan_commit: str = ""

    def __post_init__(self) -> None:
        _require(self.role in ("server", "host", "guest"), f"unknown role {self.role!r}")
        _require(
            self.plan_commit == "" or _is_sha256_hex(self.plan_commit),
            "plan_commit is empty or 64 lowercase hex digits",
        )
        text(self.job_fingerprint, "job_fingerprint", 128)
        text(self.job_sections, "job_sections")
        _require(
            all(_SECTION.fullmatch(item) for item in self.job_sections.split(",") if item)
            and not self.job_sections.endswith(","),
            "job_sections is comma-separated name=16-hex-digit pairs",
        )
        count(self.rows, "rows")
        count(self.features, "features")
        count(self.train_rows, "train_rows", 0, self.rows)
        _require(
            self.rows_digest == "" or _is_sha256_hex(self.rows_digest),
            "rows_digest is empty or 64 lowercase hex digits",
        )


@dataclass(frozen=True, slots=True)
class PublicKeyMessage:
    """The Server's Paillier public key (the private key never leaves the Server).

    ``h_s`` is the DJN generator every party must use for ``obfuscation = "djn"``;
    0 (the default, and what a sender without DJN omits) means standard ``r^n``.
    """

    n: int
    bits: int
    h_s: int = 0  # performance (issue 4): DJN short-exponent obfuscation
    # Every plan commitment the Server received in a Hello, ``party=hex,…`` (§6.1a): the
    # Host cannot show a guest other commitments than it sent the Server. "" = none.
    plan_commits: str = ""
    # To a guest of a GLM job with two or more guests only: its pairwise mask seeds,
    # ``guest=hex,…`` one 32-byte seed per other guest (crypto/guest_masks.py). "" = none.
    mask_seeds: str = ""
    # The N-th roots proving gcd(n, φ(n)) = 1 (crypto/modulus_proof.py); the receiver
    # checks their number and values before it uses the key.
    proof: BigInts = EMPTY

    def __post_init__(self) -> None:
        _pairs(self.plan_commits, "plan_commits", 64)
        _pairs(self.mask_seeds, "mask_seeds", 64)
        _require(all(v < self.n for v in self.proof.values), "a modulus proof root is >= n")
        _require(self.n > 0 and self.n % 2 == 1, "a Paillier modulus is a positive odd number")
        count(self.bits, "key bits", 1, MAX_KEY_BITS)
        _require(self.n.bit_length() <= MAX_KEY_BITS, f"modulus longer than {MAX_KEY_BITS} bits")
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
        _position(self.epoch, self.batch)
        count(self.n_batches, "n_batches", 1)
        _require(self.batch < self.n_batches, "batch number out of range")
        if self.indices is not None:
            _require(self.indices.ndim == 1 and self.indices.dtype == np.int64, "bad indices")
            _require(len(self.indices) <= MAX_COUNT, "too many indices")
            _require(bool((self.indices >= 0).all()), "batch indices must be >= 0")


@dataclass(frozen=True, slots=True)
class Forward:
    """A guest's encrypted partial scores ``[[z_g]]`` and ``[[Σ z_g²]]`` for the batch."""

    epoch: int
    batch: int
    scores: BigInts
    sum_squares: BigInts

    def __post_init__(self) -> None:
        _position(self.epoch, self.batch)
        _require(len(self.sum_squares) == 1, "sum_squares is one ciphertext")


@dataclass(frozen=True, slots=True)
class Residual:
    """The Host's encrypted residual ``[[4d]]`` and, with several guests, the others' scores."""

    epoch: int
    batch: int
    residual: BigInts
    others: BigInts | None

    def __post_init__(self) -> None:
        _position(self.epoch, self.batch)


@dataclass(frozen=True, slots=True)
class CrossTerm:
    """A guest's ``[[Σ_i z_g,i · (Z_i − z_g,i)]]`` so the Host can assemble the exact loss."""

    epoch: int
    batch: int
    value: BigInts

    def __post_init__(self) -> None:
        _position(self.epoch, self.batch)
        _require(len(self.value) == 1, "a cross term is one ciphertext")


@dataclass(frozen=True, slots=True)
class _MaskedValues:
    """The body DecryptRequest and Decrypted share: a batch position, a purpose, values."""

    epoch: int
    batch: int
    purpose: str
    values: BigInts

    def __post_init__(self) -> None:
        _position(self.epoch, self.batch)
        _require(self.purpose in PURPOSES, f"unknown purpose {self.purpose!r}")


@dataclass(frozen=True, slots=True)
class DecryptRequest(_MaskedValues):
    """Masked ciphertexts the Server is asked to decrypt (it cannot tell them from noise)."""


@dataclass(frozen=True, slots=True)
class Decrypted(_MaskedValues):
    """The Server's plaintext residues of a DecryptRequest, in the same order."""


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
        _position(self.epoch, self.batch)
        count(self.n_batches, "n_batches", 1)
        _require(self.batch < self.n_batches, "batch number out of range")
        _require(len(self.value) == 1, "a loss is one ciphertext")
        # [[8·b·L]]: a multiple of 8, at least 8 (never a zero or negative divisor).
        count(self.denominator, "loss denominator", MIN_LOSS_DENOMINATOR, LOSS_FACTOR * MAX_COUNT)
        _require(
            self.denominator % LOSS_FACTOR == 0, "the loss denominator is 8 times the batch size"
        )
        count(self.scale_bits, "loss scale_bits", 0, MAX_SCALE_BITS)


@dataclass(frozen=True, slots=True)
class EpochResult:
    """The Server's verdict after an epoch: the mean Taylor loss and whether to stop."""

    epoch: int
    loss: float
    stop: bool
    reason: str

    def __post_init__(self) -> None:
        count(self.epoch, "epoch")
        _require(not math.isnan(self.loss), "loss is NaN")
        _require(self.reason in VERDICTS, f"unknown verdict {self.reason[:40]!r}")


@dataclass(frozen=True, slots=True)
class ScoreRequest:
    """The Host asks every guest for its encrypted scores on a split (evaluation)."""

    epoch: int
    split: str

    def __post_init__(self) -> None:
        count(self.epoch, "epoch")
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
        count(self.epoch, "epoch")
        _require(self.split in SPLITS, f"unknown split {self.split!r}")


@dataclass(frozen=True, slots=True)
class PlanReveal:
    """Seed shares of the batch plan (docs/protocol.md §6.1a), ``party=hex,…``: a guest's
    own to the Host, then the Host's and every guest's to each guest."""

    shares: str

    def __post_init__(self) -> None:
        _pairs(self.shares, "shares", 64)
        _require(bool(self.shares), "a plan reveal holds at least one share")


def _pairs(value: str, name: str, digits: int) -> None:
    """``party=hex,…`` with ``digits`` lowercase hex digits each, no party twice."""
    text(value, name)
    items = [item for item in value.split(",") if item]
    _require(
        all(_PAIR.fullmatch(item) and len(item.split("=", 1)[1]) == digits for item in items)
        and not value.endswith(",")
        and len({item.split("=", 1)[0] for item in items}) == len(items),
        f"{name} is comma-separated party=hex pairs, each party once",
    )


_PAIR = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,80}=[0-9a-f]+")


@dataclass(frozen=True, slots=True)
class Finish:
    """The Host ends the session; every party saves its own model and exits."""

    epochs: int
    reason: str

    def __post_init__(self) -> None:
        count(self.epochs, "epochs")
        text(self.reason, "reason", 256)


@dataclass(frozen=True, slots=True)
class Abort:
    """A party stops because of an error and tells its peers why, so nobody waits for it."""

    reason: str

    def __post_init__(self) -> None:
        text(self.reason, "reason")


@dataclass(frozen=True, slots=True)
class Progress:
    """A party in a long step tells its peers what it does and how far it is.

    Its peers wait as long as some party's progress advances (docs/protocol.md §6.4):
    only silence (the liveness grace) or no progress for the job's timeout ends a wait.
    It carries no data: a step name and two counters.
    """

    step: str
    done: int
    total: int

    def __post_init__(self) -> None:
        text(self.step, "step", 64)
        count(self.total, "total")
        count(self.done, "done", 0, self.total)


@dataclass(frozen=True, slots=True)
class AuditHead:
    """The head of the sender's audit chain: its first ``seq`` lines end in one whose
    sha256 is ``head``. The receiver records it in its own chain (parties/audit.py), so
    the sender cannot later rewrite those lines alone. ``stage`` marks the closing
    exchange (HEAD_DONE, HEAD_LAST); 0 is a head sent during the session."""

    seq: int
    head: str
    stage: int = 0

    def __post_init__(self) -> None:
        count(self.seq, "seq")
        _require(self.seq >= 1, "an audit head covers at least one line")
        _require(_is_sha256_hex(self.head), "head must be 64 lowercase hex digits")
        _require(self.stage in HEAD_STAGES, f"stage must be one of {HEAD_STAGES}")


# PSI and prediction


@dataclass(frozen=True, slots=True)
class PsiHello:
    """A guest opens the intersection: its method, its RSA public key (0 for ECDH), its size."""

    method: str
    modulus: int
    exponent: int
    count: int

    def __post_init__(self) -> None:
        _require(self.method in ("rsa", "ecdh"), f"unknown PSI method {self.method!r}")
        _require(self.modulus >= 0 and self.exponent >= 0 and self.count >= 0, "bad PSI hello")
        count(self.count, "PSI count")
        _require(self.modulus.bit_length() <= MAX_KEY_BITS, "PSI modulus too long")
        _require(self.exponent.bit_length() <= MAX_KEY_BITS + 1, "PSI exponent too long")
        if self.method == "rsa":
            _require(self.modulus % 2 == 1 and self.exponent % 2 == 1, "bad RSA public key")


@dataclass(frozen=True, slots=True)
class PsiQuery:
    """The Host's blinded id hashes (RSA) or ``[a]H(id)`` (ECDH) for one guest to process."""

    values: BigInts


@dataclass(frozen=True, slots=True)
class PsiAnswer:
    """The guest's processed query (same order) and its own id tags (shuffled)."""

    values: BigInts
    tags: BigInts


@dataclass(frozen=True, slots=True)
class PsiResult:
    """Positions in the guest's tag list of the ids every party holds, in the agreed order."""

    positions: np.ndarray

    def __post_init__(self) -> None:
        _require(self.positions.ndim == 1 and self.positions.dtype == np.int64, "bad PSI positions")
        _require(bool((self.positions >= 0).all()), "PSI positions must be >= 0")


# --- checkpoint / resume (issue 3) ---
MAX_CHECKPOINTS_OFFERED = 64


@dataclass(frozen=True, slots=True)
class Checkpoints:
    """A party tells the Host which epoch checkpoints it holds (empty: start from scratch).

    ``completed`` lists numbers of completed epochs, each ≥ 1, as int64.
    """

    completed: np.ndarray

    def __post_init__(self) -> None:
        c = self.completed
        _require(c.ndim == 1 and c.dtype == np.int64, "completed must be a 1-D int64 array")
        _require(len(c) <= MAX_CHECKPOINTS_OFFERED, "too many checkpoints offered")
        _require(bool((c >= 1).all()) and bool((c <= MAX_COUNT).all()), "completed out of range")


@dataclass(frozen=True, slots=True)
class Resume:
    """The Host's decision: every party continues after ``completed`` epochs (0 = from scratch)."""

    completed: int

    def __post_init__(self) -> None:
        count(self.completed, "completed epochs")


Message = (
    Hello
    | PublicKeyMessage
    | PlanReveal
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
    | AuditHead
    | PsiHello
    | PsiQuery
    | PsiAnswer
    | PsiResult
    # horizontal mode
    | JoinRequest
    | RoundStart
    | Update
    | RoundDone
    | Sealed
    | ShuffleWindow
    | Shuffled
    | RoundEnd
    | Checkpoints
    | Resume
    | BoostGradients
    | BoostNodes
    | BoostHistogram
    | BoostSplit
    | BoostPartition
    | BoostDecide
    | BoostDecisions
    | BoostMasked
    | Progress
    | BoostProof
    | BoostCandidates
    | BoostReveal
    | BoostRevealed
    | SecAdvertise
    | SecNeighbours
    | SecShares
    | SecMasked
    | SecSurvivors
    | SecUnmask
    | SecConsistency
)

MESSAGE_TYPES: dict[Kind, type] = {
    Kind.HELLO: Hello,
    Kind.PUBLIC_KEY: PublicKeyMessage,
    Kind.PLAN_REVEAL: PlanReveal,
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
    Kind.AUDIT_HEAD: AuditHead,
    # PSI and prediction
    Kind.PSI_HELLO: PsiHello,
    Kind.PSI_QUERY: PsiQuery,
    Kind.PSI_ANSWER: PsiAnswer,
    Kind.PSI_RESULT: PsiResult,
    # horizontal mode
    Kind.JOIN: JoinRequest,
    Kind.ROUND_START: RoundStart,
    Kind.UPDATE: Update,
    Kind.ROUND_DONE: RoundDone,
    Kind.SEALED: Sealed,
    Kind.SHUFFLE_WINDOW: ShuffleWindow,
    Kind.SHUFFLED: Shuffled,
    Kind.ROUND_END: RoundEnd,
    # --- checkpoint / resume (issue 3) ---
    Kind.CHECKPOINTS: Checkpoints,
    Kind.RESUME: Resume,
    # --- vertical SecureBoost ---
    Kind.BOOST_GRADIENTS: BoostGradients,
    Kind.BOOST_NODES: BoostNodes,
    Kind.BOOST_HISTOGRAM: BoostHistogram,
    Kind.BOOST_SPLIT: BoostSplit,
    Kind.BOOST_PARTITION: BoostPartition,
    Kind.BOOST_DECIDE: BoostDecide,
    Kind.BOOST_DECISIONS: BoostDecisions,
    Kind.BOOST_MASKED: BoostMasked,
    # --- liveness ---
    Kind.PROGRESS: Progress,
    Kind.BOOST_PROOF: BoostProof,
    Kind.BOOST_CANDIDATES: BoostCandidates,
    Kind.BOOST_REVEAL: BoostReveal,
    Kind.BOOST_REVEALED: BoostRevealed,
    # --- networked SecAgg+ ---
    Kind.SECAGG_ADVERTISE: SecAdvertise,
    Kind.SECAGG_NEIGHBOURS: SecNeighbours,
    Kind.SECAGG_SHARES: SecShares,
    Kind.SECAGG_MASKED: SecMasked,
    Kind.SECAGG_SURVIVORS: SecSurvivors,
    Kind.SECAGG_UNMASK: SecUnmask,
    Kind.SECAGG_CONSISTENCY: SecConsistency,
}
KIND_OF: dict[type, Kind] = {cls: kind for kind, cls in MESSAGE_TYPES.items()}


def kind_of(message: object) -> Kind:
    """The kind of a message object."""
    try:
        return KIND_OF[type(message)]
    except KeyError as exc:
        raise ProtocolError(f"{type(message).__name__} is not a protocol message") from exc
