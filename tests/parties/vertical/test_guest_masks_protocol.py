"""Two guests' zero-sum masks in a run: the model is the unmasked run's, bit for bit, and
one guest's ciphertexts to the Host decrypt to noise (crypto/guest_masks.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from helpers import decoded_traffic, failures, memory_job, read_model, read_summary, run_in_threads

import privfl.parties.vertical.host_steps as host_steps
import privfl.parties.vertical.server as server_steps
from privfl.crypto import guest_masks, paillier
from privfl.errors import ProtocolError
from privfl.parties.vertical.handshake import masks_of
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Forward, PublicKeyMessage, Scores

SMALL = 2**80  # an encoded score lies within 2^80 of 0 or n; a uniform residue: P = 2^-430


def run(tmp_path: Path, masked: bool) -> dict[str, Any]:
    """Two guests, label ε = 2 with flipback every epoch, the full batch, 3 epochs; the
    Host's start and flips from one seeded generator, so the two arms may be compared."""
    keys: list[paillier.PrivateKey] = []
    real_keypair = server_steps.generate_keypair

    def keypair(bits: int, *args: Any) -> tuple[paillier.PublicKey, paillier.PrivateKey]:
        public, private = real_keypair(bits, *args)
        keys.append(private)
        return public, private

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(server_steps, "generate_keypair", keypair)
        mp.setattr(host_steps, "private_generator", lambda: np.random.default_rng(11))
        if not masked:
            mp.setattr(guest_masks.GuestMasks, "masks", lambda _s, _n, _w, count: [0] * count)
        job = memory_job(2, epochs=3, epsilon=2.0, flipback_every=1)
        hub = InMemoryHub()
        results = run_in_threads(job, hub, tmp_path)
    assert not failures(results), failures(results)
    return {"job": job, "hub": hub, "key": keys[0], "out": tmp_path}


def near_zero(values: list[int], n: int) -> int:
    """How many residues look like an encoded small number (within SMALL of 0 or n)."""
    return sum(1 for v in values if v < SMALL or v > n - SMALL)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same job masked and with masks off (the leaky arm)."""
    return run(tmp_path_factory.mktemp("masked"), True), run(tmp_path_factory.mktemp("off"), False)


def test_two_masked_guests_train_the_unmasked_model_bit_for_bit(
    runs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    masked, plain = runs

    # Assert: same weights, losses, flips and metrics in both arms.
    for party in ("host", "guest-1", "guest-2"):
        got = read_model(masked["out"], party)["weights"]
        assert got == read_model(plain["out"], party)["weights"], party
    one, two = read_summary(masked["out"]), read_summary(plain["out"])
    assert one["loss_history"] == two["loss_history"]
    assert one["flipback"]["flipped_back"] == two["flipback"]["flipped_back"] > 0
    assert one["accuracy"] == two["accuracy"]


@pytest.mark.parametrize("masked", [True, False], ids=["masked", "masks off"])
def test_one_guests_forward_and_scores_decrypt_to_noise_their_sum_does_not(
    runs: tuple[dict[str, Any], dict[str, Any]], masked: bool
) -> None:
    # Prepare: what each guest sent the Host, decrypted with the Server's key.
    arm = runs[0] if masked else runs[1]
    key: paillier.PrivateKey = arm["key"]
    n = key.public_key.n
    sent: dict[tuple[str, type, int], list[int]] = {}
    for sender, to, _, body in decoded_traffic(arm["hub"]):
        if isinstance(body, PublicKeyMessage):
            assert (body.mask_seeds == "") == (to == "host"), to
        if isinstance(body, (Forward, Scores)) and to == "host":
            values = body.scores.values
            sent[(sender, type(body), body.epoch)] = key.decrypt(list(values))
    # Assert: masked, every residue one guest sent the Host is uniform-looking (masks
    # off: every forward residue a small score), the guests' sum of the same message is
    # small; the Host's public_key carried no seeds.
    assert len(sent) == 2 * 2 * 3  # forward and test scores, per guest, per epoch
    for (sender, kind, epoch), plain in sent.items():
        if masked:
            assert near_zero(plain, n) == 0, (sender, kind, epoch)
        elif kind is Forward:
            assert near_zero(plain, n) == len(plain)
        other = sent[("guest-2" if sender == "guest-1" else "guest-1", kind, epoch)]
        total = [(a + b) % n for a, b in zip(plain, other, strict=True)]
        if kind is Forward:  # per row: every sum is a small score
            assert near_zero(total, n) == len(total)
        else:  # packed: 5 slots of 95 bits, twice: below 2^476, far below n
            assert all(t < n >> 20 for t in total)


@pytest.mark.parametrize("seeds", ["", "guest-3=" + "ab" * 32, "guest-1=" + "ab" * 32])
def test_a_guest_refuses_seeds_that_are_not_one_per_other_guest(seeds: str) -> None:
    # Prepare: guest-1 of a three-guest job.
    job = memory_job(3)
    ctx: Any = SimpleNamespace(job=job, name="guest-1")

    # Act / Assert: one line naming the Server and what this guest needs.
    with pytest.raises(ProtocolError, match=r"^server sent mask seeds for .*guest-2, guest-3"):
        masks_of(ctx, seeds)
    assert masks_of(ctx, f"guest-2={'cd' * 32},guest-3={'ef' * 32}").seeds.keys() == {
        "guest-2",
        "guest-3",
    }
