"""Multiclass: the Server sizes every decryption by the job's k classes, never by a peer.

The real Server runs over the in-memory hub; the test plays the Host and the Guest
of a 3-class job on the wine table. Requests sized for k = 3 are answered (so the
test can fail); the same requests sized for one class, or for k + 1, are refused,
audited and end the session naming the party.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from helpers import ServerUnderTest, memory_job, start_server

from privfl.config.vertical import JobConfig, LabelDPConfig, ModelConfig
from privfl.crypto.encoding import encode
from privfl.crypto.packing import packed_length
from privfl.parties.vertical import server_rules
from privfl.parties.vertical.server_rules import LOSS_BITS
from privfl.protocol.messages import (
    BigInts,
    DecryptRequest,
    EpochResult,
    Hello,
    Loss,
)

K = 3
ROWS, TRAIN, TEST = 178, 133, 45  # wine and its 75/25 split
HOST_FEATURES, GUEST_FEATURES = 4 + 1, 9  # the demo split (the Host's bias added)


def wine_job(classes: int = K) -> JobConfig:
    return memory_job(
        epochs=5,
        tolerance=0.0,
        timeout=10.0,
        epsilon=2.0,
        flipback_every=1,
        dataset="wine",
        model=ModelConfig(kind="multiclass", classes=classes),
    )


class Played(ServerUnderTest):
    def request(self, count: int, epoch: int = 0, purpose: str = "gradient") -> DecryptRequest:
        masked, _ = self.key.mask(self.key.encrypt([0] * count))
        return DecryptRequest(epoch, 0, purpose, BigInts(tuple(masked)))

    def loss(self, epoch: int) -> Loss:
        value = BigInts(tuple(self.key.encrypt(encode([8 * TRAIN * 2.0], LOSS_BITS, self.key.n))))
        return Loss(epoch, 0, 1, value, denominator=8 * TRAIN, scale_bits=LOSS_BITS)

    def length(self, values: int) -> int:
        return packed_length(values, self.key.n)


def session(tmp_path: Path, job: JobConfig) -> Played:
    return start_server(Played, tmp_path, job, ROWS, (HOST_FEATURES, GUEST_FEATURES))


def test_k_class_requests_are_answered(tmp_path: Path) -> None:
    played = session(tmp_path, wine_job())

    guest = played.ask(played.guest, played.request(played.length(GUEST_FEATURES * K)))
    host = played.ask(played.host, played.request(played.length(HOST_FEATURES * K)))
    verdict = played.ask(played.host, played.loss(0))
    scores = played.ask(played.host, played.request(played.length(TEST * K), 0, "scores"))

    assert isinstance(verdict, EpochResult)
    assert len(guest.values) == played.length(GUEST_FEATURES * K)  # type: ignore[attr-defined]
    assert len(host.values) == played.length(HOST_FEATURES * K)  # type: ignore[attr-defined]
    assert len(scores.values) == played.length(TEST * K)  # type: ignore[attr-defined]


@pytest.mark.parametrize("classes", [1, K + 1, 10 * K])
def test_guest_gradient_sized_for_other_k_is_refused(tmp_path: Path, classes: int) -> None:
    played = session(tmp_path, wine_job())
    length = played.length(GUEST_FEATURES * classes)
    assert length != played.length(GUEST_FEATURES * K)

    error = played.refused("guest-1", "decrypt_request", played.guest, played.request(length))

    assert f"decrypt {length} gradient ciphertexts" in error


def test_host_scores_sized_for_one_class_are_refused(tmp_path: Path) -> None:
    # Prepare: an honest epoch, so the test scores of epoch 0 are due.
    played = session(tmp_path, wine_job())
    played.ask(played.guest, played.request(played.length(GUEST_FEATURES * K)))
    played.ask(played.host, played.request(played.length(HOST_FEATURES * K)))
    played.ask(played.host, played.loss(0))

    # Act / assert: the test split's scores of one class (k = 1's size) are refused.
    length = played.length(TEST)
    assert length != played.length(TEST * K)
    error = played.refused(
        "host", "decrypt_request", played.host, played.request(length, 0, "scores")
    )
    assert "still due: test" in error


def test_the_allowance_comes_from_the_job_alone() -> None:
    # The Hellos carry no class count: only the job's model.classes scales the sizes;
    # no flipback (training-split scores) outside binary logistic regression.
    job = wine_job(classes=10)
    hellos = {
        "host": Hello("host", job.fingerprint(), ROWS, HOST_FEATURES),
        "guest-1": Hello("guest", job.fingerprint(), ROWS, GUEST_FEATURES),
    }
    n = (1 << 511) + 1
    allow = server_rules.training_allowance(job, hellos, n)
    assert allow.gradient_length == {
        "host": packed_length(HOST_FEATURES * 10, n),
        "guest-1": packed_length(GUEST_FEATURES * 10, n),
    }
    assert allow.score_length["test"] == packed_length(TEST * 10, n)
    assert allow.flipback_every == 0
    linear = replace(job, model=ModelConfig(kind="linear"), label_dp=LabelDPConfig(float("inf")))
    one = server_rules.training_allowance(linear, hellos, n)
    assert one.gradient_length["guest-1"] == packed_length(GUEST_FEATURES, n)
    predicting = server_rules.prediction_allowance(job, hellos, n)
    assert predicting.score_length["test"] == packed_length(ROWS * 10, n)
