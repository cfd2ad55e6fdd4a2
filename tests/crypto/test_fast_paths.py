"""The fast paths decrypt to the same numbers as the plain ones: DJN, packing, parallel Xᵀ[[d]]."""

from __future__ import annotations

import secrets

import gmpy2
import numpy as np
import pytest

from privfl.crypto import djn, packing
from privfl.crypto.encoding import DATA_BITS, VALUE_BITS, decode, encode, to_exponents
from privfl.crypto.paillier import PrivateKey, PublicKey, generate_keypair, unmask
from privfl.crypto.pools import NoisePool
from privfl.errors import CryptoError
from privfl.protocol import codec
from privfl.protocol.messages import PROTOCOL, VERSION, Header, Kind, PublicKeyMessage


@pytest.fixture(scope="module")
def djn_keys() -> tuple[PublicKey, PrivateKey]:
    return generate_keypair(512, "djn")


def test_fixed_base_table_equals_powmod(djn_keys: tuple[PublicKey, PrivateKey]) -> None:
    # Prepare: exponents at the edges of the short range and random ones.
    public, _ = djn_keys
    n, bits = public.n, djn.exponent_bits(public.n)
    exponents = [0, 1, 2**bits - 1] + [secrets.randbits(bits) for _ in range(20)]

    # Act / Assert: every table lookup equals a plain modular exponentiation.
    for a in exponents:
        assert djn.fixed_base_pow(n, public.h_s, a) == gmpy2.powmod(public.h_s, a, n * n)


def test_djn_ciphertexts_decrypt_with_the_standard_private_key(
    djn_keys: tuple[PublicKey, PrivateKey],
) -> None:
    # Prepare
    public, private = djn_keys
    values = np.array([0.0, 1.5, -2.25, 1e6, -3 * 2**-20])  # exact at 2^-32
    plain = encode(values, VALUE_BITS, public.n)

    # Act
    ciphertexts = public.encrypt(plain)
    zeros = public.fresh_noise(3)

    # Assert: same plaintexts; probabilistic; the obfuscators alone encrypt 0.
    assert public.obfuscation == "djn"
    assert private.decrypt(ciphertexts) == plain
    assert public.encrypt(plain) != ciphertexts
    assert private.decrypt(zeros) == [0, 0, 0]
    np.testing.assert_array_equal(
        decode(private.decrypt(ciphertexts), VALUE_BITS, public.n), values
    )


def test_djn_pool_and_rerandomize_keep_plaintexts(djn_keys: tuple[PublicKey, PrivateKey]) -> None:
    public, private = djn_keys
    pool = NoisePool(public.n, 2, public.h_s)
    try:
        pool.prefetch(40)
        noise = pool.take(40)
    finally:
        pool.close()
    assert private.decrypt(noise) == [0] * 40
    ciphertexts = public.encrypt_with_noise(list(range(40)), noise)
    assert private.decrypt(public.rerandomize(ciphertexts)) == list(range(40))


def test_peer_generators_are_checked(djn_keys: tuple[PublicKey, PrivateKey]) -> None:
    public, _ = djn_keys
    assert PublicKey.from_n(public.n, public.h_s) == public
    for bad in (1, public.n, public.n**2, public.n**2 + 5):
        with pytest.raises(CryptoError, match="generator"):
            PublicKey.from_n(public.n, bad)


def test_public_key_message_carries_h_s_only_when_set(
    djn_keys: tuple[PublicKey, PrivateKey],
) -> None:
    # Prepare
    public, _ = djn_keys
    header = Header(PROTOCOL, VERSION, "s", "server", "host", 0, 1, Kind.PUBLIC_KEY)
    with_h = PublicKeyMessage(n=public.n, bits=public.bits, h_s=public.h_s)
    standard = PublicKeyMessage(n=public.n, bits=public.bits)

    # Act
    _, got = codec.decode(codec.encode(header, with_h))
    frames = codec.encode(header, standard)

    # Assert: h_s round-trips; the standard key's frame has no h_s field at all
    # (a field at its default is left out) and decodes to h_s = 0.
    assert got == with_h
    assert b"h_s" not in frames[1]
    assert codec.decode(frames)[1] == standard


