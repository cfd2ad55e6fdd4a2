"""docs/security.md holds a privacy row for every message kind of the protocol."""

from __future__ import annotations

import re
from pathlib import Path

from privfl.protocol.messages import Kind

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def rows() -> dict[str, list[str]]:
    """Table rows of docs/security.md keyed by the backticked kind in their first cell."""
    found: dict[str, list[str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\|\s*`([a-z_]+)`\s*\|", line)
        if match:
            found[match.group(1)] = [cell.strip() for cell in line.strip("|").split("|")]
    return found


def test_every_message_kind_has_a_row() -> None:
    missing = sorted(kind.value for kind in Kind if kind.value not in rows())
    assert not missing, f"docs/security.md lacks a row for: {', '.join(missing)}"


def test_every_row_says_who_receives_what_and_why() -> None:
    for kind, cells in rows().items():
        assert len(cells) >= 4, f"the row for {kind} needs sender → receiver, what, why"
        assert "→" in cells[1], f"the row for {kind} names no sender → receiver"
        assert all(len(cell) > 10 for cell in cells[2:4]), f"the row for {kind} is too thin"


def test_rows_name_only_real_kinds() -> None:
    known = {kind.value for kind in Kind}
    stale = sorted(set(rows()) - known)
    assert not stale, f"docs/security.md describes kinds the protocol lacks: {stale}"
