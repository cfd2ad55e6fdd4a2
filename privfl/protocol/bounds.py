"""Range checks every message runs in ``__post_init__``: what a peer may put in a field.

The codec checks types; these bounds keep a well-typed but absurd value (a batch
number of 10⁹, a loss denominator of 0, a 10⁶-bit scale) from ever reaching
protocol code, so such a message is a ProtocolError at decoding, never a crash or a
giant allocation later.
"""

from __future__ import annotations

from privfl.errors import ProtocolError

MAX_COUNT = 2**32
"""Rows, features, epochs, batches, ids: generous, yet far below int64 and any memory."""

MAX_KEY_BITS = 16384
"""Paillier and RSA moduli (and exponents) the protocol accepts at all."""

MAX_SCALE_BITS = 256
"""Fixed-point scales: the protocol uses 32, 48 and 80 bits."""

MAX_TEXT = 4096
"""Characters of free text (reasons, fingerprints) a message may carry."""


def require(condition: bool, what: str) -> None:
    """Raise ProtocolError(``what``) unless ``condition`` holds."""
    if not condition:
        raise ProtocolError(what)


def count(value: int, what: str, low: int = 0, high: int = MAX_COUNT) -> None:
    """``low <= value <= high`` for an integer field (the message names the field)."""
    require(low <= value <= high, f"{what} must lie in [{low}, {high}]")


def text(value: str, what: str, limit: int = MAX_TEXT) -> None:
    """A free-text field of at most ``limit`` characters."""
    require(len(value) <= limit, f"{what} is longer than {limit} characters")
