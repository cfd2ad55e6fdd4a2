"""The conformance kit's SecureBoost scripts against our own Host and guest, and broken ones.

Real processes over CURVE ZeroMQ: ``privfl conformance`` plays the Server and the Host
(guest under test) or the Server and every guest (Host under test); the party runs
with its ordinary command, started by the kit (``-- COMMAND``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_scripted_peer import check, cli, make_kit

# One worker makes the kits for every test here (--dist loadgroup, tests/conftest.py).
pytestmark = pytest.mark.xdist_group("boost_conformance")

BROKEN = [sys.executable, str(Path(__file__).with_name("broken_guest.py"))]


def boost_kit(folder: Path, *extra: str) -> Path:
    """A demo SecureBoost kit: two guests, 512-bit keys, two trees of depth 3, shared
    instance space (the kit's sessions script the shared mode's messages)."""
    job = make_kit(folder, "--model", "secureboost", "--instance-space", "shared", *extra)
    text = job.read_text()
    assert "trees = 10" in text
    job.write_text(text.replace("trees = 10", "trees = 2"))
    return job


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return boost_kit(tmp_path_factory.mktemp("boost-kit"))


def run_kit(kit: Path, out: Path, role: str, ending: str, party_cmd: list[str]) -> str:
    party = "host" if role == "host" else "guest-1"
    result = check(kit, out, role, party, ending, party_cmd)
    assert "Traceback" not in result.stdout + result.stderr
    return result.stdout if result.returncode == 0 else f"exit {result.returncode}\n{result.stdout}"


@pytest.mark.parametrize(
    ("role", "ending", "last"),
    [
        ("guest", "finish", "PASS  guest-1 exits 0 after finish"),
        ("guest", "unknown-node", "PASS  a node no partition defined makes it Abort"),
        ("guest", "repeated-node", "PASS  the root named again makes it Abort"),
        # floor = max(4, ⌈4·min_child_weight⌉): 16 at SecureBoost's default of 4
        ("guest", "small-node", "PASS  a partition leaving a child below the row floor (16)"),
        ("guest", "foreign-rows", "PASS  the next tree's gradients over rows not the seed's"),
        ("guest", "forged-proof", "PASS  a Host proof over other plaintexts than the gradients"),
        ("host", "finish", "PASS  host exits 0 after finish"),
        ("host", "violation", "PASS  a histogram with one ciphertext too many makes it Abort"),
    ],
)
def test_our_secureboost_party_conforms(
    kit: Path, tmp_path: Path, role: str, ending: str, last: str
) -> None:
    # Act
    stdout = run_kit(kit, tmp_path / role, role, ending, cli("vfl"))

    # Assert
    assert "FAIL" not in stdout and "checks passed" in stdout, stdout
    assert last in stdout
    if ending != "finish":
        assert "exits non-zero after the violation" in stdout
    elif role == "guest":
        assert "PASS  level 1: every column's bins add up to the node's Σg, Σh" in stdout
        assert "PASS  node 2's left rows are the histogram's bins ≤ the split bin" in stdout
        assert "PASS  training decisions are the partitions the guest sent" in stdout
        assert "PASS  level 0: the histogram's columns are tree 0's column sample" in stdout
        assert "NOTE  colsample = 1 gives the guest every column" in stdout
    else:
        assert "PASS  boost_gradients: no ciphertext repeats" in stdout


@pytest.fixture(scope="module")
def hidden_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return boost_kit(tmp_path_factory.mktemp("hidden-kit"), "--instance-space", "hidden")


@pytest.mark.parametrize(
    ("ending", "last"),
    [
        ("finish", "PASS  guest-1 exits 0 after finish"),
        ("unknown-node", "PASS  a node not of the level named makes it Abort"),
        ("repeated-node", "PASS  the root named again makes it Abort"),
        ("small-node", "PASS  a boost_partition in the hidden instance space makes it Abort"),
        ("foreign-rows", "PASS  the next tree's gradients over rows not the seed's"),
    ],
)
def test_our_secureboost_guest_conforms_on_a_hidden_job(
    hidden_kit: Path, tmp_path: Path, ending: str, last: str
) -> None:
    # Act
    stdout = run_kit(hidden_kit, tmp_path / "guest", "guest", ending, cli("vfl"))

    # Assert: the hidden mode's session, as docs/protocol.md §6.9 has it
    assert "FAIL" not in stdout and "checks passed" in stdout, stdout
    assert last in stdout
    assert "PASS  level 0: boost_masked [0] is answered with a boost_histogram" in stdout
    if ending == "finish":
        assert (
            "PASS  level 1: the histogram names the tree, level and nodes asked for [1]" in stdout
        )
        assert "PASS  boost_candidates has the key and shape §6.9 gives" in stdout
        assert "PASS  boost_reveal of node 0 is answered with boost_revealed" in stdout
        assert "PASS  node 2's left rows are the histogram's bins ≤ the split bin" in stdout
        assert "boost_split" not in stdout and "boost_decide" not in stdout
    else:
        assert "exits non-zero after the violation" in stdout


def test_our_secureboost_guest_conforms_with_djn(tmp_path: Path) -> None:
    djn = boost_kit(tmp_path / "kit", "--obfuscation", "djn")

    stdout = run_kit(djn, tmp_path / "g", "guest", "finish", cli("vfl"))

    held = "PASS  what goes back to the key holder is re-randomised with a full-length r^n"
    assert "FAIL" not in stdout and held in stdout, stdout


@pytest.mark.parametrize(
    ("role", "bug", "ending", "caught_by"),
    [
        ("guest", "no-rerandomise", "finish", "FAIL  every ciphertext has a non-trivial"),
        ("guest", "no-row-floor", "small-node", "FAIL  a partition leaving a child below"),
        ("guest", "any-row-sample", "foreign-rows", "FAIL  the next tree's gradients over rows"),
        ("guest", "extra-histogram", "finish", "FAIL  level 0: the histogram is packed"),
        ("guest", "split-off-by-one", "finish", "FAIL  node 0's left rows are the histogram's"),
        ("host", "reused-noise", "finish", "FAIL  boost_gradients: no ciphertext repeats"),
    ],
)
def test_the_kit_catches_a_broken_secureboost_party(
    kit: Path, tmp_path: Path, role: str, bug: str, ending: str, caught_by: str
) -> None:
    # Act
    stdout = run_kit(kit, tmp_path / role, role, ending, [*BROKEN, bug, "vfl"])

    # Assert
    assert stdout.startswith("exit 1"), stdout
    assert caught_by in stdout, stdout
    if ending != "finish":  # it accepted the violation: its exit is not waited for
        assert "FAIL  guest-1 exits non-zero after the violation: still running" in stdout
        # told by its answer to the next step (the probe), not by a window running out
        assert "with boost_histogram: it accepted the violation" in stdout, stdout


def test_a_secureboost_ending_needs_a_secureboost_guest(kit: Path, tmp_path: Path) -> None:
    result = check(kit, tmp_path / "h", "host", "host", "small-node", cli("vfl"))

    assert result.returncode == 1
    assert "ending 'small-node' needs a SecureBoost guest" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def colsample_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo kit with colsample 0.66: guest-1's 10 columns give K = 7 (floor: 6).

    The instance space is set, not left to the default: the column checks are the same in
    both modes, and this kit is the shared mode's.
    """
    folder = tmp_path_factory.mktemp("colsample-kit")
    return boost_kit(folder, "--colsample", "0.66", "--instance-space", "shared")


