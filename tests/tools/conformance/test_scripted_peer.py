"""The conformance kit against our own parties: real processes, real CURVE sockets.

``privfl conformance`` plays every other party; the party under test runs with
its ordinary command. Valid transitions must be answered correctly, invalid
messages refused without effect, and a fatal violation must end in an Abort.
"""

from __future__ import annotations

import subprocess
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from privfl.cli import main
from privfl.config.vertical import load_job
from privfl.errors import ConfigError
from privfl.models.registry import KINDS
from privfl.parties.vertical.runner import open_transport
from privfl.tools.conformance.peer import Bystanders
from privfl.tools.conformance.runner import ROLES, script_for

# One worker makes the kits for every test here (--dist loadgroup, tests/conftest.py).
pytestmark = pytest.mark.xdist_group("scripted_peer")

WEAK = ["--key-bits", "512", "--allow-weak-keys"]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "privfl", *args]


def init(folder: Path, *options: str) -> Path:
    """``privfl init vfl`` with 512-bit keys, in this process (no interpreter to start); the
    kit's job file."""
    made = CliRunner().invoke(main, ["init", "vfl", "--out", str(folder), *WEAK, *options])
    assert made.exit_code == 0, made.output
    return folder / "job.toml"


def make_kit(folder: Path, *extra: str) -> Path:
    """A demo kit with two guests, 512-bit keys, 3 epochs, mini-batches and a flipback.

    Three batches of 150 rows per epoch (426 training rows, more than any party's
    features) and ``flipback_every = 2`` make the host send every kind of packed
    decryption request: per-batch gradients, test scores and flipback's training scores.
    Two guests: the guest script checks the cross term against ``others``.
    """
    job = init(folder, "--epochs", "3", "--timeout", "20", "--guests", "2", *extra)
    text = job.read_text()
    if "secureboost" in extra:  # trees' kits carry no [training] table
        return job
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


def check(
    kit: Path, out: Path, role: str, party: str, ending: str, party_cmd: list[str]
) -> subprocess.CompletedProcess[str]:
    """``privfl conformance`` starting the party under test itself (after ``--``).

    The kit runs in this process (its imports are a second of CPU per session); the
    party under test is a real process, its console kept in a file beside ``out`` and
    returned after the kit's stderr. A Host runs with ``--no-plots``: no check reads its
    PNGs, and drawing them is most of what it does after ``finish`` (the kit waits for
    its exit)."""
    args = ["--role", role, "--job", str(kit), "--party", party, "--ending", ending]
    command = [*party_cmd, role, "--job", str(kit), "--party", party, "--out", str(out)]
    command += ["--no-plots"] if role == "host" else []
    return run_kit(args, [*command, "--workers", "1"], out.with_name(f"{out.name}.console"))


def run_kit(args: list[str], command: list[str], console: Path) -> subprocess.CompletedProcess[str]:
    """``privfl conformance ARGS -- COMMAND`` in this process; the party's console (a real
    process) in ``console``, returned after the kit's stderr."""
    console.parent.mkdir(parents=True, exist_ok=True)
    # exec: the kit's process handle is the party's own (its exit status, its kill)
    party_run = ["sh", "-c", 'exec "$@" >"$0" 2>&1', str(console), *command]
    result = CliRunner().invoke(main, ["conformance", *args, "--", *party_run])
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    assert not crashed, "".join(traceback.format_exception(result.exception))
    said = console.read_text() if console.exists() else ""
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr + said)


def conforms(kit: Path, tmp_path: Path, role: str, party: str, ending: str) -> str:
    """Run the scripted peer against our party; both must end as ``ending`` says.

    Returns the kit's report (its stdout)."""
    out = tmp_path / party
    checker = check(kit, out, role, party, ending, cli("vfl"))
    output = checker.stdout + checker.stderr

    assert checker.returncode == 0, output
    assert "FAIL" not in checker.stdout and "checks passed" in checker.stdout
    assert "refused a message" in (out / "party.log").read_text()  # the invalid ones, logged
    if ending == "finish":
        assert f"PASS  {party} exits 0 after finish" in checker.stdout
        assert f"PASS  {party} sends no Abort after finish" in checker.stdout
        assert role == "server" or (out / "model.json").exists()
        assert not (out / "training.png").exists()  # --no-plots (the Host's; no other draws)
    else:
        assert f"PASS  {party} exits non-zero after the violation" in checker.stdout
        assert "privfl: error:" in output and "Traceback" not in output
    return checker.stdout


def test_conformance_refuses_a_role_mismatch(kit: Path) -> None:
    # privfl's own entry point, in this process (an interpreter's start saved)
    args = ["conformance", "--role", "guest", "--job", str(kit), "--party", "server"]
    result = CliRunner().invoke(main, args)

    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)  # no crash
    assert "server is a server, not a guest" in result.stderr and "Traceback" not in result.stderr


def test_our_guest_conforms_in_a_one_guest_job(tmp_path: Path) -> None:
    # Prepare: one guest, so the Residual carries no others and no cross term comes back.
    one_guest = make_kit(tmp_path / "kit", "--guests", "1")

    # Act / assert: every check passes, and the cross-term check is not among them.
    stdout = conforms(one_guest, tmp_path, "guest", "guest-1", "finish")
    assert "cross_term" not in stdout and "FAIL" not in stdout
    assert "PASS  epoch 1: forward scores are X[batch.indices]·θ₁" in stdout


def test_a_role_its_kind_has_no_script_for_is_refused_in_one_line() -> None:
    # Prepare: every registered kind has every role's scripts in both sessions
    # (models/registry.py); a kind registered with its guest's training script only.
    boost = KINDS["secureboost"]
    kind = replace(boost, conformance={"guest": boost.conformance["guest"]})

    # Act / assert: one line naming the roles it has, per session
    with pytest.raises(ConfigError, match=r"^no conformance script for a secureboost server "
                       r"\(it has: guest\)$"):  # fmt: skip
        script_for(kind, "server")
    with pytest.raises(ConfigError, match=r"guest in a predict session \(it has: none\)$"):
        script_for(kind, "guest", "predict")
    assert set(boost.conformance) == {
        *ROLES, *(f"predict:{role}" for role in ROLES)
    }  # fmt: skip


def test_a_guests_fellow_guests_acknowledge_what_it_tells_them(tmp_path: Path) -> None:
    # Prepare: the kit plays a guest's Server and Host; guest-2 only stands by.
    job = load_job(init(tmp_path / "kit", "--guests", "2"))
    guest = open_transport(job, "guest-1")

    # Act: what a guest tells a fellow guest (a progress report, its Abort)
    with Bystanders(job, ["guest-2"]):
        guest.send("guest-2", [b"progress"])
        deadline = time.monotonic() + 60  # an ACK comes in milliseconds; a loaded machine
        while guest.unacked() and time.monotonic() < deadline:
            guest.recv(0.05)

    # Assert: ACKed, so the guest need not wait for it before it exits
    assert guest.unacked() == 0
    guest.close()
