"""Known answers of the hidden instance space's layout (docs/protocol.md §6.9, `boost_masked`).

One level of 16 named nodes (level 4) over a 12-row tree with a 400-bit layout
(``k = 7`` bin sums per plaintext): the direct nodes, their lanes (7 + 1), every lane
plaintext the Host encrypts per row, and the plaintexts of the guest's packed
``boost_histogram`` for its bins of two columns, three bins — what an outside Host or
guest must compute before encrypting or after decrypting. No randomness: ciphertexts
are not part of it.

``python tests/tools/conformance/hidden_vectors.py`` writes ``hidden.json`` in
``privfl/tools/conformance/vectors/``; test_hidden_vectors.py checks that our code and a
transcription of the spec text still give exactly these values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from privfl.parties.vertical.secureboost import hidden
from privfl.parties.vertical.secureboost.common import Layout, pack_sums, row_plaintexts
from privfl.tools.conformance.vectors import DIR

ROWS, KEY_BITS, LEVEL, BINS = 12, 400, 4, 3
NODES = list(range(15, 31))


def inputs() -> dict[str, Any]:
    """Row gradients (fixed point), each row's node at level 4, the guest's bins."""
    rng = np.random.default_rng(31)
    return {
        "rows": list(range(0, 2 * ROWS, 2)),  # the tree's rows: every other training row
        "g": rng.integers(-(2**20), 2**20 + 1, ROWS).tolist(),
        "h": rng.integers(0, 2**18 + 1, ROWS).tolist(),
        "node": rng.choice(NODES, ROWS).tolist(),  # each row's node (of the Host's knowing)
        "bins": rng.integers(0, BINS, (ROWS, 2)).tolist(),  # the guest's bins, two columns
    }


def level_vector() -> dict[str, Any]:
    """The vector from our code: the Host's lane plaintexts, the guest's packed sums."""
    case = inputs()
    layout = Layout(ROWS, KEY_BITS)
    rows = np.array(case["rows"], np.int64)
    plain = row_plaintexts(np.array(case["g"]), np.array(case["h"]), layout)
    node = np.array(case["node"])
    members = {n: rows[node == n] for n in NODES}
    direct = hidden.direct_nodes(NODES)
    lanes = hidden.lanes(direct, layout)
    masked = hidden.level_plaintexts(plain, rows, members, lanes, layout.slot)
    # The guest's bin sums are plaintext sums here (what its ciphertext products decrypt to).
    histogram: list[int] = []
    for j, lane in enumerate(lanes):
        lane_rows = masked[j * ROWS : (j + 1) * ROWS]
        sums = [
            sum(p for p, b in zip(lane_rows, column, strict=True) if b == bin_)
            for column in np.array(case["bins"]).T.tolist()
            for bin_ in range(BINS)
        ]
        # pack_sums multiplies ciphertexts; on plaintexts, "mod n²" of 1 + n·P is a sum.
        histogram += plain_pack(sums, layout, len(lane))
    return {
        **case,
        "key_bits": KEY_BITS,
        "level": LEVEL,
        "nodes": NODES,
        "slot": layout.slot,
        "k": layout.per_ciphertext,
        "direct": direct,
        "lanes": lanes,
        "row_plaintexts": [hex(p) for p in plain],
        "masked_plaintexts": [hex(p) for p in masked],
        "histogram_plaintexts": [hex(p) for p in histogram],
    }


def plain_pack(sums: list[int], layout: Layout, span: int) -> list[int]:
    """:func:`pack_sums` on plaintexts: encrypt each as ``1 + n·P`` mod n² with a big n, unwrap."""
    n = 1 << (layout.key_bits + 8)  # no reduction happens below 2^(key_bits − 1)
    packed = pack_sums([1 + n * s for s in sums], layout, n * n, span)
    return [(c - 1) // n for c in packed]


def write() -> None:
    path = Path(DIR) / "hidden.json"
    path.write_text(json.dumps(level_vector(), indent=1) + "\n")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    write()
