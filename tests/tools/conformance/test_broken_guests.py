"""Each blind spot the conformance kit once had, as a broken guest the kit must fail.

``broken_guest.py`` runs privfl's own guest with one deliberate bug patched in; the
kit starts it (``privfl conformance ... -- COMMAND``) and must exit 1 with the check
that names the bug marked FAIL (and, for the honest guest, pass: test_scripted_peer.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_scripted_peer import check, make_kit

# One worker makes the kits for every test here (--dist loadgroup, tests/conftest.py).
pytestmark = pytest.mark.xdist_group("broken_guests")

BROKEN = [sys.executable, str(Path(__file__).with_name("broken_guest.py"))]


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_kit(tmp_path_factory.mktemp("broken-kit"))


@pytest.fixture(scope="module")
def djn_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_kit(tmp_path_factory.mktemp("broken-djn-kit"), "--obfuscation", "djn")


def fails(kit: Path, tmp_path: Path, bug: str) -> str:
    """Run the kit against the guest with ``bug``; return its output after checking it failed."""
    result = check(kit, tmp_path / "g", "guest", "guest-1", "finish", [*BROKEN, bug, "vfl"])
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in result.stdout
    return result.stdout


@pytest.fixture(scope="module")
def abort_after_finish(kit: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """One session of the guest that aborts and exits 1 after finish: two checks fail."""
    return fails(kit, tmp_path_factory.mktemp("abort-after-finish"), "abort-after-finish")


@pytest.mark.parametrize(
    ("bug", "caught_by"),
    [
        ("sum-squares-scale", "FAIL  epoch 1: forward.sum_squares is Σz² at scale 2^48"),
        ("no-acks", "FAIL  guest-1 acknowledges every message it receives"),
        ("cross-term-of-residual", "FAIL  epoch 1: cross_term is Σ z·others at scale 2^48"),
        ("reused-noise", "FAIL  no obfuscator is used twice"),
        ("no-rerandomise", "FAIL  every ciphertext has a non-trivial obfuscator"),
    ],
)
def test_the_kit_catches_a_broken_guest(
    kit: Path, tmp_path: Path, bug: str, caught_by: str
) -> None:
    # Act
    stdout = fails(kit, tmp_path, bug)

    # Assert
    assert caught_by in stdout, stdout


def test_the_kit_catches_an_abort_after_finish(abort_after_finish: str) -> None:
    assert "FAIL  guest-1 sends no Abort after finish" in abort_after_finish, abort_after_finish


def test_the_kit_catches_an_exit_status_of_1_after_finish(abort_after_finish: str) -> None:
    assert "FAIL  guest-1 exits 0 after finish: exit status 1" in abort_after_finish


def test_the_kit_catches_standard_obfuscators_in_a_djn_session(
    djn_kit: Path, tmp_path: Path
) -> None:
    # Act
    stdout = fails(djn_kit, tmp_path, "standard-in-djn")

    # Assert
    assert "FAIL  every obfuscator is h_s^a (the session's djn mode)" in stdout, stdout
