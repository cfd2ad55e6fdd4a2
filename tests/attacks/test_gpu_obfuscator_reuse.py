"""A public-key attacker against ciphertexts from the GPU engine: a reused obfuscator leaks.

If two ciphertexts share their obfuscator ``ρ`` (a batch-wide one, as a GPU engine that
draws a single ``r`` per batch makes), ``c₁ · c₂⁻¹ = (1 + n)^(m₁ − m₂) mod n²``, so anyone
holding the public key reads ``m₁ − m₂ = (c₁ c₂⁻¹ − 1) / n`` without the private key. The
torch engine draws a fresh ``r`` per ciphertext from the OS CSPRNG: for every pair of its
ciphertexts the quotient is no power of ``1 + n`` and the attack reads nothing.
"""

from __future__ import annotations

import itertools
import secrets

import pytest

torch = pytest.importorskip("torch")

from privfl.crypto.gpu_pool import DeviceKey  # noqa: E402
from privfl.crypto.paillier import PublicKey, generate_keypair  # noqa: E402

COUNT = 12


def read_differences(public: PublicKey, cipher: list[int]) -> dict[tuple[int, int], int]:
    """The attacker: every pair whose quotient is ``1 + n·d`` gives away ``d = m_i − m_j``."""
    n, n2 = public.n, public.nsquare
    found = {}
    for i, j in itertools.combinations(range(len(cipher)), 2):
        quotient = cipher[i] * pow(cipher[j], -1, n2) % n2
        if (quotient - 1) % n == 0:
            found[(i, j)] = (quotient - 1) // n
    return found


@pytest.fixture(scope="module")
def setup() -> tuple[PublicKey, list[int], DeviceKey]:
    torch.set_num_threads(1)
    public, _ = generate_keypair(512)  # the attack does not depend on the key size
    plain = [secrets.randbelow(public.n) for _ in range(COUNT)]
    return public, plain, DeviceKey(public.n, "cpu")


def test_fresh_obfuscators_leave_no_difference_to_read(setup) -> None:
    public, plain, key = setup
    cipher = public.encrypt_with_noise(plain, key.obfuscators(COUNT))
    assert read_differences(public, cipher) == {}


def test_leaky_arm_one_obfuscator_per_batch_gives_every_difference(setup) -> None:
    public, plain, key = setup
    shared = key.obfuscators(1) * COUNT  # one r for the whole batch
    cipher = public.encrypt_with_noise(plain, shared)
    found = read_differences(public, cipher)
    assert len(found) == COUNT * (COUNT - 1) // 2
    assert all(d == (plain[i] - plain[j]) % public.n for (i, j), d in found.items())
