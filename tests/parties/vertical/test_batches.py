"""The mini-batch refusal rule (FATE issue 3691): a batch a guest or the Host could solve
is refused.

Every batch actually sent counts: the configured size, the full batch, and the last
batch of an epoch (a too-small remainder is folded into the batch before it).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import failures, memory_job, run_in_threads

from privfl.config.vertical import JobConfig, with_overrides
from privfl.errors import ConfigError
from privfl.learning.taylor import batch_plan, batch_sizes
from privfl.parties.vertical.batches import check_batch, job_least_batch, least_batch
from privfl.parties.vertical.server_rules import training_allowance
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Hello


@pytest.mark.parametrize("size", [1, 19, 20])
def test_a_batch_not_larger_than_a_guests_features_is_refused(size: int) -> None:
    job = memory_job(1, batch_size=size)

    with pytest.raises(ConfigError) as caught:
        least_batch(job, 426, {"guest-1": 20})

    assert "guest-1" in str(caught.value) and "allow_small_batches" in str(caught.value)


@pytest.mark.parametrize("size", [0, 60, 426, 1000])
def test_a_full_batch_not_larger_than_a_guests_features_is_refused(size: int) -> None:
    # 60 rows against a guest with 60 features: full batch, batch_size = rows or above.
    job = memory_job(1, batch_size=size)

    with pytest.raises(ConfigError) as caught:
        least_batch(job, 60, {"guest-1": 30, "guest-2": 60})

    assert "60 training rows" in str(caught.value) and "guest-2" in str(caught.value)


def test_larger_batches_and_the_explicit_override_pass() -> None:
    assert least_batch(memory_job(1, batch_size=21), 426, {"guest-1": 20}) == 21
    assert least_batch(memory_job(1, batch_size=0), 426, {"guest-1": 20}) == 21  # full batch
    allowed = with_overrides(memory_job(1, batch_size=5), allow_small_batches=True)
    assert least_batch(allowed, 426, {"guest-1": 20}) == 1
    assert least_batch(allowed, 10, {"guest-1": 20}) == 1


def test_a_short_last_batch_is_folded_into_the_one_before() -> None:
    # 426 rows in batches of 100 leave 26; a guest with 30 features could solve 26.
    sizes = batch_sizes(426, 100, min_rows=31)
    plan = batch_plan(426, 100, np.random.default_rng(0), min_rows=31)

    assert sizes == [100, 100, 100, 126]
    assert [len(b) for b in plan if b is not None] == sizes
    assert sorted(np.concatenate([b for b in plan if b is not None]).tolist()) == list(range(426))
    assert batch_sizes(426, 100, min_rows=26) == [100, 100, 100, 100, 26]  # 26 > 25 features


def test_the_send_time_guard_refuses_a_batch_under_the_least_size() -> None:
    check_batch(21, 21)
    with pytest.raises(ConfigError, match="batch of 20 rows"):
        check_batch(20, 21)


def test_the_refusal_stops_every_party_before_training(tmp_path: Path) -> None:
    # Two guests with 10 features each, the Host 10 and its bias: a batch of 10 is refused,
    # naming the Host, whose 11 gradient entries are the most any party reads.
    job = memory_job(2, batch_size=10, timeout=10)

    results = run_in_threads(job, InMemoryHub(), tmp_path)

    failed = failures(results)
    assert set(failed) == set(job.parties)
    assert "batch size 10" in str(failed["host"]) and "host's 11 gradient" in str(failed["host"])
    assert not (tmp_path / "host" / "summary.json").exists()


def with_features(job: JobConfig, **counts: int) -> JobConfig:
    """The job with these declared feature counts (``guest_1`` for ``guest-1``)."""
    parties = dict(job.parties)
    for name, count in counts.items():
        party = name.replace("_", "-")
        parties[party] = replace(parties[party], feature_count=count, columns=())
    return replace(job, parties=parties)


@pytest.mark.parametrize("size", [16, 21, 22])
def test_a_batch_not_larger_than_the_hosts_gradient_entries_is_refused(size: int) -> None:
    # The Host with 21 features and its bias reads 22 equations in the batch's guest scores.
    job = with_features(memory_job(1, batch_size=size), host=21, guest_1=10)

    with pytest.raises(ConfigError) as caught:
        job_least_batch(job, 426)

    message = str(caught.value)
    assert "host's 22 gradient entries (21 features and the bias)" in message
    assert "guests' scores" in message and "allow_small_batches" in message
    assert job_least_batch(with_overrides(job, allow_small_batches=True), 426) == 1


def test_the_least_batch_counts_whichever_party_reads_more() -> None:
    host_wider = with_features(memory_job(1, batch_size=23), host=21, guest_1=10)
    guest_wider = with_features(memory_job(1, batch_size=23), host=10, guest_1=21)

    assert job_least_batch(host_wider, 426) == 23  # 21 features + bias, + 1
    assert job_least_batch(guest_wider, 426) == 22  # 21 features, + 1
    with pytest.raises(ConfigError, match="the 22 training rows"):
        job_least_batch(host_wider, 22)  # even the full batch


def test_the_server_derives_the_hosts_folded_batch_plan_from_the_job() -> None:
    # Prepare: 426 training rows in batches of 136 leave 18 < 21 (guest-1 has 20 features)
    job = memory_job(1, batch_size=136)
    features = {n: job.party(n).declared_features + (n == job.host) for n in job.parties}
    hellos = {
        n: Hello(job.party(n).role, job.fingerprint(), 569, features[n])
        for n in (job.host, *job.guests)
    }
    host_least = job_least_batch(job, 426)
    host_plan = batch_plan(426, 136, np.random.default_rng(0), host_least)

    # Act
    allowance = training_allowance(job, hellos, n=(1 << 511) + 1)

    # Assert: the same sizes as the Host's plan, the short remainder folded, not sent
    assert host_least == 21
    assert allowance.batch_sizes == tuple(len(idx) for idx in host_plan) == (136, 136, 154)
    unfolded = training_allowance(
        replace(job, training=replace(job.training, allow_small_batches=True)), hellos, 1 << 511
    )
    assert unfolded.batch_sizes == (136, 136, 136, 18)
