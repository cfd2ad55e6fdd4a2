"""The wire's vector of big integers (ciphertexts, residues), shared by every message module."""

from __future__ import annotations

from dataclasses import dataclass

from privfl.errors import ProtocolError


@dataclass(frozen=True, slots=True)
class BigInts:
    """A vector of non-negative big integers (ciphertexts, or residues mod n) sent fixed-width."""

    values: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.values and min(self.values) < 0:
            raise ProtocolError("BigInts holds non-negative integers only")

    def __len__(self) -> int:
        return len(self.values)


EMPTY = BigInts(())
"""The empty vector: the default of a field a sender may leave out (immutable, shared)."""
