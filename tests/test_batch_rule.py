"""The mini-batch refusal rule (FATE issue 3691): a batch a guest could solve is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import failures, memory_job, run_in_threads

from privfl.config import with_overrides
from privfl.errors import ConfigError
from privfl.parties.host_run import check_batch_size
from privfl.protocol.memory import InMemoryHub


@pytest.mark.parametrize("size", [1, 19, 20])
def test_a_batch_not_larger_than_a_guests_features_is_refused(size: int) -> None:
    job = memory_job(1, batch_size=size)

    with pytest.raises(ConfigError) as caught:
        check_batch_size(job, "guest-1", 20)

    assert "guest-1" in str(caught.value) and "allow_small_batches" in str(caught.value)


def test_larger_batches_and_the_explicit_override_pass() -> None:
    check_batch_size(memory_job(1, batch_size=21), "guest-1", 20)
    check_batch_size(memory_job(1, batch_size=0), "guest-1", 20)  # full batch
    allowed = with_overrides(memory_job(1, batch_size=5), allow_small_batches=True)
    check_batch_size(allowed, "guest-1", 20)


def test_the_refusal_stops_every_party_before_training(tmp_path: Path) -> None:
    # Two guests with 10 features each: a batch of 10 is refused, naming the first guest.
    job = memory_job(2, batch_size=10, timeout=10)

    results = run_in_threads(job, InMemoryHub(), tmp_path)

    failed = failures(results)
    assert set(failed) == set(job.parties)
    assert "batch size 10" in str(failed["host"]) and "guest-" in str(failed["host"])
    assert not (tmp_path / "host" / "summary.json").exists()
