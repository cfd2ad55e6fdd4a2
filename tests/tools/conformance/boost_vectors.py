"""Vectors of what a SecureBoost guest computes as the Host does: the column sample, the bin
edges and thresholds, the packed histogram's slots (docs/protocol.md §6.9).

``python tests/tools/conformance/boost_vectors.py`` writes ``boost.json`` in
``privfl/tools/conformance/vectors/``; test_boost_vectors.py checks that our code still gives
exactly these values and recomputes them from the text of §6.9. Regenerate only for a
deliberate change (a new protocol version).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost.common import OFFSET, Layout, pack_sums, unpack_sums
from privfl.tools.conformance.vectors import DIR

# (seed, tree, group, features, colsample): the worked example, ties of the count (half to
# even), K = 1, no draw, both branches of numpy's choice (Floyd's; the tail shuffle).
COLSAMPLE_CASES = [
    (0, 0, 1, 10, 0.66),
    (0, 0, 0, 10, 0.66),
    (0, 1, 1, 10, 0.66),
    (0, 0, 2, 10, 0.66),
    (7, 3, 1, 5, 0.5),
    (7, 3, 1, 7, 0.5),
    (7, 3, 1, 5, 0.7),
    (7, 3, 1, 5, 0.1),
    (7, 3, 1, 5, 1.0),
    (7, 3, 1, 0, 0.5),
    (12345, 9, 3, 30, 0.8),
    (2**40 + 5, 2, 1, 100, 0.33),
    (1, 0, 1, 20000, 0.01),
    (1, 0, 1, 10001, 0.03),
]
# The wrong rules an outside guest tried, on the worked example (seed 0, tree 0, guest-1).
WRONG_RULES = {
    "first K columns": list(range(7)),
    "floor of the count": [
        int(v) for v in np.random.default_rng([0, 0, 2]).choice(10, 6, replace=False)
    ],
    "entropy [seed, tree, group]": [
        int(v) for v in np.random.default_rng([0, 0, 1]).choice(10, 7, replace=False)
    ],
    "entropy [seed, tree]": [
        int(v) for v in np.random.default_rng([0, 0]).choice(10, 7, replace=False)
    ],
}

# A column with ties, a constant stretch and a negative tail; 8 bins so edges repeat.
BIN_COLUMN = [3.0, -1.5, 2.0, 2.0, 2.0, 7.25, 0.0, 2.0, 11.0, -4.0, 2.5, 6.0, 2.0]
BIN_TEST = [-10.0, 2.0, 2.0000001, 5.0, 100.0]
BINS = 8

# Packing: three nodes' worth of sums at a tree of 426 rows and a 512-bit key (k = 7).
PACK_ROWS, PACK_KEY_BITS = 426, 512


def colsample_vector() -> dict[str, Any]:
    cases = []
    for seed, tree, group, features, colsample in COLSAMPLE_CASES:
        params = sb.BoostParams(colsample=colsample, seed=seed)
        columns = sb.tree_features(params, tree, group, features)
        cases.append(
            {
                "seed": seed,
                "tree": tree,
                "group": group,
                "features": features,
                "colsample": colsample,
                "columns": [int(c) for c in columns],
            }
        )
    generator = np.random.PCG64(np.random.SeedSequence([0, 0, 2]))
    return {
        "cases": cases,
        "example_entropy": [0, 0, 2],
        "example_first_outputs": [hex(int(v)) for v in generator.random_raw(4)],
        "wrong_rules_on_the_example": {k: sorted(v) for k, v in WRONG_RULES.items()},
    }


def bins_vector() -> dict[str, Any]:
    x = np.array(BIN_COLUMN, dtype=np.float64)[:, None]
    mean, std = x.mean(axis=0), x.std(axis=0)
    train = (x - mean) / std
    test = (np.array(BIN_TEST)[:, None] - mean) / std
    edges = sb.quantile_edges(train, BINS)
    return {
        "bins": BINS,
        "raw_train": BIN_COLUMN,
        "mean": float(mean[0]),
        "std": float(std[0]),
        "standardised_train": [float(v).hex() for v in train[:, 0]],
        "edges": [float(v).hex() for v in edges[0]],
        "train_bins": [int(b) for b in sb.bin_columns(train, edges)[:, 0]],
        "raw_test": BIN_TEST,
        "test_bins": [int(b) for b in sb.bin_columns(test, edges)[:, 0]],
        "thresholds": {str(b): float(edges[0][b]) for b in range(BINS - 1)},
    }


def packing_vector() -> dict[str, Any]:
    layout = Layout(PACK_ROWS, PACK_KEY_BITS)
    rng = np.random.default_rng(31)
    count = 2 * layout.per_ciphertext + 3  # two full plaintexts and a short last one
    c = rng.integers(0, 20, count)
    g = np.array([int(rng.integers(-OFFSET, OFFSET + 1)) * int(n) // 2 for n in c])
    h = np.array([int(rng.integers(0, OFFSET // 4 + 1)) * int(n) for n in c])
    cb, hb = layout.count_bits, layout.h_bits
    triples = list(zip(g.tolist(), h.tolist(), c.tolist(), strict=True))
    slots = [((gi + ci * OFFSET) << (hb + cb)) | (hi << cb) | ci for gi, hi, ci in triples]
    # Trivial encryptions (1 + m·n mod n²) pack to the trivial encryption of the plaintext.
    n = (1 << (PACK_KEY_BITS - 1)) + 1  # any n of |n| bits will do for the layout
    packed = pack_sums([(1 + s * n) % (n * n) for s in slots], layout, n * n)
    plain = [(p - 1) // n for p in packed]
    assert unpack_sums(plain, count, layout).tolist() == np.stack([g, h, c], 1).tolist()
    return {
        "rows": PACK_ROWS,
        "key_bits": PACK_KEY_BITS,
        "count_bits": cb,
        "h_bits": hb,
        "slot": layout.slot,
        "per_ciphertext": layout.per_ciphertext,
        "sums": [list(t) for t in triples],
        "plaintexts": [hex(p) for p in plain],
    }


def boost_vector() -> dict[str, Any]:
    return {"colsample": colsample_vector(), "bins": bins_vector(), "packing": packing_vector()}


def write() -> None:
    text = json.dumps(boost_vector(), indent=1, ensure_ascii=False)
    (DIR / "boost.json").write_text(text + "\n", encoding="utf-8")
    print(f"wrote {DIR / 'boost.json'}", file=sys.stderr)


if __name__ == "__main__":
    write()
