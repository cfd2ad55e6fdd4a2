"""Tests for raw Paillier: tiny-key known answers, plaintext oracles, masking statistics."""

from __future__ import annotations

import copy
import math
import pickle
import secrets

import numpy as np
import phe.paillier
import phe.util
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privfl.crypto.encoding import DATA_BITS, VALUE_BITS, decode, encode, to_exponents
from privfl.crypto.paillier import (
    PrivateKey,
    PublicKey,
    generate_keypair,
    require_gmpy2,
    unmask,
)
from privfl.errors import CryptoError

# Hand-checkable key: n = 17 * 19 = 323, n^2 = 104329.
TINY_P, TINY_Q = 17, 19
# A slightly larger toy key so that signed sums have room mod n.
TOY_P, TOY_Q = 1009, 1013


@pytest.fixture(scope="module")
def keys() -> tuple[PublicKey, PrivateKey]:
    """One 512-bit key pair for the module: real arithmetic, fast enough for unit tests."""
    return generate_keypair(512)


@pytest.fixture(scope="module")
def toy() -> tuple[PublicKey, PrivateKey]:
    """A key small enough for hypothesis to run hundreds of cases."""
    pub = PublicKey(TOY_P * TOY_Q)
    return pub, PrivateKey(pub, TOY_P, TOY_Q)


def residues(n: int, count: int) -> list[int]:
    """Uniform residues including the edge values 0 and n - 1."""
    return [0, n - 1] + [secrets.randbelow(n) for _ in range(count - 2)]


def test_known_answer_on_a_tiny_key() -> None:
    # Prepare: m = 42, r = 5; 84326 = (1 + 323*42) * 5**323 mod 323**2, checked three ways below.
    pub = PublicKey(TINY_P * TINY_Q)
    priv = PrivateKey(pub, TINY_P, TINY_Q)
    n2 = pub.n**2

    # Act
    [c] = pub.encrypt_with([42], [5])

    # Assert: the textbook g**m * r**n with g = n + 1, and python-paillier's raw_encrypt.
    assert c == 84326
    assert c == pow(pub.n + 1, 42, n2) * pow(5, pub.n, n2) % n2
    assert c == phe.paillier.PaillierPublicKey(pub.n).raw_encrypt(42, r_value=5)
    assert priv.decrypt([c]) == [42]


def test_decrypt_inverts_encrypt(keys: tuple[PublicKey, PrivateKey]) -> None:
    pub, priv = keys
    plain = residues(pub.n, 8)

    cipher = pub.encrypt(plain)

    assert priv.decrypt(cipher) == plain
    assert all(0 < c < pub.nsquare for c in cipher)
    assert all(type(c) is int for c in cipher)


def test_encrypt_is_probabilistic(keys: tuple[PublicKey, PrivateKey]) -> None:
    pub, _ = keys

    first, second = pub.encrypt([7, 7])

    assert first != second


def test_ciphertexts_fit_byte_width(keys: tuple[PublicKey, PrivateKey]) -> None:
    pub, _ = keys

    cipher = [*pub.encrypt(residues(pub.n, 4)), pub.nsquare - 1]

    assert pub.byte_width == 128
    for c in cipher:
        assert int.from_bytes(c.to_bytes(pub.byte_width, "big"), "big") == c


def test_encrypt_rejects_non_residues_and_bad_obfuscators() -> None:
    pub = PublicKey(TINY_P * TINY_Q)

    with pytest.raises(CryptoError, match="encode it"):
        pub.encrypt([pub.n])
    with pytest.raises(CryptoError, match="encode it"):
        pub.encrypt([-1])
    with pytest.raises(CryptoError, match="unit"):
        pub.encrypt_with([1], [TINY_P])  # shares the factor 17 with n
    with pytest.raises(ValueError):
        pub.encrypt_with([1, 2], [5])


def test_add_add_plain_and_sum(keys: tuple[PublicKey, PrivateKey]) -> None:
    # Prepare
    pub, priv = keys
    a, b = residues(pub.n, 5), residues(pub.n, 5)
    ca, cb = pub.encrypt(a), pub.encrypt(b)

    # Act
    added, plain_added, total = pub.add(ca, cb), pub.add_plain(ca, b), pub.sum(ca)

    # Assert
    expected = [(x + y) % pub.n for x, y in zip(a, b, strict=True)]
    assert priv.decrypt(added) == expected
    assert priv.decrypt(plain_added) == expected
    assert priv.decrypt([total]) == [sum(a) % pub.n]
    assert pub.sum([]) == 1


