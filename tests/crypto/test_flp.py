"""The fully linear proof: honest products verify, any wrong claim is refused."""

from __future__ import annotations

import secrets

from privfl.crypto import flp


def _verdict(left: list[int], right: list[int], proof: list[int]) -> bool:
    left_a, left_b = flp.split(left)
    right_a, right_b = flp.split(right)
    proof_a, proof_b = flp.split(proof)
    r = flp.random_point(len(left))
    return flp.decide(
        flp.query(left_a, right_a, proof_a, r), flp.query(left_b, right_b, proof_b, r)
    )


def test_interpolation_matches_a_known_polynomial() -> None:
    values = [3 * x * x - 5 * x + 7 for x in range(4)]  # degree 2 through 0..3
    assert flp.evaluate(values, 10) == 3 * 100 - 50 + 7
    assert flp.extend(values[:3], 6) == [3 * x * x - 5 * x + 7 for x in range(6)]


def test_an_honest_proof_verifies_and_carries_the_products() -> None:
    left = [secrets.randbelow(2**40) for _ in range(20)]
    right = [secrets.randbelow(2**40) for _ in range(20)]
    proof = flp.prove(left, right)
    assert _verdict(left, right, proof)
    assert flp.products(proof) == [a * b % flp.PRIME for a, b in zip(left, right, strict=True)]


def test_a_proof_of_other_products_is_refused() -> None:
    left = [secrets.randbelow(2**40) for _ in range(20)]
    right = [secrets.randbelow(2**40) for _ in range(20)]
    forged = flp.prove(left, right)
    forged[3 + 5] += 1  # claims h(6) = left[5]·right[5] + 1
    assert not _verdict(left, right, forged)
    # a proof made for other inputs fails on these: h ≠ f·g at a random point
    other = flp.prove([v + 1 for v in left], right)
    assert not _verdict(left, right, other)
