"""The guest's bin products two columns at a time: the same integers as column by column."""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from privfl.crypto.paillier import generate_keypair
from privfl.parties.vertical.secureboost import binsums


def one_by_one(n2: int, cts: list[int], binned: np.ndarray, bins: int) -> list[int]:
    """The reference: each column's bins, one multiplication per row."""
    out = []
    for column in binned.T:
        acc = [1] * bins
        for c, b in zip(cts, column.tolist(), strict=True):
            acc[b] = acc[b] * c % n2
        out += acc
    return out


@pytest.mark.parametrize(("rows", "bins", "columns"), [(900, 4, 5), (900, 32, 3), (40, 4, 2)])
def test_pairs_give_the_same_products_as_one_column_at_a_time(
    rows: int, bins: int, columns: int
) -> None:
    n2 = (2**255 - 19) * (2**127 - 1)  # any modulus: the products are exact either way
    rng = np.random.default_rng(rows + bins)
    cts = [secrets.randbelow(n2 - 2) + 2 for _ in range(rows)]
    binned = rng.integers(0, bins, size=(rows, columns))
    binned[:, -1] = np.minimum(binned[:, -1], 1)  # a column with empty bins

    got = binsums.column_sums(n2, cts, binned, bins)

    assert got == one_by_one(n2, cts, binned, bins)


def test_a_pair_is_taken_only_where_it_saves_multiplications() -> None:
    dense = np.arange(900) % 16  # 16 cells, 900 rows: 884 multiplications saved
    sparse = np.arange(40)  # every row its own cell: nothing saved

    assert binsums.pays(dense, bins=4)
    assert not binsums.pays(sparse, bins=4)


def test_paired_sums_decrypt_to_the_bins_plaintext_sums() -> None:
    public, private = generate_keypair(512)
    rng = np.random.default_rng(1)
    values = rng.integers(0, 1000, size=300)
    binned = rng.integers(0, 3, size=(300, 2))
    cts = public.encrypt(values.tolist())

    sums = private.decrypt(binsums.column_sums(public.nsquare, cts, binned, 3))

    want = [int(values[binned[:, j] == b].sum()) for j in range(2) for b in range(3)]
    assert binsums.pays(binned[:, 0] * 3 + binned[:, 1], 3)
    assert sums == want


class Counted(int):
    """An integer that counts its full products (neither factor 1) in ``Counted.products``."""

    products = 0

    def __mul__(self, other: object) -> Counted:
        if self != 1 and other != 1:
            Counted.products += 1
        return Counted(int(self) * int(other))  # type: ignore[call-overload]

    __rmul__ = __mul__

    def __mod__(self, other: object) -> Counted:
        return Counted(int(self) % int(other))  # type: ignore[call-overload]


@pytest.mark.parametrize(("rows", "bins", "columns"), [(900, 4, 5), (900, 32, 3), (40, 4, 2)])
def test_the_counted_multiplications_are_the_products_computed(
    rows: int, bins: int, columns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: ciphertext stand-ins that count every product of two of them (random
    # values mod a large n², so that no product is 1 but with negligible chance).
    n2 = (2**255 - 19) * (2**127 - 1)
    rng = np.random.default_rng(rows * bins)
    cts = [secrets.randbelow(n2 - 2) + 2 for _ in range(rows)]
    binned = rng.integers(0, bins, size=(rows, columns))
    binned[:, -1] = np.minimum(binned[:, -1], 1)  # a column with empty bins
    monkeypatch.setattr(binsums, "mpz", Counted)
    Counted.products = 0

    # Act
    binsums.column_sums(n2, cts, binned, bins)

    # Assert: what the bench's floor is told equals what was computed, pairs or not.
    assert Counted.products == binsums.multiplications(binned, bins)
    assert binsums.multiplications(binned, bins) <= rows * columns


def test_a_derived_node_counts_a_division_per_non_empty_bin_of_the_smaller_sibling() -> None:
    from types import SimpleNamespace

    from privfl.crypto.gmp import powmod
    from privfl.crypto.pools import NoisePool
    from privfl.parties.vertical.secureboost import guest

    # Prepare: node 2 = parent 0 ÷ sibling 1, one column of 4 bins, two of them empty (1).
    n2 = (2**255 - 19) * (2**127 - 1)
    parent = [secrets.randbelow(n2 - 2) + 2 for _ in range(4)]
    sibling = [secrets.randbelow(n2 - 2) + 2, 1, secrets.randbelow(n2 - 2) + 2, 1]
    state = SimpleNamespace(
        work={"subtractions": 0},
        key=SimpleNamespace(nsquare=n2),
        noise=NoisePool(2**255 - 19, 1, noise=False),  # inline
        params=SimpleNamespace(bins=4),
    )
    tree = SimpleNamespace(sums={0: parent, 1: sibling}, features=[0])

    # Act
    sums = guest.differences(state, tree, [(2, 1)])  # type: ignore[arg-type]

    # Assert: the quotients, and two divisions counted (an empty bin's costs nothing).
    assert sums[2] == [
        p * int(powmod(s, -1, n2)) % n2 for p, s in zip(parent, sibling, strict=True)
    ]
    assert state.work["subtractions"] == 2
