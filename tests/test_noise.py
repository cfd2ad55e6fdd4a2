"""The obfuscator pool: every value is a valid r^n, inline and with worker processes."""

from __future__ import annotations

import pytest

from privfl.crypto.noise import CHUNK, NoisePool
from privfl.crypto.paillier import PublicKey, generate_keypair


@pytest.fixture(scope="module")
def keypair() -> tuple[PublicKey, object]:
    return generate_keypair(512)


@pytest.mark.parametrize("workers", [1, 2])
def test_pool_values_encrypt_correctly_in_any_batch_sizes(keypair, workers: int) -> None:
    public, private = keypair
    pool = NoisePool(public.n, workers)
    try:
        pool.prefetch(CHUNK + 5)  # a short last chunk: counts must stay exact
        plain = list(range(3 * CHUNK + 7))
        for size in (1, CHUNK + 3, 2 * CHUNK + 3):
            noise = pool.take(size)
            assert len(noise) == size and len(set(noise)) == size
            ciphertexts = public.encrypt_with_noise(plain[:size], noise)
            assert private.decrypt(ciphertexts) == plain[:size]
            pool.prefetch(size)
    finally:
        pool.close()


def test_rerandomize_with_pool_noise_keeps_plaintexts(keypair) -> None:
    public, private = keypair
    pool = NoisePool(public.n, 1)
    ciphertexts = public.encrypt([7, 11])
    fresh = public.rerandomize(ciphertexts, pool.take(2))
    assert fresh != ciphertexts
    assert private.decrypt(fresh) == [7, 11]
