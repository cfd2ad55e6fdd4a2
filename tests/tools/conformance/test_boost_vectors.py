"""The shipped boost.json holds: a SecureBoost guest's column sample, bin edges and
thresholds, and packed histogram slots (docs/protocol.md §6.9).

Each vector is recomputed from our code and from the rule as §6.9 writes it — the column
draw from PCG64's raw 64-bit outputs (no numpy ``choice``), the edges from the lerp rule
(no ``numpy.quantile``), the plaintexts from the slot formula — so the text, the vectors and
the code cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from boost_vectors import COLSAMPLE_CASES, boost_vector

from privfl.learning import secureboost as sb
from privfl.tools.conformance.vectors import load

VEC = load("boost.json")
WORD = 1 << 32


def test_our_code_still_gives_the_shipped_vectors() -> None:
    assert boost_vector() == VEC


def words(entropy: list[int]) -> Iterator[int]:
    """§6.9 step 3: the 32-bit words of PCG64(SeedSequence(entropy)), low half first."""
    generator = np.random.PCG64(np.random.SeedSequence(entropy))
    while True:
        output = int(generator.random_raw())
        yield output % WORD
        yield output // WORD


def uniform(stream: Iterator[int], j: int) -> int:
    """§6.9 step 4: u(j) in [0, j] by Lemire's method."""
    if j == 0:
        return 0
    m = next(stream) * (j + 1)
    while m % WORD < WORD % (j + 1):
        m = next(stream) * (j + 1)
    return m // WORD


def columns_by_the_text(
    seed: int, tree: int, group: int, features: int, colsample: float
) -> list[int]:
    """§6.9 *Columns of a tree*, steps 1–6."""
    if colsample >= 1 or features == 0:
        return list(range(features))
    count = max(1, round(colsample * features))
    stream = words([seed, tree, 1 + group])
    if features <= 10_000 or count <= features // 50:  # Floyd's algorithm
        chosen: list[int] = []
        for j in range(features - count, features):
            x = uniform(stream, j)
            chosen.append(j if x in chosen else x)
        return sorted(chosen)
    a = list(range(features))  # the tail shuffle
    for i in range(features - 1, max(features - count, 1) - 1, -1):
        j = uniform(stream, i)
        a[i], a[j] = a[j], a[i]
    return sorted(a[features - count :])


@pytest.mark.parametrize("index", range(len(COLSAMPLE_CASES)))
def test_the_column_sample_is_the_draw_section_6_9_writes(index: int) -> None:
    # Prepare
    case = VEC["colsample"]["cases"][index]
    args = (case["seed"], case["tree"], case["group"], case["features"], case["colsample"])

    # Act
    columns = columns_by_the_text(*args)

    # Assert
    assert columns == case["columns"]


def test_the_worked_example_of_section_6_9() -> None:
    vec = VEC["colsample"]
    first = [int(v, 16) for v in vec["example_first_outputs"]]
    stream = words(vec["example_entropy"])

    picks = [next(stream) for _ in range(3)]

    assert first[:2] == [0x9F5EF96338C3C700, 0x6D635D7A5943AE34]
    assert picks == [0x38C3C700, 0x9F5EF963, 0x5943AE34]
    assert columns_by_the_text(0, 0, 1, 10, 0.66) == [0, 2, 3, 4, 5, 6, 8]
    assert vec["wrong_rules_on_the_example"] == {
        "first K columns": [0, 1, 2, 3, 4, 5, 6],
        "floor of the count": [1, 2, 3, 5, 7, 9],
        "entropy [seed, tree, group]": [0, 2, 3, 5, 6, 7, 9],
        "entropy [seed, tree]": [0, 1, 2, 3, 4, 5, 9],
    }


def lerp(a: float, c: float, f: float) -> float:
    return a + (c - a) * f if f < 0.5 else c - (c - a) * (1 - f)


def test_bin_edges_bins_and_thresholds_are_the_rule_of_section_6_9() -> None:
    # Prepare
    vec = VEC["bins"]
    bins, raw = vec["bins"], vec["raw_train"]
    mean = sum(raw) / len(raw)
    train = [float.fromhex(v) for v in vec["standardised_train"]]
    v = sorted(train)
    n = len(v)

    # Act
    edges = []
    for b in range(1, bins):
        p = (n - 1) * (b / bins)
        i = math.floor(p)
        edges.append(lerp(v[i], v[min(i + 1, n - 1)], p - i))
    std = vec["std"]
    test = [(x - vec["mean"]) / std for x in vec["raw_test"]]

    # Assert
    assert math.isclose(mean, vec["mean"]) and train == [(x - vec["mean"]) / std for x in raw]
    assert [e.hex() for e in edges] == vec["edges"]
    assert [sum(e < x for e in edges) for x in train] == vec["train_bins"]
    assert [sum(e < x for e in edges) for x in test] == vec["test_bins"]
    for b, threshold in vec["thresholds"].items():
        assert threshold == edges[int(b)]  # binary64, standardised units
        left = [x <= threshold for x in train]
        assert left == [k <= int(b) for k in vec["train_bins"]]


def test_packed_plaintexts_put_the_first_sum_in_the_lowest_slot() -> None:
    # Prepare
    vec = VEC["packing"]
    cb = vec["rows"].bit_length()
    hb = 21 + cb
    slot = cb + 2 * hb
    k = (vec["key_bits"] - 1) // slot
    sums = [((g + c * 2**20) << (hb + cb)) + (h << cb) + c for g, h, c in vec["sums"]]

    # Act
    plain = [
        sum(s << (i * slot) for i, s in enumerate(sums[j : j + k])) for j in range(0, len(sums), k)
    ]

    # Assert
    assert (cb, hb, slot, k) == (
        vec["count_bits"],
        vec["h_bits"],
        vec["slot"],
        vec["per_ciphertext"],
    )
    assert [hex(p) for p in plain] == vec["plaintexts"]


@pytest.mark.parametrize("seed", range(6))
def test_the_edge_rule_is_what_the_reference_booster_computes(seed: int) -> None:
    # Prepare: columns with ties and of every small length
    rng = np.random.default_rng(seed)
    n, bins = int(rng.integers(1, 60)), int(rng.integers(2, 40))
    x = np.round(rng.normal(size=(n, 3)) * [1.0, 4.0, 0.1], int(rng.integers(0, 3)))

    # Act
    ours = sb.quantile_edges(x, bins)

    # Assert
    for j in range(3):
        v = sorted(x[:, j].tolist())
        want = []
        for b in range(1, bins):
            p = (n - 1) * (b / bins)
            i = math.floor(p)
            want.append(lerp(v[i], v[min(i + 1, n - 1)], p - i))
        assert ours[j].tolist() == want
