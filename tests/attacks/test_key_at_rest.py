"""The Server's Paillier private key never reaches the disk: not during a run, not after a
failure, not with resume, not after SIGKILL.

The attacker is whoever later reads the Server's output folder (a backup, a stolen
disk) and holds the Host's ciphertexts. The tests capture the key the real Server
generates and search every file it wrote for its primes, in decimal, hex and bytes.
A resumed session runs under a fresh key (that it still ends with the model of the
uninterrupted run is tests/parties/test_resume.py's claim, for the same failures).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import time
from pathlib import Path

import pytest
from helpers import Crash, memory_job, read_model, run_resumable
from processes import spawn

from privfl.crypto.paillier import PrivateKey, PublicKey, private_primes
from privfl.parties import checkpoint
from privfl.parties.vertical import server as server_module
from privfl.protocol.liveness import DEFAULT_GRACE_SECONDS
from privfl.protocol.memory import InMemoryHub, InMemoryTransport

# The Host's flips seeded (not private), as in tests/parties/test_resume.py; a resumed
# Host reloads its flipped labels anyway.
LABEL_SEED = 7


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> list[PrivateKey]:
    """Every private key the Server generates, as the test's own record."""
    made: list[PrivateKey] = []
    real = server_module.generate_keypair

    def spy(bits: int, obfuscation: str = "standard") -> tuple[PublicKey, PrivateKey]:
        public, private = real(bits, obfuscation)
        made.append(private)
        return public, private

    monkeypatch.setattr(server_module, "generate_keypair", spy)
    return made


class ClosingHub(InMemoryHub):
    """A hub on which a party whose transport closed is lost to the others after the
    liveness grace, as a crashed process's closed connections are over ZeroMQ: the
    parties left behind by the injected failure stop within seconds, not after the job's
    timeout of silence."""

    def __init__(self) -> None:
        super().__init__(record=False)
        self.closed_at: dict[str, float] = {}

    def transport(self, name: str) -> InMemoryTransport:
        return WatchingTransport(self, name, super().transport(name))

    def _detach(self, name: str, inbox: queue.Queue[tuple[str, list[bytes]]]) -> None:
        super()._detach(name, inbox)
        self.closed_at.setdefault(name, time.monotonic())


class WatchingTransport(InMemoryTransport):
    """An in-memory transport with the ZeroMQ one's ``lost_peers``."""

    def __init__(self, hub: ClosingHub, name: str, inner: InMemoryTransport) -> None:
        super().__init__(hub, name, inner._inbox)
        self._closing = hub

    def lost_peers(self) -> dict[str, float]:
        """Peers whose transport closed at least the grace ago, and for how long."""
        now = time.monotonic()
        gone = self._closing.closed_at.items()
        return {p: now - t for p, t in gone if p != self.name and now - t >= DEFAULT_GRACE_SECONDS}


def leaked(folder: Path, key: PrivateKey) -> list[str]:
    """Files under ``folder`` that hold a prime of ``key`` in any common encoding."""
    needles = []
    for prime in private_primes(key):
        size = (prime.bit_length() + 7) // 8
        needles += [str(prime).encode(), f"{prime:x}".encode(), prime.to_bytes(size, "big")]
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [str(path) for needle in needles if needle in data]
    return found


def test_no_key_on_disk_after_a_run(tmp_path: Path, keys: list[PrivateKey]) -> None:
    job = memory_job(epochs=2, epsilon=2.0, flipback_every=1)

    results = run_resumable(job, tmp_path, label_seed=LABEL_SEED)

    assert not [r for r in results.values() if isinstance(r, BaseException)], results
    assert len(keys) == 1
    assert leaked(tmp_path, keys[0]) == []
    assert not list(tmp_path.rglob("paillier*"))


@pytest.mark.parametrize(("victim", "after"), [("host", 30), ("server", 12)])
def test_no_key_on_disk_after_a_failure_and_a_resume(
    tmp_path: Path,
    keys: list[PrivateKey],
    victim: str,
    after: int,
) -> None:
    job = memory_job(epochs=4, epsilon=2.0, flipback_every=2, batch_size=150, tolerance=0.0)

    crashed = run_resumable(
        job, tmp_path / "run", die=(victim, after), label_seed=LABEL_SEED, hub=ClosingHub()
    )
    assert isinstance(crashed[victim], Crash), crashed
    assert list((tmp_path / "run" / "server" / checkpoint.FOLDER).glob("epoch-*")), "no checkpoint"
    assert leaked(tmp_path / "run", keys[0]) == []  # mid-run state, left by the failure

    resumed = run_resumable(job, tmp_path / "run", resume=True, label_seed=LABEL_SEED)

    assert not [r for r in resumed.values() if isinstance(r, BaseException)], resumed
    assert len(keys) == 2 and keys[1].public_key.n != keys[0].public_key.n  # a fresh key
    assert all(leaked(tmp_path, key) == [] for key in keys)
    assert all(read_model(tmp_path / "run", name)["weights"] for name in job.guests)  # it ended


def test_a_key_file_left_by_an_older_version_is_removed(
    tmp_path: Path, keys: list[PrivateKey]
) -> None:
    job = memory_job(epochs=1)
    legacy = tmp_path / "server" / checkpoint.FOLDER / checkpoint.LEGACY_KEY_FILE
    legacy.parent.mkdir(parents=True)
    legacy.write_text('{"n": "15", "p": "3", "q": "5"}')

    results = run_resumable(job, tmp_path, label_seed=LABEL_SEED)

    assert not [r for r in results.values() if isinstance(r, BaseException)], results
    assert not legacy.exists()


@pytest.mark.slow
def test_a_sigkilled_server_leaves_no_key_material(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    made = spawn(
        "init",
        "vfl",
        "--out",
        str(kit),
        "--key-bits",
        "512",
        "--allow-weak-keys",
        "--epochs",
        "30",
        "--timeout",
        "60",  # the parties start together on a machine that may be busy
        log=tmp_path / "init.log",
    )
    assert made.wait(timeout=60) == 0
    job = str(kit / "job.toml")
    parties = {
        name: spawn(
            "vfl",
            role,
            "--job",
            job,
            "--party",
            name,
            "--out",
            str(tmp_path / name),
            "--no-progress",
            "--resume",
            log=tmp_path / f"{name}.log",
        )
        for role, name in (("server", "server"), ("host", "host"), ("guest", "guest-1"))
    }
    metrics = tmp_path / "host" / "metrics.jsonl"
    deadline = time.monotonic() + 90
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert time.monotonic() < deadline, (tmp_path / "host.log").read_text()
        time.sleep(0.05)

    os.kill(parties["server"].pid, signal.SIGKILL)
    parties["server"].wait(timeout=10)

    # A 512-bit key's primes have 77 decimal digits, as JSON would hold them: none anywhere
    # (the audit chain's first `prev`, 64 zeros, is not a number anyone could use).
    long_number = re.compile(rb"[0-9]{60,}")
    for path in (tmp_path / "server").rglob("*"):
        if path.is_file():
            numbers = [n for n in long_number.findall(path.read_bytes()) if n.strip(b"0")]
            assert not numbers, path
    assert list((tmp_path / "server" / checkpoint.FOLDER).glob("epoch-*"))
