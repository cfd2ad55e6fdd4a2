"""Attack (issue 11, finding 7): a batch a guest can solve for its residuals.

A guest with ``f`` features decrypts (through its masked gradient) ``X_gᵀ·4d`` for
each batch: ``f`` linear equations in the batch's ``b`` residuals. With ``b ≤ f`` it
solves them and reads ``4d = z − 4ỹ + 2`` — the labels. The guard used to check only
the configured ``batch_size``; the batches actually sent (the full batch, a size at
or above the row count, an epoch's short last batch) went unchecked. Here the guest
observes every Batch it is sent over the real protocol and checks each one's size
against its feature count; a remainder that would be too small must be folded.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from helpers import decoded_traffic, failures, memory_job, party_data, run_in_threads

from privfl.config.vertical import with_overrides
from privfl.data.views import PartyData
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Batch

GUEST_FEATURES = 20  # one demo guest holds seed 004's columns 10–29


def batches_seen(job_kwargs: dict[str, object], tmp_path: Path, **overrides: bool) -> list[int]:
    """Run a one-guest job; the sizes of every Batch the guest was sent."""
    job = memory_job(1, epochs=2, **job_kwargs)
    if overrides:
        job = with_overrides(job, **overrides)
    hub = InMemoryHub()
    results = run_in_threads(job, hub, tmp_path)
    assert not failures(results), failures(results)
    rows = len(party_data(job)[job.host].x_train)
    return [
        rows if body.indices is None else len(body.indices)
        for _, to, _, body in decoded_traffic(hub)
        if to == "guest-1" and isinstance(body, Batch)
    ]


def test_a_short_last_batch_is_folded_so_no_batch_is_solvable(tmp_path: Path) -> None:
    # 426 rows in batches of 203 would leave a last batch of 20 rows = the guest's features.
    sizes = batches_seen({"batch_size": 203}, tmp_path)

    assert sizes == [203, 223] * 2
    assert min(sizes) > GUEST_FEATURES


def test_the_short_batch_is_sent_only_when_the_job_allows_it(tmp_path: Path) -> None:
    # The negative control: with the explicit override the 20-row batch does go out.
    sizes = batches_seen({"batch_size": 203}, tmp_path, allow_small_batches=True)

    assert sizes == [203, 203, 20] * 2


def shrunk(data: PartyData, rows: int) -> PartyData:
    """The first ``rows`` training rows of a party's data (labels too at the Host)."""
    y = None if data.y_train is None else data.y_train[:rows]
    return replace(data, x_train=data.x_train[:rows], y_train=y)


@pytest.mark.parametrize("batch_size", [0, 20, 500])
def test_a_full_batch_under_the_feature_count_is_refused(tmp_path: Path, batch_size: int) -> None:
    # Prepare: 20 training rows against a guest with 20 features — full batch (0), a size
    # equal to the rows, and one above them all send every row at once.
    job = memory_job(1, epochs=1, batch_size=batch_size, timeout=10)
    data = {name: shrunk(d, GUEST_FEATURES) for name, d in party_data(job).items()}
    hub = InMemoryHub()

    # Act
    results = run_in_threads(job, hub, tmp_path, data=data)

    # Assert: refused before any batch, with a line that says what to change.
    failed = failures(results)
    assert set(failed) == set(job.parties)
    message = str(failed["host"])
    assert "20 training rows" in message and "allow_small_batches" in message
    assert not any(isinstance(body, Batch) for *_, body in decoded_traffic(hub))
