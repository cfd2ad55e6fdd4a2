"""OR-proofs of n-th residuosity (privfl.crypto.sigma): completeness, soundness, batching."""

from __future__ import annotations

from dataclasses import replace

import pytest

from privfl.crypto import sigma
from privfl.crypto.paillier import PrivateKey, PublicKey, generate_keypair


@pytest.fixture(scope="module")
def keys() -> tuple[PublicKey, PrivateKey]:
    return generate_keypair(512)


def bit_pairs(public: PublicKey, cts: list[int]) -> list[tuple[int, int]]:
    inverse = (1 - public.n) % public.nsquare  # (1 + n)^-1
    return [(c, c * inverse % public.nsquare) for c in cts]


def test_honest_bits_verify_and_the_context_binds(keys: tuple[PublicKey, PrivateKey]) -> None:
    public, private = keys
    bits = [0, 1, 1, 0, 1, 0]
    pairs = bit_pairs(public, public.encrypt(bits))

    proofs = sigma.prove_or(private, pairs, bits, b"tree 0")

    assert sigma.verify_or(public, pairs, proofs, b"tree 0")
    assert not sigma.verify_or(public, pairs, proofs, b"tree 1")


def test_one_changed_response_fails_the_batch(keys: tuple[PublicKey, PrivateKey]) -> None:
    # The batch weights are odd 64-bit CSPRNG draws: a false batch passes with
    # probability <= 2^-63 (sigma's module doc), far below 1e-6.
    public, private = keys
    bits = [1] * 8
    pairs = bit_pairs(public, public.encrypt(bits))
    proofs = sigma.prove_or(private, pairs, bits, b"ctx")
    responses = list(proofs.responses)
    responses[5] = responses[5] * 2 % public.n

    assert not sigma.verify_or(public, pairs, replace(proofs, responses=responses), b"ctx")


def test_roots_open_encryptions_of_zero(keys: tuple[PublicKey, PrivateKey]) -> None:
    public, private = keys
    zero, one = public.encrypt([0, 1])

    root = sigma.open_zero(private, zero)

    assert sigma.check_zero(public, zero, root)
    assert not sigma.check_zero(public, one, sigma.open_zero(private, one))


def test_challenges_are_a_pure_function_of_the_transcript() -> None:
    first = sigma.challenges(b"ctx", [[1, 2, 3]], 5)

    assert first == sigma.challenges(b"ctx", [[1, 2, 3]], 5)
    assert first != sigma.challenges(b"ctx", [[1, 2], [3]], 5)  # parts are length-framed
    assert all(0 <= e < 2**sigma.CHALLENGE_BITS for e in first)
