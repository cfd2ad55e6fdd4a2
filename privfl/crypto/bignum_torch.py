"""Batched Montgomery arithmetic on big integers held in PyTorch tensors (CUDA, or CPU torch).

A batch of residues mod ``N`` is an int64 tensor of shape ``(batch, k)``: 16-bit limbs,
least significant first, with ``R = 2^(16k) >= 16 N``. Why these choices:

* **Products by FFT in float64.** Two rows of at most ``2^16 + 2^10 + 1`` per limb multiply
  into coefficients below ``k · 2^32.05 < 2^41`` for ``k <= 257`` (a 4096-bit ``n²``), far inside
  float64's 53 exact bits, so ``round(irfft(rfft(a) · rfft(b)))`` is the exact product when
  the transform's rounding error stays under 1/2; it stays near ``2^-10`` here. Every
  product records its largest distance to the nearest integer and :meth:`Montgomery.check`
  refuses a batch where it passed ``1/8`` instead of returning a wrong integer. The FFT
  keeps memory per product at ``O(k)`` (a schoolbook outer product would be ``O(k²)``)
  and the same code runs as cuFFT on a GPU and pocketfft on a CPU.
* **No exact carry chain on the device.** Two parallel carry passes leave every limb of a
  coefficient row below ``2^42`` in ``[0, 2^16 + 2^10]``: not a canonical form, but the
  same integer, and the Montgomery step only needs ``T mod R`` up to congruence (such low
  limbs hold at most ``1.02 R``). ``R >= 16 N`` (Walter's bound, with room for that) keeps
  every intermediate below ``2N`` with no conditional subtraction, so a whole
  exponentiation runs without a data-dependent branch or a sequential carry; the host
  makes the result canonical once, at the end.
* **Fixed exponents, uniform windows.** Every row of a batch raises to the same exponent
  (``n``, ``p``, ``p − 1``) or to digits of a fixed-base table (DJN), so each step is the
  same tensor operation on every row: no divergence on a GPU.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from privfl.errors import CryptoError

LIMB_BITS = 16
MASK = (1 << LIMB_BITS) - 1
WINDOW = 5
"""Bits per window of a fixed exponent: 2^5 table entries per batch row."""
MAX_ROUNDING = 0.125
"""Largest accepted distance of an FFT product coefficient to its integer (exact below 1/2)."""


def fft_size(length: int) -> int:
    """The smallest 5-smooth length (fast in cuFFT and pocketfft) of at least ``length``."""
    best = 1 << (length - 1).bit_length()
    p2 = 1
    while p2 < best:
        p3 = p2
        while p3 < best:
            p5 = p3
            while p5 < best:
                if p5 >= length:
                    best = p5
                p5 *= 5
            p3 *= 3
        p2 *= 2
    return best


def limbs_for(modulus: int) -> int:
    """Limbs per residue: ``2^(16k) >= 16 · modulus`` (the no-subtraction bound above)."""
    return -(-(modulus.bit_length() + 4) // LIMB_BITS)


def to_limbs(values: Sequence[int], k: int, device: torch.device | str) -> torch.Tensor:
    """Non-negative ints below ``2^(16k)`` as a ``(len, k)`` int64 tensor of 16-bit limbs."""
    try:
        raw = b"".join(int(v).to_bytes(2 * k, "little") for v in values)
    except OverflowError as exc:
        raise CryptoError(
            f"a value is negative or wider than the engine's {16 * k}-bit limbs for this "
            "modulus; reduce it first"
        ) from exc
    array = np.frombuffer(raw, dtype="<u2").reshape(len(values), k).astype(np.int64)
    return torch.from_numpy(array).to(device)


def from_limbs(x: torch.Tensor) -> list[int]:
    """The integers of a ``(batch, k)`` limb tensor, limbs possibly above ``2^16`` (exact carry)."""
    array = x.to("cpu").numpy().astype(np.int64)
    carry = np.zeros(array.shape[0], dtype=np.int64)
    for i in range(array.shape[1]):  # sequential in the limbs, vectorised over the batch
        total = array[:, i] + carry
        array[:, i] = total & MASK
        carry = total >> LIMB_BITS
    if carry.any():
        raise CryptoError("a result overflowed its limbs; the engine's width is wrong for the key")
    raw = array.astype("<u2").tobytes()
    width = 2 * array.shape[1]
    return [int.from_bytes(raw[i : i + width], "little") for i in range(0, len(raw), width)]


def _carry(x: torch.Tensor) -> torch.Tensor:
    """Two parallel carry passes: limbs below ``2^42`` come out in ``[0, 2^16 + 2^10]``.

    The carry out of the top limb is dropped; callers size ``x`` so that it is zero, or
    want it dropped (a value mod ``R``).
    """
    for _ in range(2):
        high = x >> LIMB_BITS
        x = x & MASK
        x[..., 1:] += high[..., :-1]
    return x


class Montgomery:
    """Montgomery multiplication and exponentiation mod one odd ``modulus`` on one device."""

    def __init__(self, modulus: int, device: torch.device | str) -> None:
        """Precompute ``N' = −N⁻¹ mod R``, ``R² mod N`` and the transforms of ``N`` and ``N'``."""
        if modulus < 3 or modulus % 2 == 0:
            raise CryptoError("a Montgomery modulus must be odd and at least 3")
        self.modulus, self.device = modulus, torch.device(device)
        self.k = limbs_for(modulus)
        self.size = fft_size(2 * self.k)
        r = 1 << (LIMB_BITS * self.k)
        self._n_f = self.spectrum(to_limbs([modulus], self.k, device))
        self._n_prime_f = self.spectrum(to_limbs([-pow(modulus, -1, r) % r], self.k, device))
        self._r2_f = self.spectrum(to_limbs([r * r % modulus], self.k, device))
        self.one = to_limbs([r % modulus], self.k, device)  # 1 in Montgomery form
        self._rounding = torch.zeros((), dtype=torch.float64, device=self.device)

    def spectrum(self, x: torch.Tensor) -> torch.Tensor:
        """The real FFT of limb rows, zero-padded to the product length."""
        spectrum: torch.Tensor = torch.fft.rfft(x.to(torch.float64), n=self.size)
        return spectrum

    def _product(self, fa: torch.Tensor, fb: torch.Tensor, length: int) -> torch.Tensor:
        """The first ``length`` coefficients of the exact product of two spectra."""
        c = torch.fft.irfft(fa * fb, n=self.size)[..., :length]
        rounded = torch.round(c)
        self._rounding = torch.maximum(self._rounding, (c - rounded).abs().max())
        return rounded.to(torch.int64)

    def check(self) -> None:
        """Raise CryptoError if any product since the last check was not provably exact."""
        worst = float(self._rounding)
        self._rounding.zero_()
        if worst > MAX_ROUNDING:
            raise CryptoError(
                f"an FFT product was {worst:.3f} from an integer (limit {MAX_ROUNDING}); "
                "the results are discarded"
            )

    def _reduce(self, t: torch.Tensor) -> torch.Tensor:
        """``t · R⁻¹ mod N`` below ``2N`` for carried ``t`` of ``2k + 1`` limbs below ``4 N²``."""
        k = self.k
        m = _carry(self._product(self.spectrum(t[..., :k]), self._n_prime_f, k))  # mod R
        mn = self._product(self.spectrum(m), self._n_f, 2 * k - 1)
        u = _carry(t + torch.nn.functional.pad(mn, (0, 2)))
        # u ≡ 0 mod R, and its low limbs hold 0 or exactly R (non-canonical limbs): the
        # latter is a carry of one into limb k.
        high = u[..., k : 2 * k].clone()
        high[..., 0] += (u[..., :k] != 0).any(dim=-1)
        return high

    def mul(self, a: torch.Tensor, fb: torch.Tensor) -> torch.Tensor:
        """Montgomery product of limb rows ``a`` and a spectrum ``fb`` (both below ``2N``)."""
        t = self._product(self.spectrum(a), fb, 2 * self.k - 1)
        return self._reduce(_carry(torch.nn.functional.pad(t, (0, 2))))

    def square(self, a: torch.Tensor) -> torch.Tensor:
        """Montgomery square: one forward transform instead of two."""
        fa = self.spectrum(a)
        t = self._product(fa, fa, 2 * self.k - 1)
        return self._reduce(_carry(torch.nn.functional.pad(t, (0, 2))))

    def enter(self, values: Sequence[int]) -> torch.Tensor:
        """Residues (each below ``N``) into Montgomery form on the device."""
        return self.mul(to_limbs(values, self.k, self.device), self._r2_f)

    def leave(self, x: torch.Tensor) -> list[int]:
        """Montgomery form back to canonical ints in ``[0, N)``; checks the batch's rounding."""
        plain = self._reduce(torch.nn.functional.pad(x, (0, self.k + 1)))
        self.check()
        return [v % self.modulus for v in from_limbs(plain)]

    def pow(self, x: torch.Tensor, exponent: int) -> torch.Tensor:
        """``x^exponent`` (Montgomery form in and out) for one exponent shared by every row."""
        if exponent < 0:
            raise CryptoError("a negative exponent has no place in this engine")
        fx = self.spectrum(x)
        table = [x]
        for _ in range(2, 1 << WINDOW):
            table.append(self.mul(table[-1], fx))
        spectra = [self.spectrum(self.one), fx, *(self.spectrum(entry) for entry in table[1:])]
        acc = self.one.expand_as(x).clone()
        windows = -(-exponent.bit_length() // WINDOW)
        for i in range(windows - 1, -1, -1):
            if i != windows - 1:
                for _ in range(WINDOW):
                    acc = self.square(acc)
            digit = (exponent >> (WINDOW * i)) & ((1 << WINDOW) - 1)
            if digit:
                acc = self.mul(acc, spectra[digit])
        return acc

    def pow_ints(self, bases: Sequence[int], exponent: int) -> list[int]:
        """``b^exponent mod N`` for every base (each below ``N``), canonical ints out."""
        return self.leave(self.pow(self.enter(bases), exponent))


class FixedBase:
    """``g^a mod N`` for one base ``g`` and per-row exponents below ``2^bits`` (DJN obfuscators).

    ``rows[i][d] = g^(d · 2^(w·i)) mod N`` for every window ``i`` and digit ``d`` (computed
    once on the host: :func:`privfl.crypto.djn.table`) is kept as spectra on the device
    (about 47 MB for a 2048-bit key's ``n²`` at w = 6), so an exponentiation is one gathered
    multiplication per window and no squaring.
    """

    def __init__(self, mont: Montgomery, rows: Sequence[Sequence[Any]], bits: int) -> None:
        """Move the host table into Montgomery form on the device, one batched product."""
        self.mont, self.bits = mont, bits
        self.window = (len(rows[0]) - 1).bit_length()
        if len(rows[0]) != 1 << self.window or len(rows) * self.window < bits:
            raise CryptoError("the fixed-base table does not cover the exponent's bits")
        entries = mont.enter([int(v) for row in rows for v in row])
        mont.check()
        spectra = mont.spectrum(entries)
        self._table = spectra.reshape(len(rows), len(rows[0]), -1)  # (windows, 2^w, bins)

    def pow_ints(self, exponents: Sequence[int]) -> list[int]:
        """``base^a mod N`` for every ``a`` in ``[0, 2^bits)``, canonical ints out."""
        if any(not 0 <= a < 1 << self.bits for a in exponents):
            raise CryptoError(f"a fixed-base exponent is outside [0, 2^{self.bits})")
        width = -(-self.bits // 8)
        raw = b"".join(int(a).to_bytes(width, "little") for a in exponents)
        return self.pow_bytes(np.frombuffer(raw, dtype=np.uint8).reshape(len(exponents), width))

    def pow_bytes(self, exponents: npt.NDArray[np.uint8]) -> list[int]:
        """``base^a`` for exponents given as little-endian bytes, one row each (bits above
        ``bits`` must be zero: :func:`random_exponents` draws them so)."""
        digits = _digits(exponents, self.window, self._table.shape[0]).to(self.mont.device)
        acc = self.mont.one.expand(exponents.shape[0], -1).clone()
        for i in range(self._table.shape[0]):
            acc = self.mont.mul(acc, self._table[i, digits[:, i]])
        return self.mont.leave(acc)


def _digits(exponents: npt.NDArray[np.uint8], width: int, count: int) -> torch.Tensor:
    """Base-``2^width`` digits of little-endian byte rows, lowest first: ``(rows, count)``."""
    bits = np.unpackbits(exponents, axis=1, bitorder="little")[:, : width * count]
    bits = np.pad(bits, ((0, 0), (0, width * count - bits.shape[1])))
    weights = (1 << np.arange(width)).astype(np.int64)
    return torch.from_numpy(bits.reshape(-1, count, width).astype(np.int64) @ weights)


def random_exponents(count: int, bits: int) -> npt.NDArray[np.uint8]:
    """``count`` exponents uniform on ``[0, 2^bits)`` from the OS CSPRNG, as little-endian rows."""
    width = -(-bits // 8)
    rows = np.frombuffer(secrets.token_bytes(count * width), dtype=np.uint8).reshape(count, width)
    rows = rows.copy()
    if bits % 8:
        rows[:, -1] &= (1 << (bits % 8)) - 1
    return rows
