"""Two-server bounded aggregation: exact sums, well-formed shares, the norm proof."""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from privfl.learning import bounded
from privfl.mechanisms import skellam

DIMS = 2000
SENSITIVITY = skellam.l2_sensitivity(DIMS)
LIMIT = bounded.threshold(SENSITIVITY)


def _update(norm: float, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIMS)
    return np.rint(v * norm / np.linalg.norm(v)).astype(np.int64)


def _verdicts(
    xs: list[np.ndarray], forge: bounded.Share | None = None, strict: bool = False
) -> list[bool]:
    shares = [bounded.split(x) for x in xs]
    rows = bounded.projection(secrets.randbits(128), DIMS)
    proofs = [bounded.proof_shares(*bounded.prove_bound(x, rows, LIMIT, strict)) for x in xs]
    if forge is not None:
        proofs[-1] = (forge, proofs[-1][1])
    projected = [bounded.project(rows, [s[server] for s in shares]) for server in (0, 1)]
    coins = bounded.challenge(LIMIT.bit_length())
    return [
        bounded.accept(
            *(
                bounded.verify_share(projected[s][i], proofs[i][s], coins, LIMIT, s == 0)
                for s in (0, 1)
            )
        )
        for i in range(len(xs))
    ]


def test_shares_are_canonical_and_add_up_to_the_sum() -> None:
    xs = [_update(SENSITIVITY, seed) for seed in range(3)]
    shares = [bounded.split(x) for x in xs]
    assert all(bounded.well_formed(s, DIMS) for pair in shares for s in pair)
    summed = [np.sum([pair[s] for pair in shares], axis=0) for s in (0, 1)]
    assert np.array_equal(bounded.total(*summed), sum(xs))
    bad = shares[0][0].copy()
    bad[0, 0] = 1 << 16  # not canonical: could hide a share of any size
    assert not bounded.well_formed(bad, DIMS)


def test_inputs_within_the_bound_pass_and_three_times_beyond_fail() -> None:
    honest = [_update(SENSITIVITY * f, seed) for seed, f in enumerate((1.0, 0.5, 0.01))]
    far = [_update(SENSITIVITY * g, 10 + i) for i, g in enumerate((3.2, 4, 1000))]
    assert _verdicts(honest + far) == [True, True, True, False, False, False]


def test_a_forged_proof_cannot_claim_a_small_norm() -> None:
    # the client proves the bound for a small input but its shares hold a large one
    rows = bounded.projection(secrets.randbits(128), DIMS)
    small = bounded.prove_bound(_update(SENSITIVITY / 2, 1), rows, LIMIT)
    forged, _ = bounded.proof_shares(*small)
    assert _verdicts([_update(SENSITIVITY, 2), _update(4 * SENSITIVITY, 3)], forged) == [
        True,
        False,
    ]


def test_an_honest_client_refuses_to_prove_a_broken_bound_and_extra_bits_are_refused() -> None:
    rows = bounded.projection(secrets.randbits(128), DIMS)
    with pytest.raises(ValueError, match="breaks the bound"):
        bounded.prove_bound(_update(4 * SENSITIVITY, 4), rows, LIMIT)
    bits, proof = bounded.prove_bound(_update(SENSITIVITY, 5), rows, LIMIT)
    first, _ = bounded.proof_shares([*bits, 0], proof)
    coins = bounded.challenge(LIMIT.bit_length())
    with pytest.raises(ValueError, match="bits"):
        bounded.verify_share([0] * bounded.PROJECTIONS, first, coins, LIMIT, True)
