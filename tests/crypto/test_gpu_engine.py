"""The torch Paillier engine (``--engine cuda``) equals gmpy2 bit for bit, on CPU torch and CUDA."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from privfl.crypto import djn, gpu_pool  # noqa: E402
from privfl.crypto.bignum_torch import Montgomery, limbs_for, to_limbs  # noqa: E402
from privfl.crypto.engine import Engine  # noqa: E402
from privfl.crypto.gmp import mpz  # noqa: E402
from privfl.crypto.gpu_pool import DeviceKey, GpuPool  # noqa: E402
from privfl.crypto.paillier import (  # noqa: E402
    PrivateKey,
    PublicKey,
    generate_keypair,
    private_primes,
)
from privfl.crypto.pools import decrypt_split  # noqa: E402
from privfl.errors import ConfigError, CryptoError  # noqa: E402

Keys = tuple[PublicKey, PrivateKey]
CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """CPU torch on a shared machine: one intra-op thread (more only contend)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def keys() -> Keys:
    """A 2048-bit key with a DJN generator (the standard paths ignore it)."""
    return generate_keypair(2048, "djn")


def device_key(keys: Keys, device: str = "cpu", **kw: Any) -> DeviceKey:
    public, private = keys
    return DeviceKey(public.n, device, primes=private_primes(private), **kw)


def test_standard_obfuscators_equal_gmpy2(keys: Keys) -> None:
    n = keys[0].n
    r = [1, n - 1, *(secrets.randbelow(n - 1) + 1 for _ in range(4))]
    assert device_key(keys).noise_standard(r) == [pow(v, n, n * n) for v in r]


def test_crt_obfuscators_equal_gmpy2(keys: Keys) -> None:
    p, q = sorted(private_primes(keys[1]))
    a = [1, p - 1, *(secrets.randbelow(p - 1) + 1 for _ in range(10))]
    b = [q - 1, 1, *(secrets.randbelow(q - 1) + 1 for _ in range(10))]
    assert device_key(keys).noise_crt(a, b) == crt_expected(keys, a, b)


def test_djn_obfuscators_equal_the_cpu_table(keys: Keys) -> None:
    public = keys[0]
    bits = djn.exponent_bits(public.n)
    exps = [0, 1, (1 << bits) - 1, *(secrets.randbits(bits) for _ in range(29))]
    got = device_key(keys, h_s=public.h_s).noise_djn(exps)
    assert got == [int(djn.fixed_base_pow(public.n, public.h_s, a)) for a in exps]


def test_decryptions_equal_the_private_key(keys: Keys) -> None:
    public, private = keys
    plain = [0, 1, public.n - 1, *(secrets.randbelow(public.n) for _ in range(29))]
    cipher = public.encrypt(plain)  # DJN obfuscators on the CPU
    assert device_key(keys).decrypt(cipher) == plain == private.decrypt(cipher)


