"""Attack (audit, low): a deviating Host's Batch makes a guest encrypt without bound.

A guest encrypts one score per index of a Batch. Indices repeated (8 KiB of them:
1,000 encryptions; one 64 MiB frame: 8.4 M) cost the guest work without limit, and a
batch under the job's least size lets the Host solve its gradient for the guest's
scores. The guest now checks every Batch before it encrypts anything: distinct
indices, all within its training rows, at least the least batch. Here the Host's batch
first Batch is replaced by a deviating one; the guest must refuse it, encrypt nothing, and the
session must end at every party. With the check taken out (the leaky arm) the guest
encrypts a ciphertext for every copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import failures, memory_job, run_in_threads

from privfl.errors import PeerAborted, ProtocolError
from privfl.parties.vertical import guest as guest_party
from privfl.parties.vertical import host as host_party
from privfl.parties.vertical import joint_plan
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Batch

TRAIN_ROWS = 426
COPIES = 2_000
BATCHES = {
    "repeated": (np.zeros(COPIES, dtype=np.int64), "repeats 1999 of them"),
    "outside": (np.arange(TRAIN_ROWS - 99, TRAIN_ROWS + 1, dtype=np.int64), "outside the 426"),
    "too-few": (np.arange(10, dtype=np.int64), "under the job's least batch of 21"),
}


def deviating_host(monkeypatch: pytest.MonkeyPatch, first: np.ndarray) -> list[int]:
    """The Host sends ``first`` as epoch 0's first Batch; the guest's encryption count (live)."""
    encrypted = [0]
    encrypt = guest_party.encrypt

    def opening(epoch: int, number: int, batches: int, idx: np.ndarray | None) -> Batch:
        return Batch(epoch, number, batches, first if (epoch, number) == (0, 0) else idx)

    def counting(state: guest_party.GuestState, plain: list[int]) -> Any:
        encrypted[0] += len(plain)
        return encrypt(state, plain)

    monkeypatch.setattr(host_party, "Batch", opening)  # what the Host sends, not its plan
    monkeypatch.setattr(guest_party, "encrypt", counting)
    return encrypted


@pytest.mark.parametrize("case", sorted(BATCHES))
def test_a_guest_refuses_a_bad_batch_before_encrypting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    # Prepare
    indices, reason = BATCHES[case]
    encrypted = deviating_host(monkeypatch, indices)
    job = memory_job(1, epochs=1, timeout=10)

    # Act
    results = run_in_threads(job, InMemoryHub(), tmp_path)

    # Assert: the guest refused with one line, encrypted nothing; every party stopped.
    failed = failures(results)
    assert set(failed) == set(job.parties)
    refusal = failed["guest-1"]
    assert isinstance(refusal, ProtocolError) and reason in str(refusal)
    assert "\n" not in str(refusal)
    assert encrypted == [0]
    assert isinstance(failed["host"], PeerAborted) and "guest-1" in str(failed["host"])


def test_without_the_check_a_guest_encrypts_every_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: the leaky guest takes any Batch (nor holds the Host to the joint plan).
    encrypted = deviating_host(monkeypatch, BATCHES["repeated"][0])
    monkeypatch.setattr(guest_party, "check_indices", lambda msg, rows, least: None)
    monkeypatch.setattr(joint_plan.PlanCheck, "check", lambda self, epoch, number, rows: None)
    job = memory_job(1, epochs=1, timeout=10)

    # Act (the Server ends the session: the Host's loss is not for the planned batch)
    run_in_threads(job, InMemoryHub(), tmp_path)

    # Assert: one row, encrypted once per copy (and one Σz²).
    assert encrypted == [COPIES + 1]
