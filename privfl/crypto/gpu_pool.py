"""Paillier's heavy work on a GPU (``--engine cuda``): obfuscators and CRT decryptions in torch.

The same results as the CPU pool, bit for bit: obfuscators ``r^n mod n²`` (public key),
``CRT(a^p mod p², b^q mod q²)`` (the key holder) or DJN's ``h_s^a`` with the same
distributions as :func:`privfl.crypto.paillier.obfuscators` and ``obfuscators_crt``, and
decryptions equal to :meth:`PrivateKey.decrypt` (a residue mod n is unique). The
randomness (``r``, ``a``, ``b``, DJN exponents) is drawn on the host from the OS CSPRNG
(``secrets``) and only the exponentiations run on the device (:mod:`bignum_torch`).
``Xᵀ[[d]]`` stays on the party's CPU workers for now.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from privfl import pulse
from privfl.crypto import djn
from privfl.crypto.gmp import mpz
from privfl.crypto.paillier import PrivateKey, private_primes
from privfl.crypto.pools import NoisePool
from privfl.errors import ConfigError, CryptoError

BATCH = {"cuda": 8192, "cpu": 64}
"""Rows per device call: large on a GPU (its throughput needs thousands of rows in flight),
small on CPU torch (tests), where a batch is only a unit of progress."""


def load_torch(device: str) -> Any:
    """The ``torch`` module once ``device`` is usable, or a one-line ConfigError."""
    try:
        import torch
    except ImportError as exc:
        raise ConfigError(
            "--engine cuda needs PyTorch with CUDA: pip install 'privfl[cuda]'"
        ) from exc
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            "--engine cuda found no CUDA device (torch.cuda.is_available() is False); "
            "use --engine pool on this machine"
        )
    return torch


class DeviceKey:
    """One key's exponentiations on one device: standard, CRT (key holder) and DJN."""

    def __init__(self, n: int, device: str, *, h_s: int = 0, primes: tuple[int, int] | None = None):
        """Contexts are built lazily: a decrypting Server never pays for the ``n²`` one."""
        load_torch(device)
        self.n, self.device, self.h_s = n, device, h_s
        self.primes = None if primes is None else (min(primes), max(primes))
        if self.primes is not None and self.primes[0] * self.primes[1] != n:
            raise CryptoError("p * q does not match the public modulus; the key pair is corrupt")
        self._mont: dict[int, Any] = {}
        self._fixed: Any = None
        # One call on the device at a time: the prefetch thread and the party's own
        # decryptions share the contexts mod p² and q² (and their rounding records).
        self._lock = threading.Lock()

    def mont(self, modulus: int) -> Any:
        """The Montgomery context mod ``modulus`` (cached)."""
        from privfl.crypto.bignum_torch import Montgomery

        if modulus not in self._mont:
            self._mont[modulus] = Montgomery(modulus, self.device)
        return self._mont[modulus]

    def noise_standard(self, r_values: Sequence[int]) -> list[int]:
        """``r^n mod n²`` for given units ``r`` (fresh ones: :meth:`obfuscators`)."""
        return list(self.mont(self.n * self.n).pow_ints(r_values, self.n))

    def noise_crt(self, a_values: Sequence[int], b_values: Sequence[int]) -> list[int]:
        """``CRT(a^p mod p², b^q mod q²)``, as :func:`paillier.obfuscators_crt` combines them."""
        assert self.primes is not None
        p, q = self.primes
        p2, q2 = mpz(p) * p, mpz(q) * q
        q2_inv = pow(q2, -1, p2)
        xs = self.mont(int(p2)).pow_ints(a_values, p)
        ys = self.mont(int(q2)).pow_ints(b_values, q)
        return [int(y + q2 * ((mpz(x) - y) * q2_inv % p2)) for x, y in zip(xs, ys, strict=True)]

    def noise_djn(self, exponents: Any) -> list[int]:
        """``h_s^a mod n²`` for exponent rows (little-endian bytes) or ints."""
        from privfl.crypto.bignum_torch import FixedBase

        if self._fixed is None:
            n2 = self.mont(self.n * self.n)
            rows = djn.table(self.n, self.h_s)
            self._fixed = FixedBase(n2, rows, djn.exponent_bits(self.n))
        if isinstance(exponents, list):
            return list(self._fixed.pow_ints(exponents))
        return list(self._fixed.pow_bytes(exponents))

    def obfuscators(self, count: int) -> list[int]:
        """``count`` fresh obfuscators in this key's mode, randomness from the OS CSPRNG."""
        with self._lock:
            return self._obfuscators(count)

    def _obfuscators(self, count: int) -> list[int]:
        """:meth:`obfuscators` under the lock."""
        from privfl.crypto.bignum_torch import random_exponents

        if self.h_s:
            return self.noise_djn(random_exponents(count, djn.exponent_bits(self.n)))
        if self.primes is not None:
            p, q = self.primes
            a = [secrets.randbelow(p - 1) + 1 for _ in range(count)]
            b = [secrets.randbelow(q - 1) + 1 for _ in range(count)]
            return self.noise_crt(a, b)
        return self.noise_standard([_unit(self.n) for _ in range(count)])

    def decrypt(self, values: Sequence[int]) -> list[int]:
        """Paillier CRT decryption of ciphertexts in ``(0, n²)`` (the key holder only)."""
        if self.primes is None:
            raise CryptoError("decryption on the device needs the private primes")
        n2 = self.n * self.n
        if any(not 0 < int(c) < n2 for c in values):
            raise CryptoError("a ciphertext is outside (0, n^2); reject the peer's message")
        p, q = self.primes
        with self._lock:
            mp = self._decrypt_half(values, p)
            mq = self._decrypt_half(values, q)
        p_inv = pow(p, -1, q)
        return [int(x + (y - x) * p_inv % q * p) for x, y in zip(mp, mq, strict=True)]

    def _decrypt_half(self, values: Sequence[int], p: int) -> list[Any]:
        """``L(c^(p−1) mod p²) · h_p mod p`` for every ``c`` (Paillier's CRT half, g = n + 1)."""
        p2 = mpz(p) * p
        hp = pow((pow(self.n + 1, p - 1, int(p2)) - 1) // p, -1, p)
        powers = self.mont(int(p2)).pow_ints([int(mpz(c) % p2) for c in values], p - 1)
        return [(mpz(u) - 1) // p * hp % p for u in powers]


def _unit(n: int) -> int:
    """A CSPRNG unit of Z_n (a non-unit would reveal a factor; ~2^-1023, checked anyway)."""
    while True:
        r = secrets.randbelow(n - 1) + 1
        if math.gcd(r, n) == 1:
            return r


class GpuPool(NoisePool):
    """:class:`NoisePool` with obfuscators and decryptions on a torch device.

    A background thread fills the obfuscator queue batch by batch (torch releases the GIL
    while the device works); ``Xᵀ[[d]]`` and other split work stay on CPU workers.
    """

    def __init__(
        self, n: int, device: str, *, h_s: int = 0, primes: tuple[int, int] | None = None, **kw: Any
    ) -> None:
        """As :class:`NoisePool` (``workers``: CPU compute workers only; ``noise`` False: no
        obfuscators), with the obfuscators computed on ``device``."""
        noise = kw.pop("noise", True)
        super().__init__(n, h_s=h_s, primes=primes, noise=False, **kw)
        self.device_key = DeviceKey(n, device, h_s=h_s, primes=primes)
        self.chunk = BATCH["cuda" if device.startswith("cuda") else "cpu"]
        self._thread: ThreadPoolExecutor | None = ThreadPoolExecutor(1) if noise else None

    def _submit_noise(self, size: int) -> Future[list[int]]:
        """One batch of obfuscators on the device thread."""
        if self._thread is None:
            raise CryptoError("this pool was opened without obfuscators (noise=False)")
        return self._thread.submit(self.device_key.obfuscators, size)

    def prefetch(self, count: int, *, bulk: bool = False) -> None:
        """Queue ``count`` more obfuscators in device batches (``bulk`` changes nothing here)."""
        for start in range(0, count, self.chunk):
            size = min(self.chunk, count - start)
            self._pending.append(self._submit_noise(size))
            self._pending_count += size

    def take(self, count: int) -> list[int]:
        """``count`` obfuscators: queued ones first, the rest computed now on the device."""
        missing = count - len(self._ready) - self._pending_count
        if missing > 0:
            self.prefetch(missing)
        return self._collect(count)

    def decrypt(self, key: PrivateKey, values: Sequence[int]) -> list[int]:
        """The key holder's decryptions on the device, batch by batch (progress ticks between)."""
        if self.device_key.primes is None:
            p, q = private_primes(key)
            self.device_key.primes = (min(p, q), max(p, q))
        items, out = list(values), []
        for start in range(0, len(items), self.chunk):
            out += self.device_key.decrypt(items[start : start + self.chunk])
            pulse.tick(len(out), len(items))
        return out

    def close(self) -> None:
        """Stop the device thread and the CPU workers (pending work is dropped)."""
        if self._thread is not None:
            self._thread.shutdown(wait=True, cancel_futures=True)
            self._thread = None
        super().close()