# docs/protocol.md §6.9's worked example: seed 0, tree 0, guest-1 (group 1), F = 10.
SAMPLE = "level 0: the histogram's columns are tree 0's column sample [0, 2, 3, 4, 5, 6, 8]"


def test_our_secureboost_guest_draws_the_column_sample_of_section_6_9(
    colsample_kit: Path, tmp_path: Path
) -> None:
    stdout = run_kit(colsample_kit, tmp_path / "g", "guest", "finish", cli("vfl"))

    assert "FAIL" not in stdout and "checks passed" in stdout, stdout
    assert f"PASS  {SAMPLE}" in stdout
    assert "PASS  level 0: the histogram holds K = max(1, round(colsample·F)) = 7" in stdout
    assert "PASS  level 1: the histogram's columns are tree 0's column sample" in stdout


@pytest.mark.parametrize(
    ("bug", "caught_by", "named"),
    [
        ("first-columns", f"FAIL  {SAMPLE}", "holds columns [0, 1, 2, 3, 4, 5, 6] — the first K"),
        ("floor-count", "FAIL  level 0: the histogram holds K = max(1, round", "the floor"),
        ("group-entropy", f"FAIL  {SAMPLE}", "— entropy [seed, tree, group] (not 1 + group)"),
    ],
)
def test_the_kit_names_a_wrong_column_sample(
    colsample_kit: Path, tmp_path: Path, bug: str, caught_by: str, named: str
) -> None:
    # Act
    stdout = run_kit(colsample_kit, tmp_path / "g", "guest", "finish", [*BROKEN, bug, "vfl"])

    # Assert
    assert stdout.startswith("exit 1"), stdout
    assert caught_by in stdout and named in stdout, stdout


@pytest.fixture(scope="module")
def checked_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    job = boost_kit(tmp_path_factory.mktemp("boost-check-kit"))
    text = job.read_text()
    assert "[model]" in text and "subsample = 1.0" in text and "trees = 2" in text
    # a tenth of the rows per tree keeps the 512-bit proofs to about a second; one tree
    # (the kit's guest session plays one; the Host's proofs are each tree's alike)
    text = text.replace("subsample = 1.0", "subsample = 0.1", 1).replace("trees = 2", "trees = 1")
    job.write_text(text.replace("[model]", "[model]\nhost_check = true", 1))
    return job


@pytest.mark.parametrize(
    ("role", "ending", "last"),
    [
        ("guest", "finish", "PASS  guest-1 exits 0 after finish"),
        ("guest", "forged-proof", "PASS  a Host proof over other plaintexts than the gradients"),
        ("host", "finish", "PASS  host exits 0 after finish"),
    ],
)
def test_our_secureboost_party_conforms_with_the_host_check(
    checked_kit: Path, tmp_path: Path, role: str, ending: str, last: str
) -> None:
    # Act
    stdout = run_kit(checked_kit, tmp_path / role, role, ending, cli("vfl"))

    # Assert
    assert "FAIL" not in stdout and "checks passed" in stdout, stdout
    assert last in stdout
