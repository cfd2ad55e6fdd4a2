"""10,000 hostile messages at a live party's port; it stays up and a legitimate run completes.

The Server of a real kit is started alone. A fuzzer then throws at its inbox:
random bytes over raw TCP and plain-text ZeroMQ (refused at the handshake), and,
authenticated with the Host's own key (the worst case: an insider), random link
frames, valid link frames around mutated golden messages, duplicates, stray
ACKs, wrong-session messages and frames over the 1 MiB limit. Then the real
Host and Guest start and the run must finish normally.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq
from fuzzing import CORPUS, mutate

from privfl.config.vertical import load_job
from privfl.protocol import codec
from privfl.protocol.keys import KeyRing
from privfl.protocol.messages import PROTOCOL, VERSION, Header, Hello, Kind
from privfl.protocol.reliable import ACK, DATA, link_header, pack_frames
from privfl.protocol.transport import ZmqTransport

MESSAGES = 10_000
WEAK = ["--key-bits", "512", "--allow-weak-keys"]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "privfl", *args]


def hostile(rng: random.Random, session: str, seq: int) -> list[bytes]:
    """One fuzzed link message (two frames unless it is deliberately malformed)."""
    roll = rng.random()
    if roll < 0.3:  # raw garbage frames
        return [rng.randbytes(rng.randint(0, 64)) for _ in range(rng.randint(1, 4))]
    if roll < 0.4:  # stray or forged ACKs
        return [link_header(ACK, rng.getrandbits(64), rng.randint(1, 2**40)), b""]
    if roll < 0.5:  # forged chunk headers
        header = link_header(DATA, 7, seq, rng.randint(0, 200), rng.randint(0, 200))
        return [header, rng.randbytes(rng.randint(0, 32))]
    if roll < 0.6:  # a well-formed Hello from the "host", but of another session
        head = Header(PROTOCOL, VERSION, "not-" + session, "host", "server", 0, seq, Kind.HELLO)
        frames = codec.encode(head, Hello("host", "0" * 64, 1, 1))
    else:  # mutated golden messages
        frames = mutate(rng, rng.choice(CORPUS))
    return [link_header(DATA, 7, seq, 0, 1), pack_frames(frames)]


def plain_attacks(host: str, port: int, rng: random.Random) -> None:
    """Unauthenticated noise: raw TCP bytes and a plain-text ZeroMQ client."""
    for _ in range(20):
        with socket.create_connection((host, port), timeout=2) as raw:
            raw.sendall(rng.randbytes(rng.randint(1, 4096)))
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    plain = ctx.socket(zmq.DEALER)
    plain.linger = 0
    plain.routing_id = b"host"
    plain.connect(f"tcp://{host}:{port}")
    for _ in range(100):
        plain.send_multipart([b"hi", rng.randbytes(100)], flags=zmq.NOBLOCK)
    time.sleep(0.2)
    plain.close()
    ctx.term()


@pytest.mark.slow
def test_a_fuzzed_server_stays_up_and_still_completes_a_run(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    made = subprocess.run(
        cli("init", "vfl", "--out", str(kit), *WEAK, "--epochs", "2", "--timeout", "90"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    job = load_job(kit / "job.toml")
    runs = tmp_path / "runs"
    logs = {name: (tmp_path / f"{name}.log").open("wb") for name in job.parties}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def options(name: str) -> list[str]:
        return ["--out", str(runs / name), "--no-progress", "--workers", "1", "--no-plots"]

    def start(role: str, name: str) -> None:
        procs[name] = subprocess.Popen(
            cli("vfl", role, "--job", str(kit / "job.toml"), "--party", name, *options(name)),
            stdout=logs[name],
            stderr=logs[name],
        )

    try:
        start("server", "server")
        endpoint = job.party("server").endpoint
        host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
        ring = KeyRing.from_files(
            "host",
            kit / "keys" / "host.key_secret",
            {"server": kit / "keys" / "server.key"},
        )
        rng = random.Random(7)
        fuzzer = ZmqTransport("host", "tcp://127.0.0.1:0", {"server": endpoint}, ring, linger_ms=0)
        with fuzzer:
            for seq in range(1, MESSAGES + 1):
                frames = hostile(rng, job.session, seq)
                if seq % 1000 == 0:
                    frames = [link_header(DATA, 7, seq, 0, 1), b"\0" * (2 * 1024 * 1024)]
                fuzzer.send("server", frames)
            plain_attacks(host, int(port), rng)
            time.sleep(1.0)
        assert procs["server"].poll() is None, (tmp_path / "server.log").read_text()

        start("host", "host")
        for name in job.guests:
            start("guest", name)
        codes = {name: p.wait(timeout=120) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        for handle in logs.values():
            handle.close()

    assert set(codes.values()) == {0}, (tmp_path / "server.log").read_text()[-3000:]
    assert json.loads((runs / "host" / "summary.json").read_text())["epochs"] == 2
    server_log = (runs / "server" / "party.log").read_text()
    assert "refused" in server_log and "Traceback" not in server_log
    # Refusals are rate-limited, not one line each of the 10,000: 80–108 lines in four runs.
    # Before the transport's refusals of a wrong routing id were limited as the link
    # layer's are, they alone gave 400–2,000 lines, as the fuzzer's timing fell.
    assert len(server_log.splitlines()) < 2000
    audit = [json.loads(x) for x in (runs / "server" / "audit.jsonl").read_text().splitlines()]
    refused = [r for r in audit if r["direction"] == "refused"]
    # Mutated messages that got past the link layer reached the codec and were refused
    # there (and audited); the rest died earlier, at the handshake or the link layer.
    # About half of the 10,000 are mutated golden frames or Hellos of another session;
    # ~2,000 of them reach the codec (the count moves with the corpus of golden vectors,
    # and with how many of the flood the sockets drop at their high-water mark: 1,397 with
    # other tests running beside it). Hundreds in the audit show that they are recorded.
    assert len(refused) > 500, len(refused)
    assert "refused link frames from host (1000 so far)" in server_log
