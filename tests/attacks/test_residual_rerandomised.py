"""Attack (issue 11, finding 1): an honest-but-curious guest reads the residual's offset.

The Host forms ``[[4d]] = [[Σ_g z_g]] · (1 + n·offset)``. A guest that follows the
protocol keeps its own Forward ciphertexts ``F_g`` and receives ``[[4d]]`` and, with
several guests, ``others = [[Σ_{h≠g} z_h]]``. It computes ``q = [[4d]] / (F_g · others)``
row by row: without fresh randomness from the Host, ``q = 1 + n·offset`` — a trivial
encryption, ``(q − 1) % n == 0`` — and ``offset = z_H − 4ỹ + 2`` is read in the clear
(at epoch 0, the labels plus the Host's private starting scores).

The observer below is that guest: it records every Forward it sent and every Residual
it received (from the in-memory hub, or as a party's channel observer over real
CURVE sockets) and divides. It must read 0 rows; with the Host's re-randomisation
switched off (the leaky construction, minted by hand) it reads every label.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import (
    decoded_traffic,
    failures,
    host_start,
    memory_job,
    party_data,
    run_in_threads,
    zero_start,
)
from processes import WEAK, privfl_here, spawn

from privfl.config.vertical import JobConfig, ModelConfig, load_job
from privfl.crypto.encoding import VALUE_BITS, decode
from privfl.learning import start as starts
from privfl.parties.vertical import guest as guest_party
from privfl.parties.vertical.runner import run_party
from privfl.protocol import codec, fresh
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Forward, Message, PublicKeyMessage, Residual


@dataclass
class CuriousGuest:
    """What one guest legitimately holds: the key, its Forwards, the Residuals it got."""

    name: str
    n: int = 0
    forwards: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    residuals: list[Residual] = field(default_factory=list)

    def record(self, sender: str, receiver: str, body: Message) -> None:
        if sender == self.name and isinstance(body, Forward):
            self.forwards[(body.epoch, body.batch)] = body.scores.values
        elif receiver == self.name and isinstance(body, PublicKeyMessage):
            self.n = body.n
        elif receiver == self.name and isinstance(body, Residual):
            self.residuals.append(body)

    def read(self) -> tuple[int, list[tuple[int, int, np.ndarray]]]:
        """Divide every residual by our Forward (and ``others``): rows checked, rows read.

        Returns the count of rows tried and, per (epoch, batch), the offsets read.
        """
        n, n2 = self.n, self.n * self.n
        tried, read = 0, []
        for res in self.residuals:
            own = self.forwards[(res.epoch, res.batch)]
            others = res.others.values if res.others is not None else (1,) * len(own)
            plain = []
            for r, f, o in zip(res.residual.values, own, others, strict=True):
                q = r * pow(f * o % n2, -1, n2) % n2
                if (q - 1) % n == 0:
                    plain.append((q - 1) // n)
            tried += len(own)
            if plain:
                read.append((res.epoch, res.batch, decode(plain, VALUE_BITS, n)))
        return tried, read


def observe(job: JobConfig, hub: InMemoryHub) -> dict[str, CuriousGuest]:
    """Every guest as an honest-but-curious observer of the recorded traffic."""
    guests = {g: CuriousGuest(g) for g in job.guests}
    for sender, receiver, _, body in decoded_traffic(hub):
        for guest in guests.values():
            guest.record(sender, receiver, body)
    return guests


def run(job: JobConfig, out: Path) -> dict[str, CuriousGuest]:
    hub = InMemoryHub()
    results = run_in_threads(job, hub, out)
    assert not failures(results), failures(results)
    return observe(job, hub)


def leaky_rerandomize(key: Any, c: Iterable[int], noise: Any = None) -> fresh.Fresh:
    """The construction issue 11 found: the vector sent as it is, no fresh randomness."""
    return fresh._mint(list(c))


CASES = [(1, "standard", 0), (2, "standard", 0), (1, "djn", 0), (2, "djn", 0), (2, "standard", 150)]


@pytest.mark.parametrize(("guests", "obfuscation", "batch_size"), CASES)
def test_no_residual_row_is_readable(
    tmp_path: Path, guests: int, obfuscation: str, batch_size: int
) -> None:
    # Prepare: no label noise, so a leak would show the true labels.
    job = replace(memory_job(guests, epochs=2, batch_size=batch_size), obfuscation=obfuscation)

    # Act
    observers = run(job, tmp_path)

    # Assert: every guest tried every row of every batch and read none.
    rows = len(party_data(job)[job.host].x_train)
    for guest in observers.values():
        tried, read = guest.read()
        assert tried == job.training.epochs * rows
        assert read == [], f"{guest.name} read {sum(len(v) for *_, v in read)} rows"


def test_same_residual_never_goes_to_two_guests(tmp_path: Path) -> None:
    job = memory_job(2, epochs=1)

    observers = run(job, tmp_path)

    first, second = (observers[g].residuals[0] for g in job.guests)
    assert set(first.residual.values).isdisjoint(second.residual.values)


@pytest.mark.parametrize("guests", [1, 2])
def test_the_attack_reads_every_label_without_rerandomisation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guests: int
) -> None:
    # Prepare: the leaky Host of issue 11 (the observer must be able to fail).
    monkeypatch.setattr(fresh, "rerandomize", leaky_rerandomize)
    job = memory_job(guests, epochs=1)
    y = party_data(job)[job.host].y_train
    assert y is not None

    # Act
    observers = run(job, tmp_path)

    # Assert: at epoch 0 the offset is z_H + 2 − 4y, z_H from the Host's private start:
    # every row's offset is read exactly, for every guest.
    host = party_data(job)[job.host]
    z_host = np.hstack([host.x_train, np.ones((len(y), 1))]) @ host_start(tmp_path)[:, 0]
    for guest in observers.values():
        tried, read = guest.read()
        assert tried == len(y) and len(read) == 1
        epoch, batch, offset = read[0]
        assert (epoch, batch) == (0, 0) and len(offset) == len(y)
        np.testing.assert_allclose(offset, z_host + 2.0 - 4.0 * y, atol=1e-3)


@pytest.mark.slow
def test_no_row_is_readable_over_real_sockets(tmp_path: Path) -> None:
    """Server and Host as real processes over CURVE; the curious guest is our own guest code,
    its channel observer recording the frames it sends and receives."""
    kit = tmp_path / "kit"
    made = privfl_here("init", "vfl", "--out", str(kit), *WEAK, "--epochs", "1", "--timeout", "20")
    assert made.returncode == 0, made.stderr
    job_path = kit / "job.toml"
    for role in ("server", "host"):
        spawn(
            "vfl", role, "--job", str(job_path), "--party", role, "--out",
            str(tmp_path / role), "--no-progress", "--workers", "1", log=tmp_path / f"{role}.log",
        )  # fmt: skip
    guest = CuriousGuest("guest-1")
    lock = threading.Lock()

    def frames_seen(direction: str, peer: str, header: Any, frames: list[bytes]) -> None:
        if direction in ("sent", "received") and header is not None:
            _, body = codec.decode(frames)
            sender, receiver = (guest.name, peer) if direction == "sent" else (peer, guest.name)
            with lock:
                guest.record(sender, receiver, body)

    job = load_job(job_path)  # the guest runs the kit's own job file, as the others do
    run_party(job, "guest-1", tmp_path / "guest-1", observer=frames_seen)

    tried, read = guest.read()
    assert guest.n and tried == len(party_data(job)[job.host].x_train)
    assert read == []


def same_noise(state: Any, count: int) -> list[int]:
    """A deviating guest's obfuscators: one value for every ciphertext it sends."""
    one = state.noise.take(1)
    state.noise.prefetch(1)
    return one * count