def test_scalar_mul_with_signed_scalars(keys: tuple[PublicKey, PrivateKey]) -> None:
    # Prepare
    pub, priv = keys
    m = [5, pub.n - 3, 123456789, 0, 42]
    k = [-7, -2, 3, -9, 0]

    # Act
    result = pub.scalar_mul(pub.encrypt(m), k)

    # Assert: k = 0 gives 1, the deterministic encryption of 0.
    assert priv.decrypt(result) == [(ki * mi) % pub.n for ki, mi in zip(k, m, strict=True)]
    assert result[4] == 1


def test_dot_on_encoded_reals(keys: tuple[PublicKey, PrivateKey]) -> None:
    # Prepare
    pub, priv = keys
    m = np.array([0.5, -1.25, 3.0, -0.001])
    w = np.array([-2.0, 0.75, 0.0, -4.5])
    cipher = pub.encrypt(encode(m, VALUE_BITS, pub.n))

    # Act
    result = pub.dot(cipher, to_exponents(w, DATA_BITS).tolist())

    # Assert: the scales multiply.
    got = decode(priv.decrypt([result]), VALUE_BITS + DATA_BITS, pub.n)[0]
    assert got == pytest.approx(float(w @ m), abs=1e-8)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, TOY_P * TOY_Q - 1), st.integers(-(2**40), 2**40)),
        max_size=40,
    )
)
def test_dot_matches_textbook_product(
    toy: tuple[PublicKey, PrivateKey], pairs: list[tuple[int, int]]
) -> None:
    # Prepare: exponents up to 40 bits exercise several bucket windows.
    pub, priv = toy
    m, k = [p[0] for p in pairs], [p[1] for p in pairs]
    cipher = pub.encrypt(m)

    # Act
    result = pub.dot(cipher, k)

    # Assert: same ciphertext as one pow per term (Python inverts for negative exponents).
    n2 = pub.nsquare
    assert result == math.prod(pow(c, e, n2) for c, e in zip(cipher, k, strict=True)) % n2
    assert priv.decrypt([result]) == [sum(a * b for a, b in pairs) % pub.n]