def test_fresh_obfuscators_are_valid_distinct_and_drawn_from_secrets(
    keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = keys[1]
    draws = []
    real = secrets.randbelow

    def counted(limit: int) -> int:
        draws.append(limit)
        return real(limit)

    monkeypatch.setattr(gpu_pool.secrets, "randbelow", counted)
    key = device_key(keys)  # the key holder's CRT obfuscators: one draw mod p, one mod q
    first, second = key.obfuscators(3), key.obfuscators(3)
    assert sorted(set(draws)) == sorted(v - 1 for v in private_primes(private))
    assert len(draws) == 12
    assert len(set(first + second)) == 6  # none reused within or across batches
    assert private.decrypt(first + second) == [0] * 6  # each an encryption of 0


def test_rounding_guard_refuses_inexact_products() -> None:
    mont = Montgomery((1 << 4095) + 1, "cpu")  # the widest product: a 2048-bit key's n²
    seeded = torch.Generator().manual_seed(7)  # test data, no secret
    for bits, exact in ((16, True), (22, False)):  # 16: the engine's limbs; 22: past float64
        rows = torch.randint(0, 1 << bits, (4, mont.k), generator=seeded)
        mont._product(mont.spectrum(rows), mont.spectrum(rows), 2 * mont.k - 1)
        if exact:
            mont.check()
        else:
            with pytest.raises(CryptoError, match="from an integer"):
                mont.check()


def test_width_follows_the_key_and_refuses_wider_values() -> None:
    n3072 = (1 << 3071) + 2 * secrets.randbits(3000) + 1
    mont = Montgomery(n3072 * n3072, "cpu")
    assert mont.k == limbs_for(n3072 * n3072) == 385  # 6144 + 4 bits, never 2048 or 4096
    bases = [n3072 * n3072 - 1, secrets.randbelow(n3072 * n3072)]
    assert mont.pow_ints(bases, 65537) == [pow(b, 65537, n3072 * n3072) for b in bases]
    with pytest.raises(CryptoError, match="wider than"):
        to_limbs([1 << (16 * mont.k)], mont.k, "cpu")


def test_engine_without_cuda_is_a_one_line_error() -> None:
    if CUDA:
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(ConfigError, match="no CUDA device") as info:
        Engine("cuda")
    assert "\n" not in str(info.value)


def test_cuda_engine_pool_on_cpu_torch_serves_noise_and_decryptions(keys: Keys) -> None:
    public, private = keys
    pool = Engine("cuda", device="cpu").pool(public.n, 1, primes=private_primes(private))
    try:
        assert isinstance(pool, GpuPool)
        pool.prefetch(3)
        noise = pool.take(3)  # the prefetched batch, from the device thread
        plain = [secrets.randbelow(public.n) for _ in noise]
        cipher = public.encrypt_with_noise(plain, noise)
        assert decrypt_split(private, pool, cipher) == plain
    finally:
        pool.close()


def crt_expected(keys: Keys, a: list[int], b: list[int]) -> list[int]:
    """``paillier.obfuscators_crt``'s combination of ``a^p mod p²`` and ``b^q mod q²`` (gmpy2)."""
    p, q = (mpz(v) for v in sorted(private_primes(keys[1])))
    p2, q2 = p * p, q * q
    q2_inv = pow(q2, -1, p2)
    out = []
    for x, y in zip(a, b, strict=True):
        xp, yq = pow(mpz(x), p, p2), pow(mpz(y), q, q2)
        out.append(int(yq + q2 * ((xp - yq) * q2_inv % p2)))
    return out


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="no CUDA device: the engine's GPU run needs one")
@pytest.mark.parametrize("kind", ["standard", "crt", "djn", "decrypt"])
def test_cuda_equals_gmpy2_on_ten_thousand(keys: Keys, kind: str) -> None:
    """On the GPU: 10,000 values of each kind, bit-equal to gmpy2 (seconds on a GPU)."""
    public, private = keys
    n, count = public.n, 10_000
    if kind == "standard":
        r = [secrets.randbelow(n - 1) + 1 for _ in range(count)]
        nn = mpz(n) * n
        got = device_key(keys, "cuda").noise_standard(r)
        assert got == [int(pow(mpz(v), n, nn)) for v in r]
    elif kind == "djn":
        exps = [secrets.randbits(djn.exponent_bits(n)) for _ in range(count)]
        got = device_key(keys, "cuda", h_s=public.h_s).noise_djn(exps)
        assert got == [int(djn.fixed_base_pow(n, public.h_s, a)) for a in exps]
    elif kind == "crt":
        p, q = sorted(private_primes(private))
        a = [secrets.randbelow(p - 1) + 1 for _ in range(count)]
        b = [secrets.randbelow(q - 1) + 1 for _ in range(count)]
        assert device_key(keys, "cuda").noise_crt(a, b) == crt_expected(keys, a, b)
    else:
        plain = [secrets.randbelow(n) for _ in range(count)]
        key = device_key(keys, "cuda")
        cipher = public.encrypt_with_noise(plain, key.obfuscators(count))
        assert key.decrypt(cipher) == plain