@pytest.mark.parametrize("count", [1, 4, 5, 6, 23])
def test_packing_decrypts_to_numpy(djn_keys: tuple[PublicKey, PrivateKey], count: int) -> None:
    # Prepare: signed fixed-point values, including the extremes of the packing bound.
    public, private = djn_keys
    n = public.n
    rng = np.random.default_rng(count)
    values = [int(v) for v in rng.integers(-(2**60), 2**60, size=count)]
    values[0] = -(2**packing.BOUND_BITS) + 1
    values[-1] = 2**packing.BOUND_BITS - 1 if count > 1 else values[-1]
    ciphertexts = public.encrypt([v % n for v in values])

    # Act
    packed = packing.pack(public, ciphertexts)
    masked, masks = public.mask(packed)
    plain = packing.unpack(unmask(private.decrypt(masked), masks, n), count, n)

    # Assert: 5 values per 512-bit plaintext; every value back exactly.
    assert len(packed) == packing.packed_length(count, n) == -(-count // 5)
    assert [p if p <= n // 2 else p - n for p in plain] == values


def test_packed_gradient_equals_numpy(djn_keys: tuple[PublicKey, PrivateKey]) -> None:
    # Prepare: a residual and a feature matrix as the parties hold them.
    public, private = djn_keys
    n = public.n
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 7))
    d = rng.normal(size=40)
    residual = public.encrypt(encode(d, VALUE_BITS, n))
    x_exp = to_exponents(x, DATA_BITS)

    # Act: Xᵀ[[d]] split over two worker processes, packed, decrypted, unpacked.
    pool = NoisePool(n, 2)
    try:
        grad = pool.matvec_t(public, x_exp, residual)
    finally:
        pool.close()
    plain = packing.unpack(private.decrypt(packing.pack(public, grad)), 7, n)

    # Assert: equal to the single-process matvec and to numpy at fixed-point precision.
    assert grad == public.matvec_t(x_exp, residual)
    expected = (x_exp.astype(np.float64) / 2**DATA_BITS).T @ d
    np.testing.assert_allclose(decode(plain, VALUE_BITS + DATA_BITS, n), expected, atol=1e-6)


def test_unpack_refuses_values_outside_the_bound(djn_keys: tuple[PublicKey, PrivateKey]) -> None:
    public, private = djn_keys
    n = public.n
    too_big = [2**packing.BOUND_BITS + 5, 3]
    packed = packing.pack(public, public.encrypt([v % n for v in too_big]))
    with pytest.raises(CryptoError, match="left the range"):
        packing.unpack(private.decrypt(packed), 2, n)
    with pytest.raises(CryptoError, match="cannot hold"):
        packing.unpack([0, 0], 2, n)


def test_packed_scores_of_several_guests_sum_slot_by_slot(
    djn_keys: tuple[PublicKey, PrivateKey],
) -> None:
    # Prepare: three guests' scores, each packed before encryption as a guest does.
    public, private = djn_keys
    n = public.n
    rng = np.random.default_rng(5)
    scores = [rng.normal(scale=50, size=13) for _ in range(3)]
    packed = [public.encrypt(packing.pack_plain(encode(z, VALUE_BITS, n), n)) for z in scores]

    # Act: the Host sums the packed vectors, masks, has them decrypted, unmasks, unpacks.
    total = public.add(public.add(packed[0], packed[1]), packed[2])
    masked, masks = public.mask(total)
    plain = packing.unpack(unmask(private.decrypt(masked), masks, n), 13, n, terms=3)

    # Assert: 13 rows in 3 ciphertexts; the sum equals numpy's.
    assert len(total) == 3
    np.testing.assert_allclose(decode(plain, VALUE_BITS, n), sum(scores), atol=1e-8)


def test_encryption_with_noise_is_the_textbook_product(
    djn_keys: tuple[PublicKey, PrivateKey],
) -> None:
    # Prepare: plaintexts at the edges of [0, n) and random ones, one obfuscator each.
    public, _ = djn_keys
    n, n2 = public.n, public.n**2
    plain = [0, 1, n - 1] + [secrets.randbelow(n) for _ in range(20)]
    noise = [int(r) for r in public.fresh_noise(len(plain))]

    cipher = public.encrypt_with_noise(plain, noise)

    # (1 + n·m)·r mod n², as Paillier defines it; an encryption of 0 is its obfuscator
    assert cipher == [(1 + n * m) * r % n2 for m, r in zip(plain, noise, strict=True)]
    assert cipher[0] == noise[0]
