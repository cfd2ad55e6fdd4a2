"""A party of another protocol version meets this one: one line naming both versions, fast.

A real Server of a kit is started; a peer holding the Host's own key (so CURVE and the
job's allow-list admit it, as they would an older release of privfl run by the Host's
site) sends its Hello in an envelope of version ``VERSION - 1``. The Server must not
refuse it silently and wait out the job's timeout (300 s here): it ends at once with
one line that names both versions and says what to do (docs/protocol.md §5).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from privfl.config.vertical import load_job
from privfl.protocol import codec
from privfl.protocol.keys import KeyRing
from privfl.protocol.messages import PROTOCOL, VERSION, Header, Hello, Kind
from privfl.protocol.reliable import DATA, link_header, pack_frames
from privfl.protocol.transport import ZmqTransport

WEAK = ["--key-bits", "512", "--allow-weak-keys"]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "privfl", *args]


def up(server: subprocess.Popen[bytes], log: Path) -> None:
    """Wait for the Server's first log line (its key pair made; it binds next)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and server.poll() is None:
        if log.is_file() and "key pair" in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"the Server did not start (exit {server.poll()})")


def test_a_peer_of_the_previous_version_is_refused_in_one_line(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    made = subprocess.run(
        cli("init", "vfl", "--out", str(kit), *WEAK, "--epochs", "2", "--timeout", "300"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    job = load_job(kit / "job.toml")
    log = tmp_path / "server.err"
    with log.open("wb") as handle:
        server = subprocess.Popen(
            cli("vfl", "server", "--job", str(kit / "job.toml"), "--party", "server",
                "--out", str(tmp_path / "server"), "--no-progress"),
            stdout=handle, stderr=handle,
        )  # fmt: skip
    try:
        ring = KeyRing.from_files(
            "host", kit / "keys" / "host.key_secret", {"server": kit / "keys" / "server.key"}
        )
        endpoint = job.party("server").endpoint
        older = Header(PROTOCOL, VERSION - 1, job.session, "host", "server", 0, 1, Kind.HELLO)
        frames = codec.encode(older, Hello("host", "0" * 64, 1, 1))
        up(server, tmp_path / "server" / "party.log")
        peer = ZmqTransport("host", "tcp://127.0.0.1:0", {"server": endpoint}, ring, linger_ms=0)
        with peer:
            peer.send("server", [link_header(DATA, 7, 1, 0, 1), pack_frames(frames)])
            sent = time.monotonic()
            code = server.wait(timeout=240)
            took = time.monotonic() - sent
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()

    err = log.read_text()
    lines = [line for line in err.splitlines() if line.startswith("privfl: error:")]
    assert code == 1 and len(lines) == 1, err[-3000:]
    assert f"v{VERSION - 1}" in lines[0] and f"v{VERSION}" in lines[0], lines[0]
    assert "same protocol version" in lines[0] and "Traceback" not in err
    assert took < 15, took  # from the Hello's send, the Server up and waiting
