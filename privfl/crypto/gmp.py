"""gmpy2's ``mpz`` and ``powmod`` for the crypto modules, with plain-int fallbacks.

The fallbacks keep the package importable without gmpy2; ``paillier.require_gmpy2``
is what reports its absence before any key is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import gmpy2

    mpz: Callable[[int], Any] = gmpy2.mpz
    powmod: Callable[[Any, Any, Any], Any] = gmpy2.powmod
except ImportError:  # pragma: no cover - paillier.require_gmpy2 reports it
    mpz = int
    powmod = pow
