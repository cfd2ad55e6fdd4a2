"""The shipped hidden-instance-space vector (hidden.json) against our code and the spec's text.

docs/protocol.md §6.9 ("Direct nodes and lanes", `boost_masked`, `boost_histogram`) is
transcribed below in plain Python, apart from privfl's modules, so the document, the
vector and the code cannot drift apart.
"""

from __future__ import annotations

from hidden_vectors import level_vector

from privfl.tools.conformance.vectors import load

VECTOR = load("hidden.json")


def test_our_code_still_gives_the_shipped_vector() -> None:
    assert level_vector() == VECTOR


def test_the_spec_text_gives_the_shipped_vector() -> None:
    # Prepare: §6.9's definitions, written from the text
    v = VECTOR
    rows, nodes, k, slot = v["rows"], v["nodes"], v["k"], v["slot"]
    count_bits = max(1, len(rows).bit_length())
    h_bits = 20 + 1 + count_bits
    assert slot == count_bits + 2 * h_bits and k == (v["key_bits"] - 1) // slot
    named = set(nodes)
    direct = [n for n in sorted(named) if n != 0 and not (n % 2 == 0 and n - 1 in named)]
    lanes = [direct[i : i + k] for i in range(0, len(direct), k)]
    plain = [
        ((g + 2**20) << (h_bits + count_bits)) + (h << count_bits) + 1
        for g, h in zip(v["g"], v["h"], strict=True)
    ]

    # Act: the Host's lane plaintexts, row by row; the guest's packed bin sums, lane by lane
    masked = [
        plain[r] << (slot * lane.index(v["node"][r])) if v["node"][r] in lane else 0
        for lane in lanes
        for r in range(len(rows))
    ]
    histogram = []
    for j, lane in enumerate(lanes):
        m = len(lane)
        blocks = [
            sum(masked[j * len(rows) + r] for r in range(len(rows)) if v["bins"][r][c] == b)
            for c in range(2)
            for b in range(3)
        ]
        per = k // m
        for start in range(0, len(blocks), per):
            group = blocks[start : start + per]
            histogram.append(sum(x << (slot * m * i) for i, x in enumerate(group)))

    # Assert
    assert (direct, lanes) == (v["direct"], v["lanes"])
    assert [len(lane) for lane in lanes] == [7, 1]
    assert [hex(p) for p in plain] == v["row_plaintexts"]
    assert [hex(p) for p in masked] == v["masked_plaintexts"]
    assert [hex(p) for p in histogram] == v["histogram_plaintexts"]
    assert all(p < 2 ** (v["key_bits"] - 1) for p in masked + histogram)  # never reduced mod n
