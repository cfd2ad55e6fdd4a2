"""A deviating Guest or Host tries to use the Server as a decryption oracle: refused.

The real Server runs (``run_party``) over the in-memory hub; the test plays the Host
and the Guest as an attacker would, with their own channels and the public key the
Server hands out. Each out-of-state request must be refused, written to the Server's
audit log as ``refused``, and end the session with an Abort naming the attacker.
Every case first shows the same request *in* state is answered, so the test can fail.
One case runs the Server as a real process through the CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import PLAN_COMMIT, ServerUnderTest, memory_job, start_server

from privfl.config.vertical import JobConfig, load_job
from privfl.crypto.encoding import encode
from privfl.crypto.packing import packed_length
from privfl.crypto.paillier import PublicKey as PaillierKey
from privfl.errors import PeerAborted, ProtocolError
from privfl.parties.audit import FILE_NAME as AUDIT
from privfl.parties.vertical.runner import run_party
from privfl.parties.vertical.server_rules import LOSS_BITS
from privfl.protocol.channel import Channel
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import (
    BigInts,
    DecryptRequest,
    EpochResult,
    Hello,
    Kind,
    Loss,
    PublicKeyMessage,
    Resume,
)

ROWS, TRAIN, TEST = 569, 426, 143  # the demo table and its 75/25 split
HOST_FEATURES, GUEST_FEATURES = 10 + 1, 20  # the job's columns (the Host's bias added)


class Played(ServerUnderTest):
    """The real Server in a thread, and the Host and Guest the attacker plays."""

    def request(self, count: int, epoch: int, batch: int = 0, purpose: str = "gradient") -> Any:
        """``count`` fresh, masked ciphertexts of zeros: any ciphertexts would do."""
        masked, _ = self.key.mask(self.key.encrypt([0] * count))
        return DecryptRequest(epoch, batch, purpose, BigInts(tuple(masked)))

    def loss(self, epoch: int, rows: int = TRAIN, **fields: int) -> Loss:
        value = BigInts(tuple(self.key.encrypt(encode([8 * rows * 0.69], LOSS_BITS, self.key.n))))
        settings = {"denominator": 8 * rows, "scale_bits": LOSS_BITS, **fields}
        return Loss(epoch, 0, 1, value, **settings)

    def honest_epoch(self, epoch: int) -> EpochResult:
        """Both gradients and the loss of the (full) batch, as the protocol has them."""
        self.ask(self.guest, self.request(packed_length(GUEST_FEATURES, self.key.n), epoch))
        self.ask(self.host, self.request(packed_length(HOST_FEATURES, self.key.n), epoch))
        result = self.ask(self.host, self.loss(epoch))
        assert isinstance(result, EpochResult)
        return result


def session(tmp_path: Path, job: JobConfig, guest_features: int = GUEST_FEATURES) -> Played:
    """Start the real Server; play both handshakes (Hello, public key, resume from scratch)."""
    return start_server(Played, tmp_path, job, ROWS, (HOST_FEATURES, guest_features))


def job_for_scores() -> JobConfig:
    return memory_job(epochs=5, epsilon=2.0, flipback_every=2, tolerance=0.0, timeout=10.0)


# ------------------------------------------------------------------ a deviating guest


@pytest.mark.parametrize("epoch", [999, 1000, 10**9, 1])
def test_guest_cannot_decrypt_at_another_epoch(tmp_path: Path, epoch: int) -> None:
    played = session(tmp_path, memory_job(epochs=5))
    length = packed_length(GUEST_FEATURES, played.key.n)

    error = played.refused(
        "guest-1", "decrypt_request", played.guest, played.request(length, epoch)
    )

    assert f"epoch {epoch} batch 0" in error and "in progress is epoch 0 batch 0" in error


def test_guest_gets_one_gradient_decryption_per_batch(tmp_path: Path) -> None:
    played = session(tmp_path, memory_job(epochs=5))
    request = played.request(packed_length(GUEST_FEATURES, played.key.n), 0)

    answer = played.ask(played.guest, request)  # the one the protocol allows

    assert len(answer.values) == len(request.values)  # type: ignore[attr-defined]
    error = played.refused("guest-1", "decrypt_request", played.guest, request)
    assert "twice" in error


@pytest.mark.parametrize("extra", [1, 2000])
def test_guest_cannot_decrypt_more_than_its_gradient_length(tmp_path: Path, extra: int) -> None:
    played = session(tmp_path, memory_job(epochs=5))
    length = packed_length(GUEST_FEATURES, played.key.n) + extra

    error = played.refused("guest-1", "decrypt_request", played.guest, played.request(length, 0))

    assert f"decrypt {length} gradient ciphertexts" in error


def test_guest_cannot_ask_for_score_decryptions(tmp_path: Path) -> None:
    played = session(tmp_path, job_for_scores())
    played.honest_epoch(0)  # test scores of epoch 0 are now due — for the Host
    request = played.request(packed_length(TEST, played.key.n), 0, purpose="scores")

    error = played.refused("guest-1", "decrypt_request", played.guest, request)

    assert "only the host evaluates" in error


def test_guest_claiming_10000_features_gets_no_key(tmp_path: Path) -> None:
    job = memory_job(epochs=5)
    hub = InMemoryHub(record=False)
    transports = {name: hub.transport(name) for name in job.parties}
    result: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: result.update(s=_run(job, tmp_path, transports["server"])), daemon=True
    )
    thread.start()
    host, guest = (
        Channel(transports[n], session=job.session, timeout=10, fresh_rule=False)
        for n in ("host", "guest-1")
    )

    host.send(
        "server", Hello("host", job.fingerprint(), ROWS, HOST_FEATURES, plan_commit=PLAN_COMMIT)
    )
    guest.send("server", Hello("guest", job.fingerprint(), ROWS, 10_000, plan_commit=PLAN_COMMIT))

    with pytest.raises(PeerAborted, match="guest-1 announced 10000 features, the job declares 20"):
        guest.expect({Kind.PUBLIC_KEY}, {"server"})
    thread.join(15)
    assert isinstance(result["s"], ProtocolError)


def _run(job: JobConfig, out: Path, transport: Any) -> Any:
    try:
        return run_party(job, "server", out, transport=transport)
    except BaseException as exc:
        return exc


# ------------------------------------------------------------------ a deviating host


def test_host_gets_test_scores_once_per_epoch(tmp_path: Path) -> None:
    played = session(tmp_path, job_for_scores())
    played.honest_epoch(0)
    request = played.request(packed_length(TEST, played.key.n), 0, purpose="scores")

    played.ask(played.host, request)  # evaluation of epoch 0: allowed once

    error = played.refused("host", "decrypt_request", played.host, request)
    assert "still due: nothing" in error


def test_host_gets_training_scores_only_at_flipback_epochs(tmp_path: Path) -> None:
    played = session(tmp_path, job_for_scores())
    train = played.request(packed_length(TRAIN, played.key.n), 0, purpose="scores")
    played.honest_epoch(0)  # flipback_every = 2: not after epoch 0

    error = played.refused("host", "decrypt_request", played.host, train)

    assert f"{packed_length(TRAIN, played.key.n)} score ciphertexts at epoch 0" in error


def test_host_training_scores_at_a_flipback_epoch_are_answered(tmp_path: Path) -> None:
    # The positive control of the case above: after epoch 1 flipback is due.
    played = session(tmp_path, job_for_scores())
    for epoch in (0, 1):
        played.honest_epoch(epoch)
        if epoch == 1:
            train = played.request(packed_length(TRAIN, played.key.n), 1, purpose="scores")
            assert played.ask(played.host, train)
        test = played.request(packed_length(TEST, played.key.n), epoch, purpose="scores")
        played.ask(played.host, test)

    error = played.refused("host", "decrypt_request", played.host, train)
    assert "still due: nothing" in error


@pytest.mark.parametrize(
    "fields",
    [{"scale_bits": 0}, {"scale_bits": 32}, {"denominator": 8}, {"denominator": 8 * 10**6}],
    ids=["scale-0", "scale-32", "denominator-8", "denominator-huge"],
)
def test_host_cannot_choose_the_loss_scale_or_denominator(
    tmp_path: Path, fields: dict[str, int]
) -> None:
    played = session(tmp_path, memory_job(epochs=5))

    error = played.refused("host", "loss", played.host, played.loss(0, **fields))

    assert "the protocol's are 1, 3408 and 2^48" in error


def test_host_gets_one_loss_per_batch_of_the_batch_in_progress(tmp_path: Path) -> None:
    played = session(tmp_path, memory_job(epochs=5))
    played.honest_epoch(0)

    error = played.refused("host", "loss", played.host, played.loss(0))  # epoch 0 again

    assert "the batch in progress is epoch 1 batch 0" in error


def test_gradient_lengths_come_from_the_job_not_the_hello(tmp_path: Path) -> None:
    # A guest whose Hello matches a job that declares 10,000 features for it does get
    # that many — the count is in the job every party agreed to, so nobody is fooled.
    # (More features than rows: only a job that allows small batches runs at all.)
    spec = replace(memory_job().party("guest-1"), columns=(), feature_count=10_000)
    base = memory_job(epochs=5, allow_small_batches=True)
    job = replace(base, parties={**base.parties, "guest-1": spec})
    played = session(tmp_path, job, guest_features=10_000)

    answer = played.ask(played.guest, played.request(packed_length(10_000, played.key.n), 0))

    assert len(answer.values) == packed_length(10_000, played.key.n)  # type: ignore[attr-defined]


# ------------------------------------------------------------------ through the CLI


def test_a_real_server_process_refuses_and_names_the_guest(tmp_path: Path) -> None:
    from privfl.tools.conformance.peer import Peer

    kit = tmp_path / "kit"
    made = _privfl(
        "init",
        "vfl",
        "--out",
        str(kit),
        "--key-bits",
        "512",
        "--allow-weak-keys",
        "--timeout",
        "10",
    )
    assert made.returncode == 0, made.stderr
    job = load_job(kit / "job.toml")
    out = tmp_path / "server"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "privfl",
            "vfl",
            "server",
            "--job",
            str(kit / "job.toml"),
            "--party",
            "server",
            "--out",
            str(out),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    host, guest = Peer(job, "host", 10), Peer(job, "guest-1", 10)
    try:
        host.channel.send(
            "server", Hello("host", job.fingerprint(), ROWS, HOST_FEATURES, plan_commit=PLAN_COMMIT)
        )
        guest.channel.send(
            "server",
            Hello("guest", job.fingerprint(), ROWS, GUEST_FEATURES, plan_commit=PLAN_COMMIT),
        )
        public = guest.channel.expect({Kind.PUBLIC_KEY}, {"server"}).body
        assert isinstance(public, PublicKeyMessage)
        host.channel.expect({Kind.CHECKPOINTS}, {"server"})
        host.channel.send("server", Resume(completed=0))
        key = PaillierKey.from_n(public.n, public.h_s)
        masked, _ = key.mask(key.encrypt([0] * packed_length(GUEST_FEATURES, key.n)))
        guest.channel.send(
            "server", DecryptRequest(999, 0, "gradient", BigInts(tuple(masked))), 999
        )
        with pytest.raises(
            PeerAborted, match="guest-1 asked for a gradient decryption of epoch 999"
        ):
            guest.channel.expect({Kind.DECRYPTED}, {"server"})
        _, stderr = server.communicate(timeout=30)
    finally:
        host.close()
        guest.close()
        if server.poll() is None:
            server.kill()
            server.wait()

    assert server.returncode != 0 and "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("privfl: error:")]
    assert len(errors) == 1 and "guest-1 asked for a gradient decryption of epoch 999" in errors[0]
    records = [json.loads(line) for line in (out / AUDIT).read_text().splitlines()]
    assert any(r["direction"] == "refused" and r["peer"] == "guest-1" for r in records)


def _privfl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "privfl", *args], capture_output=True, text=True, timeout=60
    )
