"""Messages of vertical SecureBoost (imported and registered by messages.py).

The Host (label holder) holds the Paillier key; the guests send it encrypted
per-bin sums and learn the node partitions. docs/protocol.md §6.9 gives the order
and rules, docs/security.md what each receiver learns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privfl.errors import ProtocolError
from privfl.protocol.bigints import EMPTY, BigInts
from privfl.protocol.bounds import MAX_COUNT, count

DECISION_SPLITS = ("train", "test", "rows")  # rows: the new rows of a prediction session
MAX_NODE = 2**20  # heap ids: depth <= 19


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise ProtocolError(what)


def _int_vector(values: np.ndarray, what: str) -> None:
    _require(values.ndim == 1 and values.dtype == np.int64, f"{what} must be a 1-d int64 array")
    _require(len(values) <= MAX_COUNT, f"too many {what}")
    _require(bool((values >= 0).all()), f"{what} must be >= 0")


def _nodes(values: np.ndarray) -> None:
    _int_vector(values, "nodes")
    _require(bool((values < MAX_NODE).all()), "node id out of range")
    _require(len(np.unique(values)) == len(values), "a node is named twice")


@dataclass(frozen=True, slots=True)
class BoostGradients:
    """The Host's packed ``[[g, h, 1]]`` per row of one tree (fresh encryptions), and the rows."""

    tree: int
    rows: np.ndarray  # sorted training-row positions of the tree (row subsample)
    values: BigInts  # one ciphertext per row

    def __post_init__(self) -> None:
        count(self.tree, "tree")
        _int_vector(self.rows, "rows")
        _require(bool((np.diff(self.rows) > 0).all()), "rows must be strictly increasing")


@dataclass(frozen=True, slots=True)
class BoostNodes:
    """The Host names the open nodes of one level whose histograms it needs."""

    tree: int
    level: int
    nodes: np.ndarray

    def __post_init__(self) -> None:
        count(self.tree, "tree")
        count(self.level, "level", 0, 19)
        _nodes(self.nodes)


@dataclass(frozen=True, slots=True)
class BoostMasked:
    """Hidden instance space: a level's open nodes and, for ``direct`` ones, masked ciphertexts.

    ``values`` holds ``len(direct) × rows`` fresh ciphertexts, node-major, in the tree's
    row order: a row of the node carries its ``[[g, h, 1]]``, any other row ``[[0]]``.
    A named node not in ``direct`` is its parent's sums ÷ its direct sibling's.
    """

    tree: int
    level: int
    nodes: np.ndarray
    direct: np.ndarray
    values: BigInts

    def __post_init__(self) -> None:
        count(self.tree, "tree")
        count(self.level, "level", 0, 19)
        _nodes(self.nodes)
        _nodes(self.direct)
        _require(bool(np.isin(self.direct, self.nodes).all()), "a direct node is not named")


@dataclass(frozen=True, slots=True)
class BoostProof:
    """The Host check (``host_check``): proofs on a tree's row ciphertexts or a level's masks.

    Level 0 follows ``boost_gradients``: ``values`` holds each row's bit encryptions
    (``rows × bits``), ``roots`` one opening per row. Level ≥ 1 follows ``boost_masked``:
    ``values`` holds one 0/1 indicator per masked ciphertext, ``counts`` and ``roots``
    one per direct node. ``commits``/``split``/``responses``: the OR-proofs, 2/1/2 per
    bit or indicator (docs/protocol.md §6.9, parties/vertical/secureboost/proofs.py).
    """

    tree: int
    level: int
    values: BigInts
    commits: BigInts
    split: BigInts
    responses: BigInts
    roots: BigInts
    counts: np.ndarray

    def __post_init__(self) -> None:
        count(self.tree, "tree")
        count(self.level, "level", 0, 19)
        _int_vector(self.counts, "counts")
        m = len(self.values)
        _require(len(self.split) == m, "one challenge share per proven ciphertext")
        _require(len(self.commits) == len(self.responses) == 2 * m, "two branches per proof")
        _require(self.level == 0 or len(self.roots) == len(self.counts), "a count per opening")


@dataclass(frozen=True, slots=True)
class BoostHistogram:
    """A guest's encrypted per-bin sums for the named nodes, packed, re-randomised."""

    tree: int
    level: int
    nodes: np.ndarray
    values: BigInts

    def __post_init__(self) -> None:
        count(self.tree, "tree")
        count(self.level, "level", 0, 19)
        _nodes(self.nodes)