def read_against_first(residual: Residual, n: int) -> list[int]:
    """Divide every residual value by the first: the plaintext differences that are readable."""
    n2 = n * n
    values = residual.residual.values
    inverse = pow(values[0], -1, n2)
    quotients = [v * inverse % n2 for v in values]
    return [(q - 1) // n for q in quotients if (q - 1) % n == 0]


@pytest.mark.parametrize("leaky", [False, True])
def test_separable_residual_hides_labels_from_a_guest_that_fixes_its_randomness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leaky: bool
) -> None:
    """Multiclass, separable sigmoid: the guest's four basis ciphertexts per score meet the
    Host's coefficients; at epoch 0 every row has the same scores, so a guest that encrypts
    them all with one obfuscator gets residuals whose ratios are ``1 + n·(y_j − y_i)`` —
    unless the Host re-randomises each one."""
    # Prepare: no label noise; the deviating guest reuses one obfuscator.
    monkeypatch.setattr(guest_party, "take", same_noise)
    # The Host at zero, as before its private start: then every row's scores are equal
    # and only the re-randomisation stands between the guest and the labels.
    monkeypatch.setattr(starts, "host_start", zero_start)
    if leaky:
        monkeypatch.setattr(fresh, "rerandomize", leaky_rerandomize)
    model = ModelConfig(kind="multiclass", classes=3)
    job = memory_job(1, epochs=1, dataset="wine", model=model)
    y = party_data(job)[job.host].y_train
    assert y is not None and job.model.sigmoid == "auto"

    # Act
    observer = run(job, tmp_path)[job.guests[0]]

    # Assert: honest Host, nothing but the trivial first entry; leaky Host, every label.
    (residual,) = observer.residuals
    read = read_against_first(residual, observer.n)
    if not leaky:
        assert read == [0]
        return
    assert len(read) == 3 * len(y)
    offsets = decode(read, VALUE_BITS, observer.n).reshape(len(y), 3)
    onehot = np.eye(3)[y]
    assert np.allclose(onehot[0, 0] - offsets, onehot, atol=1e-6)
