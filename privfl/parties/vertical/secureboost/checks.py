"""The SecureBoost Host's checks of what a guest decrypts to: histograms and partitions.

The Host knows every row's quantised ``g`` and ``h`` and every node's rows, so it can
hold a guest's decrypted histogram to what any honest binning of those rows would
give, and a guest's partition to the sums of the candidate that won. A guest that
sends something else is deviating: a crafted histogram (sums of ciphertext
*differences*, ``[[P_i]]/[[P_r]]``) lets it steer ``best_split`` so that the winning
column and bin it is told encode the labels of rows it picked
(tests/attacks/test_secureboost_crafted.py). The histogram checks hold every bin to
a sum some set of the node's rows could have; the partition check ties the winning
candidate to the rows that actually go left, so a guest that crafts a winner is
caught at that node's partition, before it is told any other split
(docs/protocol.md §6.9, docs/security.md "Vertical SecureBoost").
"""

from __future__ import annotations

import numpy as np

from privfl.errors import ProtocolError
from privfl.learning.secureboost import Histogram


def node_sums(g: np.ndarray, h: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``(Σg, Σh, count)`` over ``rows``, exact int64 (the fixed-point encoding)."""
    return np.array([int(g[rows].sum()), int(h[rows].sum()), len(rows)], dtype=np.int64)


def check_histogram(
    guest: str, node: int, hist: Histogram, g: np.ndarray, h: np.ndarray, rows: np.ndarray
) -> None:
    """Every column totals the node; every bin lies within what its count of rows can sum to.

    Counts and ``Σh`` are never negative after decoding (they are bit fields), so the
    cumulative sums are monotone in count and ``Σh``; the bounds below also make an
    empty bin all zero and keep each bin's ``Σg``, ``Σh`` between ``count`` times the
    node's smallest and largest row value.
    """
    if not (hist.sum(axis=1) == node_sums(g, h, rows)).all():
        raise ProtocolError(
            f"{guest}'s histogram of node {node} does not total the node's rows: the guest "
            f"deviated from the protocol; the session stops"
        )
    count = hist[..., 2]
    for field, values in ((0, g[rows]), (1, h[rows])):
        low, high = int(values.min()), int(values.max())
        if ((hist[..., field] < count * low) | (hist[..., field] > count * high)).any():
            raise ProtocolError(
                f"{guest}'s histogram of node {node} has a bin no set of the node's rows "
                f"can sum to: the guest deviated from the protocol; the session stops"
            )


def check_partition(
    guest: str, node: int, left_sums: np.ndarray, g: np.ndarray, h: np.ndarray, rows: np.ndarray
) -> None:
    """The rows a guest sends left must sum to the winning candidate's decrypted left sums."""
    if not (node_sums(g, h, rows) == left_sums).all():
        raise ProtocolError(
            f"{guest}'s partition of node {node} does not match the histogram its split won "
            f"with: the guest deviated from the protocol; the session stops"
        )


def candidate_left(hist: Histogram, features: np.ndarray, feature: int, bin_: int) -> np.ndarray:
    """``(G_L, H_L, count_L)`` of the split "column ``feature``, bin ``<= bin_``"."""
    column = int(np.searchsorted(features, feature))
    return np.asarray(hist[column, : bin_ + 1].sum(axis=0), dtype=np.int64)
