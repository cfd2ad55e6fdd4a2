"""Fixed-point encoding of reals as integers mod n, kept apart from the raw Paillier maths."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from privfl.errors import CryptoError

VALUE_BITS = 32
"""Fractional bits of values that get encrypted (residuals, gradients, Xw shares)."""

DATA_BITS = 16
"""Fractional bits of plaintext multipliers (features) applied to ciphertexts as exponents."""

LOSS_BITS = VALUE_BITS + DATA_BITS
"""Fractional bits of a value times a multiplier: ``Xᵀr``, ``Σz²``, cross terms and the
loss (docs/protocol.md §6.8). The one definition every party and the kit read."""

LOSS_FACTOR = 8
"""The Host sends a batch's loss as ``[[LOSS_FACTOR·b·L]]``: the 8 clears the Taylor ⅛."""


def loss_denominator(rows: int) -> int:
    """The denominator of a batch of ``rows`` rows' loss: ``8·b``."""
    return LOSS_FACTOR * rows


_EXPONENT_LIMIT = 2**62
"""Exponents must fit int64 with headroom, so that a sum of two never wraps silently."""


def _scaled(values: npt.ArrayLike, bits: int) -> npt.NDArray[np.float64]:
    """Return ``rint(values * 2**bits)`` as floats, raising CryptoError on non-finite input."""
    if bits < 0:
        raise ValueError(f"bits must be >= 0, got {bits}")
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise CryptoError(
            "cannot encode NaN or infinity; check the data and the model for divergence"
        )
    # ldexp scales by a power of two exactly; overflow to inf is reported below, not warned.
    with np.errstate(over="ignore"):
        scaled = np.rint(np.ldexp(arr, bits))
    if not np.all(np.isfinite(scaled)):
        raise CryptoError(
            f"a value is too large for {bits} fractional bits; standardise the features"
        )
    return scaled


def encode(values: npt.NDArray[np.floating] | Sequence[float], bits: int, n: int) -> list[int]:
    """Encode a 1-D vector of reals as residues mod ``n`` with ``bits`` fractional bits.

    Each value becomes ``round(v * 2**bits)`` (ties to even, like ``np.rint``) as an exact
    Python int; negatives are represented as ``n - |v|``. Values must satisfy
    ``|encoded| < n // 3`` so that sums stay decodable (see :func:`decode_signed`).
    """
    scaled = _scaled(values, bits)
    if scaled.ndim != 1:
        raise ValueError(f"encode expects a 1-D vector, got shape {scaled.shape}")
    limit = n // 3
    out: list[int] = []
    for value in scaled.tolist():
        encoded = int(value)  # float -> int is exact; rint already rounded
        if abs(encoded) >= limit:
            raise CryptoError(
                f"value {value / 2**bits:g} does not fit the fixed-point range of a "
                f"{n.bit_length()}-bit key; standardise features or use a larger key"
            )
        out.append(encoded % n)
    return out


def decode_signed(v: int, n: int) -> int:
    """Return the signed integer represented by residue ``v`` mod ``n``.

    ``[0, n//3]`` is positive and ``[n - n//3, n)`` negative; the middle third can only
    be reached by an overflow (or a bad key), so it raises CryptoError instead of
    silently wrapping.
    """
    if not 0 <= v < n:
        raise CryptoError(f"residue outside [0, n) for a {n.bit_length()}-bit key")
    third = n // 3
    if v <= third:
        return v
    if v >= n - third:
        return v - n
    raise CryptoError(
        "overflow in encrypted fixed-point arithmetic: the result left the range "
        "|x| < n/3; standardise features, lower the learning rate or use a larger key"
    )


def decode(ints: Sequence[int], bits: int, n: int) -> npt.NDArray[np.float64]:
    """Decode residues mod ``n`` with ``bits`` fractional bits back to float64.

    Python's int/int true division is correctly rounded even for very large ints, so
    the only loss is the final rounding to float64.
    """
    scale = 2**bits
    try:
        return np.array([decode_signed(int(v), n) / scale for v in ints], dtype=np.float64)
    except OverflowError as exc:
        raise CryptoError(
            "a decrypted value exceeds the float64 range; the computation overflowed"
        ) from exc


def to_exponents(x: npt.ArrayLike, bits: int) -> npt.NDArray[np.int64]:
    """Scale a real array to signed int64 exponents ``rint(x * 2**bits)`` (not reduced mod n).

    These multiply ciphertexts (``c ** k``), so the encrypted result carries the product
    of both scales, e.g. ``2**(VALUE_BITS + DATA_BITS)``.
    """
    scaled = _scaled(x, bits)
    if scaled.size and float(np.max(np.abs(scaled))) >= _EXPONENT_LIMIT:
        raise CryptoError(
            f"a multiplier is too large for {bits} fractional bits (|x * 2**{bits}| must "
            "stay below 2**62); standardise the features"
        )
    return scaled.astype(np.int64)