@dataclass(frozen=True, slots=True)
class BoostSplit:
    """The Host tells the owner of the best split its column and bin (never a threshold)."""

    tree: int
    node: int
    feature: int
    bin: int

    def __post_init__(self) -> None:
        count(self.tree, "tree")
        count(self.node, "node", 0, MAX_NODE - 1)
        count(self.feature, "feature")
        count(self.bin, "bin")


@dataclass(frozen=True, slots=True)
class BoostPartition:
    """Which of a split node's rows (in ascending order) go left."""

    tree: int
    node: int
    left: np.ndarray  # bool, one per row of the node

    def __post_init__(self) -> None:
        count(self.tree, "tree")
        count(self.node, "node", 0, MAX_NODE - 1)
        _require(self.left.ndim == 1 and self.left.dtype == np.bool_, "left must be 1-d bool")


@dataclass(frozen=True, slots=True)
class BoostDecide:
    """The Host asks a guest for its split decisions on trees ``[tree, tree + trees)``."""

    tree: int
    trees: int
    split: str

    def __post_init__(self) -> None:
        count(self.tree, "tree")
        count(self.trees, "trees", 1)
        _require(self.split in DECISION_SPLITS, f"unknown split {self.split[:40]!r}")


@dataclass(frozen=True, slots=True)
class BoostDecisions:
    """A guest's left masks for each of its split nodes: ``nodes`` (k, 2) = (tree, node)."""

    tree: int
    split: str
    nodes: np.ndarray  # int64 (k, 2)
    left: np.ndarray  # bool (k, rows)

    def __post_init__(self) -> None:
        count(self.tree, "tree")
        _require(self.split in DECISION_SPLITS, f"unknown split {self.split[:40]!r}")
        n, left = self.nodes, self.left
        _require(n.ndim == 2 and n.shape[1] == 2 and n.dtype == np.int64, "nodes must be (k, 2)")
        _require(bool((n >= 0).all()) and bool((n[:, 1] < MAX_NODE).all()), "bad node id")
        _require(left.ndim == 2 and left.dtype == np.bool_, "left must be a 2-d bool array")
        _require(left.shape[0] == n.shape[0], "one row of decisions per node")


@dataclass(frozen=True, slots=True)
class BoostCandidates:
    """Hidden instance space: a guest's own key and its candidate left sets under it.

    ``n``/``h_s``: the guest's Paillier public key (the job's size and obfuscation).
    ``values``: ``candidates × count`` ciphertexts, candidate-major, each candidate's
    left set over ``rows`` rows packed as oblivious.py says (training rows then
    held-out rows for ``split = "train"``; the new rows for ``"rows"``).
    ``proof``: the N-th roots proving ``gcd(n, φ(n)) = 1`` (crypto/modulus_proof.py).
    """

    n: int
    h_s: int
    split: str
    rows: int
    candidates: int
    values: BigInts
    proof: BigInts = EMPTY

    def __post_init__(self) -> None:
        _require(self.n > 0 and self.n % 2 == 1, "a Paillier modulus is a positive odd number")
        _require(all(v < self.n for v in self.proof.values), "a modulus proof root is >= n")
        _require(0 <= self.h_s < self.n * self.n, "the DJN generator h_s must lie in [0, n^2)")
        _require(self.split in ("train", "rows"), f"unknown split {self.split[:40]!r}")
        count(self.rows, "rows", 1)
        count(self.candidates, "candidates", 1)
        _require(len(self.values) % self.candidates == 0, "the same count per candidate")


@dataclass(frozen=True, slots=True)
class _NodeValues:
    """One split node's big integers (``boost_reveal`` and its answer share this shape)."""

    tree: int
    node: int
    values: BigInts

    def __post_init__(self) -> None:
        count(self.tree, "tree")
        count(self.node, "node", 0, MAX_NODE - 1)


@dataclass(frozen=True, slots=True)
class BoostReveal(_NodeValues):
    """The Host asks a guest to decrypt one split node's masked ciphertexts (its key)."""


@dataclass(frozen=True, slots=True)
class BoostRevealed(_NodeValues):
    """A guest's decryptions of one ``boost_reveal`` (uniform to it: the Host's masks)."""