def test_matvec_t_matches_numpy(keys: tuple[PublicKey, PrivateKey]) -> None:
    # Prepare: signed data with zero entries, an all-zero column and an all-negative column.
    pub, priv = keys
    rng = np.random.default_rng(7)
    xf = rng.normal(size=(60, 7))
    xf[rng.random(xf.shape) < 0.2] = 0.0
    xf[:, 2] = 0.0
    xf[:, 5] = -np.abs(xf[:, 5]) - 0.1
    m = rng.normal(scale=3.0, size=60)
    x, enc = to_exponents(xf, DATA_BITS), encode(m, VALUE_BITS, pub.n)

    # Act
    result = pub.matvec_t(x, pub.encrypt(enc))

    # Assert: exact against integer maths, close against float numpy.
    plain = priv.decrypt(result)
    signed = [e if e < pub.n // 2 else e - pub.n for e in enc]
    exact = [sum(int(a) * s for a, s in zip(col, signed, strict=True)) % pub.n for col in x.T]
    assert plain == exact
    got = decode(plain, VALUE_BITS + DATA_BITS, pub.n)
    np.testing.assert_allclose(got, (x / 2.0**DATA_BITS).T @ m, rtol=0, atol=1e-8)
    np.testing.assert_allclose(got, xf.T @ m, rtol=0, atol=60 * 4 * 2.0**-DATA_BITS)
    assert result[2] == 1


def test_matvec_t_rejects_shape_mismatch(keys: tuple[PublicKey, PrivateKey]) -> None:
    pub, _ = keys

    with pytest.raises(ValueError, match="shape"):
        pub.matvec_t(np.zeros((3, 2), dtype=np.int64), pub.encrypt([1, 2]))


def test_rerandomize_changes_ciphertexts_not_plaintexts(keys: tuple[PublicKey, PrivateKey]) -> None:
    pub, priv = keys
    plain = residues(pub.n, 4)
    cipher = pub.encrypt(plain)

    fresh = pub.rerandomize(cipher)

    assert all(a != b for a, b in zip(cipher, fresh, strict=True))
    assert priv.decrypt(fresh) == plain


def test_mask_hides_and_unmask_recovers(keys: tuple[PublicKey, PrivateKey]) -> None:
    # Prepare
    pub, priv = keys
    plain = [0, 1, 12345, pub.n - 1]
    cipher = pub.encrypt(plain)

    # Act
    masked, masks = pub.mask(cipher)
    seen = priv.decrypt(masked)

    # Assert: what the key holder sees is (m + R) mod n, which only the masker can undo.
    assert all(0 <= r < pub.n for r in masks)
    assert seen == [(m + r) % pub.n for m, r in zip(plain, masks, strict=True)]
    assert all(s != m for s, m in zip(seen, plain, strict=True))
    assert unmask(seen, masks, pub.n) == plain


def test_masked_decryptions_are_uniform(keys: tuple[PublicKey, PrivateKey]) -> None:
    # Prepare: 2000 masks of one fixed plaintext (a small value, the worst case for a bias).
    pub, priv = keys
    draws, bins = 2000, 10
    [cipher] = pub.encrypt([3])

    # Act: real decryptions of every masked copy (512-bit decrypts are cheap).
    masked, _ = pub.mask([cipher] * draws)
    seen = priv.decrypt(masked)

    # Assert: chi-square over 10 equal bins of [0, n), 9 degrees of freedom. The bound
    # 55.45 is the 1e-8 upper tail (scipy.stats.chi2.isf(1e-8, 9)), so a correct mask
    # fails once in a hundred million runs, while masks drawn from [0, n/2) (chi2 ~ 2000)
    # or with a fixed offset are caught every time.
    counts = np.bincount([s * bins // pub.n for s in seen], minlength=bins)
    expected = draws / bins
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert chi2 < 55.45
    assert len(set(seen)) == draws


def test_check_ciphertexts() -> None:
    pub = PublicKey(TINY_P * TINY_Q)

    pub.check_ciphertexts(pub.encrypt([1, 2, 3]))
    for bad in (0, pub.nsquare, TINY_Q * 5, -1):
        with pytest.raises(CryptoError, match="reject"):
            pub.check_ciphertexts([1, bad])


def test_negative_exponent_on_a_non_unit_raises() -> None:
    pub = PublicKey(TINY_P * TINY_Q)

    with pytest.raises(CryptoError, match="not invertible"):
        pub.scalar_mul([TINY_P], [-1])
    with pytest.raises(CryptoError, match="not invertible"):
        pub.dot([TINY_P, 2], [-1, 1])


def test_decrypt_rejects_out_of_range() -> None:
    pub = PublicKey(TINY_P * TINY_Q)
    priv = PrivateKey(pub, TINY_P, TINY_Q)

    with pytest.raises(CryptoError, match="outside"):
        priv.decrypt([pub.nsquare])


def test_from_n_validates_peer_moduli(keys: tuple[PublicKey, PrivateKey]) -> None:
    pub, _ = keys

    assert PublicKey.from_n(pub.n) == pub
    with pytest.raises(CryptoError):
        PublicKey.from_n(pub.n + 1)
    with pytest.raises(CryptoError):
        PublicKey.from_n(TINY_P * TINY_Q)
    with pytest.raises(CryptoError):
        PublicKey.from_n(2**255 - 1)  # 255 bits: below the 256-bit floor
    assert PublicKey.from_n(2**255 + 1).bits == 256
    with pytest.raises(CryptoError):
        PublicKey(4)


def test_private_key_never_shows_or_ships_its_primes() -> None:
    # Prepare
    phe_pub, phe_priv = phe.paillier.generate_paillier_keypair(n_length=512)
    pub = PublicKey(phe_pub.n)

    # Act
    priv = PrivateKey(pub, phe_priv.p, phe_priv.q)
    text = repr(priv) + str(priv)

    # Assert
    for prime in (phe_priv.p, phe_priv.q):
        assert str(prime) not in text
        assert f"{prime:x}" not in text
    with pytest.raises(TypeError):
        pickle.dumps(priv)
    with pytest.raises(TypeError):
        copy.deepcopy(priv)
    with pytest.raises(CryptoError):
        PrivateKey(pub, phe_priv.p, phe_priv.q + 2)


def test_generate_keypair_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CryptoError, match="too small"):
        generate_keypair(128)

    monkeypatch.setattr(phe.util, "HAVE_GMP", False)
    with pytest.raises(CryptoError, match="pip install gmpy2"):
        require_gmpy2()
    with pytest.raises(CryptoError, match="pip install gmpy2"):
        generate_keypair(512)


def test_generated_key_has_requested_size(keys: tuple[PublicKey, PrivateKey]) -> None:
    pub, priv = keys

    assert pub.bits == 512
    assert priv.public_key is pub


def test_crt_obfuscators_are_the_public_ones() -> None:
    from privfl.crypto.paillier import obfuscators_crt, private_primes

    pub, priv = generate_keypair(512)
    p, q = private_primes(priv)
    fresh = obfuscators_crt(pub.n, p, q, 3)
    assert len(set(fresh)) == 3 and priv.decrypt(fresh) == [0, 0, 0]
    # n-th residues, like r^n mod n²: their group has order φ(n) (tests/crypto/test_keyholder.py
    # checks the generators and the known answer)
    phi = (p - 1) * (q - 1)
    assert all(pow(r, phi, pub.n**2) == 1 for r in fresh)
    with pytest.raises(CryptoError):
        obfuscators_crt(pub.n, p + 2, q, 1)
