"""Paillier (g = n + 1) on vectors of raw ciphertext ints, with phe keys and gmpy2 arithmetic.

Plaintexts are residues in ``[0, n)`` produced by :mod:`privfl.crypto.encoding`; this module
never sees floats. Ciphertexts go in as ``int`` (or gmpy2 ``mpz``) and always come out as
plain Python ``int`` so the codec can serialise them without knowing about gmpy2; the
conversion costs well under 1% of the modular arithmetic around it.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt
import phe.paillier
import phe.util

from privfl.crypto import djn, keyholder
from privfl.crypto.gmp import mpz as _mpz
from privfl.crypto.gmp import powmod as _powmod
from privfl.errors import CryptoError

OBFUSCATIONS = ("standard", "djn")
"""How fresh encryptions of 0 are made: ``r**n`` (default) or DJN's ``h_s**a``."""

_MIN_BITS = 256
"""Below this, even tests stop being meaningful: the fixed-point range is too small."""


def require_gmpy2() -> None:
    """Raise CryptoError unless phe does its big-int arithmetic with gmpy2."""
    if not getattr(phe.util, "HAVE_GMP", False):
        raise CryptoError(
            "gmpy2 is not available to phe: install gmpy2 (pip install gmpy2); "
            "Paillier is 7-19x slower without it"
        )


def obfuscators(n: int, count: int, h_s: int = 0) -> list[int]:
    """``count`` fresh encryptions of 0: ``r**n mod n**2`` with ``r`` a CSPRNG unit of Z_n.

    With a DJN generator ``h_s`` (non-zero) they are ``h_s**a`` with a short exponent
    instead, from a fixed-base table: about 7x cheaper (see :mod:`privfl.crypto.djn`).
    """
    if h_s:
        return djn.obfuscators(n, h_s, count)
    n_mpz = _mpz(n)
    n2 = n_mpz * n_mpz
    out: list[int] = []
    while len(out) < count:
        r = secrets.randbelow(n - 1) + 1
        # A non-unit would reveal a factor of n; the chance is ~2**-1023, the check is cheap.
        if math.gcd(r, n) == 1:
            out.append(int(_powmod(_mpz(r), n_mpz, n2)))
    return out


def obfuscators_crt(n: int, p: int, q: int, count: int) -> list[int]:
    """:func:`obfuscators` (standard mode) for the key holder, by the Chinese remainder theorem.

    The same distribution as ``r**n mod n**2`` for a CSPRNG unit ``r``: uniform over the
    n-th residues, which are ``T_p × T_q`` with ``T_p`` the order-``(p−1)`` subgroup of
    ``Z*_{p²}`` (Paillier's ``gcd(n, φ(n)) = 1`` makes ``r ↦ r^n`` onto it). ``T_p`` is cyclic,
    so ``γ_p^x mod p²`` for a generator ``γ_p`` and a CSPRNG ``x`` on ``[0, p−1)`` is uniform on
    it: two fixed-base powers at half-size moduli (:mod:`privfl.crypto.keyholder`), about
    a tenth of ``r**n mod n**2`` (the ``a^p mod p²`` of each CSPRNG unit ``a`` it computed
    before took about 2.8× this). Only the key holder's own processes know ``p`` and ``q``
    (see :func:`decrypt_with_primes`).
    """
    return keyholder.obfuscators(n, p, q, count)


def _not_invertible(exc: Exception) -> NoReturn:
    """Translate a failed modular inversion (a ciphertext sharing a factor with n)."""
    raise CryptoError(
        "a ciphertext is not invertible mod n^2: it was not produced by this public key; "
        "reject the peer's message"
    ) from exc


