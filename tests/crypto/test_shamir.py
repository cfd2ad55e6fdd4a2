"""Shamir sharing over GF(2^521 − 1): any t shares rebuild the secret, fewer do not."""

from __future__ import annotations

import secrets

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privfl.crypto import shamir


def test_any_threshold_of_the_shares_rebuilds_a_256_bit_secret() -> None:
    secret = secrets.randbits(256)
    points = list(range(1, 11))
    shares = list(zip(points, shamir.split(secret, 6, points), strict=True))
    for subset in (shares[:6], shares[4:], shares[::2] + shares[1:2]):
        assert shamir.combine(subset) == secret


def test_fewer_shares_than_the_threshold_give_another_value() -> None:
    secret = secrets.randbits(128)
    points = [3, 7, 9, 12]
    shares = list(zip(points, shamir.split(secret, 4, points), strict=True))
    # three shares of a degree-3 polynomial fix nothing: the interpolation misses the
    # secret except with probability 2^-521
    assert shamir.combine(shares[:3]) != secret


def test_shares_round_trip_through_fixed_width_bytes() -> None:
    value = shamir.PRIME - 1
    assert shamir.from_bytes(shamir.to_bytes(value)) == value
    with pytest.raises(ValueError, match="must lie in the field"):
        shamir.from_bytes(shamir.PRIME.to_bytes(shamir.SHARE_BYTES, "big"))


@pytest.mark.parametrize(
    ("secret", "threshold", "points", "message"),
    [
        (-1, 1, [1], "secret must lie"),
        (5, 3, [1, 2], "threshold must lie"),
        (5, 2, [1, 1], "distinct and nonzero"),
        (5, 1, [0], "distinct and nonzero"),
    ],
)
def test_bad_arguments_are_refused(
    secret: int, threshold: int, points: list[int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        shamir.split(secret, threshold, points)


@settings(max_examples=25, deadline=None)
@given(
    secret=st.integers(0, 2**256 - 1),
    threshold=st.integers(1, 8),
    extra=st.integers(0, 4),
    data=st.data(),
)
def test_any_subset_of_threshold_shares_rebuilds_the_secret(
    secret: int, threshold: int, extra: int, data: st.DataObject
) -> None:
    points = list(range(1, threshold + extra + 1))
    shares = list(zip(points, shamir.split(secret, threshold, points), strict=True))
    chosen = data.draw(st.permutations(shares))[:threshold]
    assert shamir.combine(chosen) == secret


def test_coefficients_are_field_elements_even_when_the_bytes_are_all_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 66 bytes of ones masked to 521 bits is PRIME itself: outside the field, drawn again
    monkeypatch.setattr(shamir.secrets, "token_bytes", lambda n: b"\xff" * n)
    values = shamir._uniform(3)
    assert len(values) == 3 and all(0 <= v < shamir.PRIME for v in values)
    monkeypatch.undo()
    fresh = shamir._uniform(64)  # 64 draws of 521 bits: a repeat has probability < 2^-509
    assert len(set(fresh)) == 64 and max(fresh).bit_length() > 500


def test_split_many_is_each_polynomial_evaluated_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    # known answer: the same coefficients (drawn once, handed out in split_many's order:
    # degree t−1 first, one per value) evaluated one polynomial at a time, term by term
    values, threshold, points = [2**128 - 1, shamir.PRIME - 1, 0], 5, [1, 2, 9, 10_001, 65_537]
    drawn = shamir._uniform((threshold - 1) * len(values))
    drawn[0] = shamir.PRIME - 1  # the largest coefficients: the widest lanes
    monkeypatch.setattr(shamir, "_uniform", lambda count: list(drawn[:count]))
    shares = shamir.split_many(values, threshold, points)
    for lane, secret in enumerate(values):
        # coefficient of degree k (1..t−1) is drawn[(t−1−k)·lanes + lane]
        coeffs = [secret] + [
            drawn[(threshold - 1 - k) * len(values) + lane] for k in range(1, threshold)
        ]
        plain = [sum(c * x**k for k, c in enumerate(coeffs)) % shamir.PRIME for x in points]
        assert shares[lane] == plain
        assert shamir.combine(list(zip(points, plain, strict=True))) == secret


def test_split_many_refuses_what_split_refuses() -> None:
    with pytest.raises(ValueError, match="secret must lie"):
        shamir.split_many([1, shamir.PRIME], 2, [1, 2])


def test_the_batched_inverses_are_the_inverses_mod_p() -> None:
    # Montgomery's trick against pow(·, −1, p), value by value; negative and full-width too
    values = [3, -5, 7, 2**520, shamir.PRIME - 1, -(10**50)]
    inverses = shamir._invert_all(values)
    assert [int(v) for v in inverses] == [pow(v, -1, shamir.PRIME) for v in values]
    assert all(v * int(inv) % shamir.PRIME == 1 for v, inv in zip(values, inverses, strict=True))


def test_a_known_polynomial_rebuilds_at_zero() -> None:
    # f(x) = 42 + 5x + 7x² mod p at x = 2, 9, 1000: any three give f(0) = 42
    shares = [(x, (42 + 5 * x + 7 * x * x) % shamir.PRIME) for x in (2, 9, 1000)]
    assert shamir.combine(shares) == 42
    assert shamir.combine(shares[::-1]) == 42
