"""Tests for the fixed-point encoding: known answers, round-trip properties and range errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from privfl.crypto.encoding import (
    DATA_BITS,
    VALUE_BITS,
    decode,
    decode_signed,
    encode,
    to_exponents,
)
from privfl.errors import CryptoError

# Encoding needs only an odd modulus of the right size, not a real key.
N512 = 2**511 + 187
N2048 = 2**2047 + 1155

reals = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)


def test_encode_known_answers() -> None:
    # Prepare: 1.5 at 2 fractional bits is 6; -1 at VALUE_BITS is n - 2**32.
    values = [1.5, -1.0, 0.0, 0.375]

    # Act
    encoded = encode(values, 2, N512)

    # Assert: 0.375 * 4 = 1.5 rounds half to even, like np.rint.
    assert encoded == [6, N512 - 4, 0, 2]
    assert encode([-1.0], VALUE_BITS, N512) == [N512 - 2**VALUE_BITS]


@given(st.lists(reals, min_size=1, max_size=20))
def test_round_trip_within_half_a_unit(values: list[float]) -> None:
    # Prepare
    v = np.array(values)

    # Act
    decoded = decode(encode(values, VALUE_BITS, N512), VALUE_BITS, N512)

    # Assert: half a grid unit from rounding to the grid, plus one float64 ulp on the way back.
    assert np.all(np.abs(decoded - v) <= 2.0 ** -(VALUE_BITS + 1) + np.spacing(np.abs(v)))


@given(reals, reals)
def test_encoding_is_additive_mod_n(a: float, b: float) -> None:
    # Prepare
    ea, eb = encode([a, b], VALUE_BITS, N512)

    # Act: what a homomorphic addition yields after decryption.
    total = decode([(ea + eb) % N512], VALUE_BITS, N512)[0]

    # Assert
    assert total == pytest.approx(a + b, abs=2.0**-VALUE_BITS + 1e-6)


def test_encode_rejects_values_outside_the_key_range() -> None:
    # 1e150 * 2**32 is about 2**530, far above n/3 for a 512-bit n.
    with pytest.raises(CryptoError, match="standardise features or use a larger key"):
        encode([0.0, 1e150], VALUE_BITS, N512)


def test_encode_accepts_the_largest_value_below_the_limit() -> None:
    # Prepare: 2**-VALUE_BITS * (n//3 - 1) is not a float, so take a power of two below it.
    value = 2.0 ** (N512.bit_length() - 3 - VALUE_BITS)

    # Act / Assert
    assert decode(encode([value, -value], VALUE_BITS, N512), VALUE_BITS, N512).tolist() == [
        value,
        -value,
    ]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), 1e308])
def test_encode_rejects_non_finite_and_float_overflow(bad: float) -> None:
    with pytest.raises(CryptoError):
        encode([1.0, bad], VALUE_BITS, N512)


def test_encode_rejects_matrices() -> None:
    with pytest.raises(ValueError, match="1-D"):
        encode(np.zeros((2, 2)), VALUE_BITS, N512)


def test_decode_signed_boundaries() -> None:
    third = N512 // 3

    assert decode_signed(third, N512) == third
    assert decode_signed(N512 - third, N512) == -third
    assert decode_signed(N512 - 1, N512) == -1
    with pytest.raises(CryptoError, match="overflow"):
        decode_signed(third + 1, N512)
    with pytest.raises(CryptoError, match="overflow"):
        decode_signed(N512 - third - 1, N512)


@pytest.mark.parametrize("residue", [-1, N512, N512 + 5])
def test_decode_signed_rejects_non_residues(residue: int) -> None:
    with pytest.raises(CryptoError, match=r"\[0, n\)"):
        decode_signed(residue, N512)


def test_decode_reports_overflow_in_the_middle_third() -> None:
    with pytest.raises(CryptoError, match="overflow"):
        decode([0, N512 // 2], VALUE_BITS, N512)


def test_decode_reports_values_beyond_float64() -> None:
    # n/3 of a 2048-bit key is about 2**2046, beyond float64's 2**1024.
    with pytest.raises(CryptoError, match="float64"):
        decode([N2048 // 3], 0, N2048)


def test_decode_is_exact_for_large_ints() -> None:
    # Prepare: 2**100 + 1 is not a float; int/int division must still round correctly.
    v = 2**100 + 2**48

    # Act
    decoded = decode([v], 48, N512)

    # Assert
    assert decoded.dtype == np.float64
    assert decoded[0] == 2.0**52 + 1.0


def test_to_exponents_known_answers() -> None:
    # Prepare
    x = np.array([[1.0, -0.5], [0.0, 2.0**-17]])

    # Act
    k = to_exponents(x, DATA_BITS)

    # Assert: signed, not reduced mod anything; 2**-17 * 2**16 = 0.5 rounds to even 0.
    assert k.dtype == np.int64
    assert k.tolist() == [[2**16, -(2**15)], [0, 0]]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 2.0**46, -(2.0**46)])
def test_to_exponents_rejects_out_of_range(bad: float) -> None:
    # 2**46 * 2**16 = 2**62 is the first value outside the int64 headroom.
    with pytest.raises(CryptoError):
        to_exponents(np.array([1.0, bad]), DATA_BITS)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=10))
def test_to_exponents_round_trip(values: list[float]) -> None:
    k = to_exponents(np.array(values), DATA_BITS)

    assert np.all(np.abs(k / 2.0**DATA_BITS - np.array(values)) <= 2.0 ** -(DATA_BITS + 1))
