"""The conformance kit against our own parties: real processes, real CURVE sockets.

``privfl conformance`` plays every other party; the party under test runs with
its ordinary command. Valid transitions must be answered correctly, invalid
messages refused without effect, and a fatal violation must end in an Abort.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

WEAK = ["--key-bits", "512", "--allow-weak-keys"]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "privfl", *args]


def make_kit(folder: Path, *extra: str) -> Path:
    """A demo kit with 512-bit keys, 3 epochs, mini-batches and a flipback after epoch 2.

    Three batches of 150 rows per epoch (426 training rows, more than any party's
    features) and ``flipback_every = 2`` make the host send every kind of packed
    decryption request: per-batch gradients, test scores and flipback's training scores.
    """
    made = subprocess.run(
        cli("init", "vfl", "--out", str(folder), *WEAK, "--epochs", "3", "--timeout", "10", *extra),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    job = folder / "job.toml"
    text = job.read_text()
    for old, new in (
        ("batch_size = 0", "batch_size = 150"),
        ("flipback_every = 5", "flipback_every = 2"),
    ):
        assert old in text
        text = text.replace(old, new)
    job.write_text(text)
    return job


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_kit(tmp_path_factory.mktemp("kit"))


@pytest.fixture(scope="module")
def djn_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same kit with DJN obfuscation: the public key carries h_s."""
    return make_kit(tmp_path_factory.mktemp("djn-kit"), "--obfuscation", "djn")


@pytest.mark.parametrize(
    ("role", "party", "ending"),
    [
        ("guest", "guest-1", "finish"),
        ("guest", "guest-1", "violation"),
        ("server", "server", "finish"),
        ("server", "server", "violation"),
        ("host", "host", "finish"),
        ("host", "host", "violation"),
    ],
)
def test_our_party_conforms(kit: Path, tmp_path: Path, role: str, party: str, ending: str) -> None:
    conforms(kit, tmp_path, role, party, ending)


@pytest.mark.parametrize(
    ("role", "party"), [("guest", "guest-1"), ("server", "server"), ("host", "host")]
)
def test_our_party_conforms_with_djn(djn_kit: Path, tmp_path: Path, role: str, party: str) -> None:
    conforms(djn_kit, tmp_path, role, party, "finish")


def conforms(kit: Path, tmp_path: Path, role: str, party: str, ending: str) -> None:
    """Run the party under test and the scripted peer; both must end as ``ending`` says."""
    out = tmp_path / party
    log = (tmp_path / "party.log").open("wb")
    under_test = subprocess.Popen(
        cli("vfl", role, "--job", str(kit), "--party", party, "--out", str(out), "--workers", "1"),
        stdout=log,
        stderr=log,
    )
    args = ["--role", role, "--job", str(kit), "--party", party, "--ending", ending]
    try:
        checker = subprocess.run(
            cli("conformance", *args),
            capture_output=True,
            text=True,
            timeout=120,
        )
        code = under_test.wait(timeout=30)
    finally:
        if under_test.poll() is None:
            under_test.kill()
            under_test.wait()
        log.close()
    party_log = (tmp_path / "party.log").read_text()

    assert checker.returncode == 0, checker.stdout + checker.stderr + party_log
    assert "FAIL" not in checker.stdout and "checks passed" in checker.stdout
    assert "refused a message" in (out / "party.log").read_text()  # the invalid ones, logged
    if ending == "finish":
        assert code == 0, party_log
        assert role == "server" or (out / "model.json").exists()
    else:
        assert code != 0 and "privfl: error:" in party_log and "Traceback" not in party_log


def test_conformance_refuses_a_role_mismatch(kit: Path) -> None:
    result = subprocess.run(
        cli("conformance", "--role", "guest", "--job", str(kit), "--party", "server"),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1
    assert "server is a server, not a guest" in result.stderr and "Traceback" not in result.stderr