def _best_window(count: int, bits: int) -> int:
    """Bucket width minimising the multiplications of the bucket method (see _multi_exp)."""
    return min(range(1, 17), key=lambda w: -(-bits // w) * (count + 2 ** (w + 1)))


def _multi_exp(bases: Sequence[Any], exps: Sequence[int], mod: Any) -> Any:
    """Return ``prod(b ** e) mod mod`` for non-negative ``e`` with Pippenger's bucket method.

    Per window of ``w`` exponent bits each base costs one multiplication into its bucket,
    instead of ``w`` squarings per base in separate powmods; for 426 bases with ~20-bit
    exponents that is about 5x fewer multiplications than one powmod per entry.
    """
    top = max(exps, default=0).bit_length()
    if top == 0:
        return _mpz(1)
    width = _best_window(len(bases), top)
    digit_mask = (1 << width) - 1
    result = _mpz(1)
    for shift in range((top - 1) // width * width, -1, -width):
        for _ in range(width):
            result = result * result % mod
        buckets: list[Any] = [None] * (digit_mask + 1)
        for base, exp in zip(bases, exps, strict=True):
            digit = (exp >> shift) & digit_mask
            if digit:
                bucket = buckets[digit]
                buckets[digit] = base if bucket is None else bucket * base % mod
        # Suffix products: bucket d ends up multiplied into the total exactly d times.
        running, total = _mpz(1), _mpz(1)
        for digit in range(digit_mask, 0, -1):
            if buckets[digit] is not None:
                running = running * buckets[digit] % mod
            total = total * running % mod
        result = result * total % mod
    return result


def _signed_multi_exp(bases: Sequence[Any], exps: Sequence[int], mod: Any) -> Any:
    """Return ``prod(b ** e) mod mod`` for signed ``e`` with a single modular inversion.

    Negative exponents are gathered into one product and inverted once, which is cheaper
    than inverting every base that ever meets a negative exponent.
    """
    pos = [(b, e) for b, e in zip(bases, exps, strict=True) if e > 0]
    neg = [(b, -e) for b, e in zip(bases, exps, strict=True) if e < 0]
    result = _multi_exp([b for b, _ in pos], [e for _, e in pos], mod)
    if neg:
        denominator = _multi_exp([b for b, _ in neg], [e for _, e in neg], mod)
        try:
            result = result * _powmod(denominator, -1, mod) % mod
        except (ZeroDivisionError, ValueError) as exc:
            _not_invertible(exc)
    return result


@dataclass(frozen=True)
class PublicKey:
    """A Paillier public key ``n`` (with ``g = n + 1``) and the vector operations under it.

    ``h_s`` (0 = none) is the Server's DJN generator: when set, every fresh obfuscation
    this key makes is DJN's short-exponent ``h_s**a`` (opt-in ``obfuscation = "djn"``).

    Every method takes ciphertexts as ``int`` or ``mpz`` and returns plain ``int``.
    Results of :meth:`add`, :meth:`scalar_mul`, :meth:`dot` and :meth:`matvec_t` are not
    re-randomised: call :meth:`rerandomize` or :meth:`mask` before they leave the party
    if their link to the inputs must not be visible.
    """

    n: int
    h_s: int = 0
    _n: Any = field(init=False, repr=False, compare=False)
    _n2: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Cache ``n`` and ``n**2`` as mpz; reject moduli no Paillier key can have."""
        if not isinstance(self.n, int) or self.n < 3 or self.n % 2 == 0:
            raise CryptoError("a Paillier modulus is an odd integer >= 3; the key is corrupt")
        object.__setattr__(self, "_n", _mpz(self.n))
        object.__setattr__(self, "_n2", _mpz(self.n) * _mpz(self.n))

    @classmethod
    def from_n(cls, n: int, h_s: int = 0) -> PublicKey:
        """Build a key received from a peer, refusing moduli too small to be a real key."""
        if not isinstance(n, int) or n % 2 == 0 or n <= 2 ** (_MIN_BITS - 1):
            raise CryptoError(
                f"received a Paillier modulus that is even or below {_MIN_BITS} bits; "
                "the peer's key is invalid"
            )
        if h_s:
            djn.check_generator(n, h_s)
        return cls(n, h_s)

    @property
    def obfuscation(self) -> str:
        """``"djn"`` with a DJN generator, else ``"standard"``."""
        return "djn" if self.h_s else "standard"

    def fresh_noise(self, count: int) -> list[int]:
        """``count`` fresh encryptions of 0 in this key's obfuscation mode."""
        return obfuscators(self.n, count, self.h_s)

    @property
    def nsquare(self) -> int:
        """The ciphertext modulus ``n**2``."""
        return int(self._n2)

    @property
    def bits(self) -> int:
        """Bit length of ``n``."""
        return self.n.bit_length()

    @property
    def byte_width(self) -> int:
        """Fixed number of bytes that holds any ciphertext (< n**2) on the wire."""
        return (2 * self.bits + 7) // 8

    def check_ciphertexts(self, c: Sequence[int]) -> None:
        """Raise CryptoError unless every ``c_i`` is a unit in ``(0, n**2)``; use on peer input.

        One gcd for the whole vector: ``Π c_i mod n`` is a unit exactly when every
        ``c_i`` is (a prime factor of n dividing the product divides some ``c_i``).
        """
        n, product = self._n, _mpz(1)
        for ci in c:
            if not 0 < ci < self._n2:
                product = _mpz(0)
                break
            product = product * ci % n
        if math.gcd(int(product), self.n) != 1:
            raise CryptoError(
                "a ciphertext is outside (0, n^2) or shares a factor with n; "
                "reject the peer's message"
            )

    def _check_plain(self, plain: Sequence[int]) -> None:
        """Raise CryptoError unless every plaintext is an encoded residue in ``[0, n)``."""
        for m in plain:
            if not 0 <= m < self.n:
                raise CryptoError(
                    "a plaintext is not a residue in [0, n); encode it with "
                    "privfl.crypto.encoding.encode first"
                )

    def _noise(self, r: Any) -> Any:
        """Return ``r**n mod n**2``, an encryption of 0."""
        return _powmod(r, self._n, self._n2)

    def encrypt(self, plain: Sequence[int]) -> list[int]:
        """Encrypt residues ``m_i`` in ``[0, n)`` with fresh CSPRNG obfuscators."""
        return self.encrypt_with_noise(plain, self.fresh_noise(len(plain)))

    def encrypt_with(self, plain: Sequence[int], r_values: Sequence[int]) -> list[int]:
        """Encrypt with given obfuscators: ``(1 + n*m) * r**n mod n**2`` (known-answer tests)."""
        if len(plain) != len(r_values):
            raise ValueError(f"{len(plain)} plaintexts but {len(r_values)} obfuscators")
        self._check_plain(plain)
        for r in r_values:
            if not 0 < r < self.n or math.gcd(int(r), self.n) != 1:
                raise CryptoError("an obfuscator r must be a unit in (0, n)")
        n, n2 = self._n, self._n2
        return [
            int((1 + n * m) * self._noise(_mpz(r)) % n2)
            for m, r in zip(plain, r_values, strict=True)
        ]

    def encrypt_with_noise(self, plain: Sequence[int], noise: Sequence[int]) -> list[int]:
        """Encrypt with precomputed obfuscators ``noise_i = r_i**n mod n**2`` (see crypto.noise)."""
        if len(plain) != len(noise):
            raise ValueError(f"{len(plain)} plaintexts but {len(noise)} obfuscators")
        self._check_plain(plain)
        n, n2 = self._n, self._n2
        # (1 + n·m)·r ≡ r + n·(m·r mod n) (mod n²): a product with n² and a division by
        # n² fewer, and an encryption of 0 is its obfuscator (half of a hidden level's rows)
        return [
            int((r + n * (m * _mpz(r) % n)) % n2) if m else int(r)
            for m, r in zip(plain, noise, strict=True)
        ]

    def add(self, a: Sequence[int], b: Sequence[int]) -> list[int]:
        """Elementwise homomorphic addition: decrypts to ``a_i + b_i mod n``."""
        if len(a) != len(b):
            raise ValueError(f"cannot add {len(a)} ciphertexts to {len(b)}")
        n2 = self._n2
        return [int(_mpz(x) * y % n2) for x, y in zip(a, b, strict=True)]

    def add_plain(self, c: Sequence[int], plain: Sequence[int]) -> list[int]:
        """Add plaintext residues: ``c_i * (1 + n*m_i)``; the obfuscation of ``c_i`` is kept."""
        if len(c) != len(plain):
            raise ValueError(f"{len(c)} ciphertexts but {len(plain)} plaintexts")
        self._check_plain(plain)
        n, n2 = self._n, self._n2
        return [int(_mpz(ci) * (1 + n * m) % n2) for ci, m in zip(c, plain, strict=True)]

    def sum(self, c: Sequence[int]) -> int:
        """Encryption of ``sum(m_i)``: the product of all ciphertexts (1 for none)."""
        acc, n2 = _mpz(1), self._n2
        for ci in c:
            acc = acc * ci % n2
        return int(acc)

    def scalar_mul(self, c: Sequence[int], k: Sequence[int]) -> list[int]:
        """Elementwise ``c_i ** k_i`` for signed ints: decrypts to ``k_i * m_i mod n``."""
        if len(c) != len(k):
            raise ValueError(f"{len(c)} ciphertexts but {len(k)} scalars")
        n2 = self._n2
        try:
            # powmod inverts the base itself when k_i < 0; k_i == 0 yields 1, an encryption of 0.
            return [int(_powmod(_mpz(ci), int(ki), n2)) for ci, ki in zip(c, k, strict=True)]
        except (ZeroDivisionError, ValueError) as exc:
            _not_invertible(exc)

    def dot(self, c: Sequence[int], k: Sequence[int]) -> int:
        """Encryption of ``sum(k_i * m_i)`` for signed ints ``k_i``."""
        if len(c) != len(k):
            raise ValueError(f"{len(c)} ciphertexts but {len(k)} scalars")
        return int(_signed_multi_exp([_mpz(ci) for ci in c], [int(ki) for ki in k], self._n2))

    def matvec_t(self, x: npt.NDArray[np.int64], c: Sequence[int]) -> list[int]:
        """Encrypted ``x.T @ m``: entry j encrypts ``sum_i x[i, j] * m_i`` for signed int64 ``x``.

        The hot path of the vertical protocol. Each column is one multi-exponentiation
        (bucket method), zero entries are skipped and negative entries cost one inversion
        per column rather than one per ciphertext.
        """
        if x.ndim != 2 or x.shape[0] != len(c):
            raise ValueError(f"x has shape {x.shape} but there are {len(c)} ciphertexts")
        bases = [_mpz(ci) for ci in c]
        out: list[int] = []
        for column in x.T.tolist():  # tolist: Python ints, no int64 overflow in the maths
            nonzero = [(b, e) for b, e in zip(bases, column, strict=True) if e]
            exps = [e for _, e in nonzero]
            out.append(int(_signed_multi_exp([b for b, _ in nonzero], exps, self._n2)))
        return out

    def rerandomize(self, c: Sequence[int], noise: Sequence[int] | None = None) -> list[int]:
        """Multiply each ciphertext by a fresh ``r**n``: same plaintexts, unlinkable ciphertexts.

        ``noise`` supplies precomputed ``r**n mod n**2`` values (see crypto.noise).
        """
        n2 = self._n2
        if noise is None:
            noise = self.fresh_noise(len(c))
        if len(noise) != len(c):
            raise ValueError(f"{len(c)} ciphertexts but {len(noise)} obfuscators")
        return [int(_mpz(ci) * r % n2) for ci, r in zip(c, noise, strict=True)]

    def mask(self, c: Sequence[int]) -> tuple[list[int], list[int]]:
        """Add masks ``R_i`` uniform over Z_n (CSPRNG); returns ``(masked, R)``.

        A key holder decrypting ``masked`` sees ``(m_i + R_i) mod n``, uniform and
        independent of ``m_i``; only the masking party can :func:`unmask` it.
        """
        masks = [secrets.randbelow(self.n) for _ in c]
        return self.add_plain(c, masks), masks


def unmask(values: Sequence[int], masks: Sequence[int], n: int) -> list[int]:
    """Remove masks from decrypted masked values: ``(v_i - R_i) mod n``."""
    if len(values) != len(masks):
        raise ValueError(f"{len(values)} values but {len(masks)} masks")
    return [(int(v) - int(r)) % n for v, r in zip(values, masks, strict=True)]


class PrivateKey:
    """A Paillier private key; the object never leaves its process (no serialisation, no pickle).

    Only its holder's own worker processes get the primes (:func:`private_primes`).
    """

    __slots__ = ("_key", "_public")

    def __init__(self, public_key: PublicKey, p: int, q: int) -> None:
        """Wrap phe's CRT private key for primes ``p * q == public_key.n``."""
        if p * q != public_key.n:
            raise CryptoError("p * q does not match the public modulus; the key pair is corrupt")
        self._public = public_key
        self._key = phe.paillier.PaillierPrivateKey(
            phe.paillier.PaillierPublicKey(public_key.n), p, q
        )

    @property
    def public_key(self) -> PublicKey:
        """The matching public key."""
        return self._public

    def decrypt(self, c: Sequence[int]) -> list[int]:
        """Decrypt to residues in ``[0, n)`` (decode them with privfl.crypto.encoding)."""
        n2 = self._public.nsquare
        out: list[int] = []
        for ci in c:
            if not 0 < ci < n2:
                raise CryptoError("a ciphertext is outside (0, n^2); reject the peer's message")
            out.append(int(self._key.raw_decrypt(int(ci))))
        return out

    def __repr__(self) -> str:
        """Name the key by size and a short public fingerprint, never by its primes."""
        return f"<PrivateKey {self._public.bits}-bit n=...{self._public.n % 2**32:08x}>"

    def __reduce__(self) -> NoReturn:
        """Refuse pickling and copying: the private key stays in the process that made it."""
        raise TypeError("a PrivateKey cannot be pickled or copied; it never leaves its process")


def private_primes(key: PrivateKey) -> tuple[int, int]:
    """The primes ``(p, q)``: for the Server's own checkpoint file (mode 0600), and for the
    key holder's own worker processes (:func:`decrypt_with_primes`, over local pipes)."""
    return int(key._key.p), int(key._key.q)


def decrypt_with_primes(n: int, p: int, q: int, c: Sequence[int]) -> list[int]:
    """Worker task of the key holder: :meth:`PrivateKey.decrypt` from the primes it was given.

    Only a party's own worker processes, on its own machine, call this (the SecureBoost
    Host spreads its histogram decryptions over them); the primes travel over local
    process pipes, never over the network, and are not kept after the task.
    """
    return PrivateKey(PublicKey(n), p, q).decrypt(c)


def generate_keypair(bits: int, obfuscation: str = "standard") -> tuple[PublicKey, PrivateKey]:
    """Generate a Paillier key pair with an ``bits``-bit modulus (phe, CSPRNG primes).

    ``obfuscation="djn"`` adds a fresh DJN generator ``h_s`` to the public key.
    """
    if obfuscation not in OBFUSCATIONS:
        raise CryptoError(f"obfuscation must be one of {', '.join(OBFUSCATIONS)}")
    require_gmpy2()
    if bits < _MIN_BITS:
        raise CryptoError(f"a {bits}-bit Paillier key is too small; use at least {_MIN_BITS}")
    phe_public, phe_private = phe.paillier.generate_paillier_keypair(n_length=bits)
    n = int(phe_public.n)
    public = PublicKey(n, djn.make_generator(n) if obfuscation == "djn" else 0)
    return public, PrivateKey(public, int(phe_private.p), int(phe_private.q))
