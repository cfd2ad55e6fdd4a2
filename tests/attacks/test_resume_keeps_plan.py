"""Attack: a Host that resumes with another attempt of the joint plan, to stack row sets.

Every guest holds the Host to one plan per job (``joint_plan.PlanCheck``): the attempt
its first Batch names, at most ``⌈R/16⌉`` rows moved, and every batch number's rows
repeated each epoch, so the Host's gradient equations never stack into more than one
epoch's directions (``test_host_reads_scores.py``). That memory lived only in the
guest's process: a session started with ``--resume`` began a fresh check, which the
Host's first Batch of the new session could fit to another of the seed's attempts. A
deviating Host stops the run after epoch 1 (as a crash would), the operators resume,
and its resumed batches are attempt ``a + 1`` of the same joint seed: its equations from
the two sessions stack.

Defended: the guest's checkpoint keeps the attempt, the moves and each batch's rows
(as digests), and the resumed guest refuses the first Batch with other rows. Leaky arm:
the check restarted on resume (as before): the Host's settled equations of epoch 1
(first attempt) and epoch 2 (second) pin and read most of the 426 training scores.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import decoded_traffic, failures, run_in_threads
from score_attack import attack
from test_host_reads_scores import CuriousHost, equations, wide_host_job

from privfl.config.vertical import JobConfig
from privfl.crypto.encoding import DATA_BITS, to_exponents
from privfl.errors import ProtocolError
from privfl.learning import pinning
from privfl.parties.session import PartyContext
from privfl.parties.vertical import host as host_party
from privfl.parties.vertical import host_steps, joint_plan
from privfl.parties.vertical.batches import job_plan
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Batch

STOP_AT = 2  # the Host stops before this epoch in the first session, after 2 checkpointed


def another_attempt(job: JobConfig, x_host: np.ndarray, least: int, seed: bytes) -> joint_plan.Plan:
    """The deviating Host's resumed plan: the next attempt of the same seed that its columns
    unpin within the move cap (each on its own passes a fresh check)."""
    honest = job_plan(job, x_host, least, seed)
    seen = to_exponents(x_host, DATA_BITS) / float(1 << DATA_BITS)
    size, cap = job.training.batch_size, joint_plan.move_cap(len(x_host))
    for attempt in range(honest.attempt + 1, joint_plan.ATTEMPTS):
        base = joint_plan.drawn(seed, attempt, len(x_host), size, least)
        plan = pinning.unpin(seen, base)
        if not pinning.pinned(seen, plan) and joint_plan.moved(plan, base) <= cap:
            return joint_plan.Plan(plan, attempt)
    raise AssertionError("no other attempt unpins")  # pragma: no cover


def stop_before(monkeypatch: pytest.MonkeyPatch, epoch: int) -> None:
    """The Host stops the first session before ``epoch`` (every party has checkpointed)."""
    train = host_party.train_epoch

    def stopping(
        ctx: PartyContext, state: host_steps.HostState, at: int, plan: list[np.ndarray | None]
    ) -> object:
        if at == epoch:
            raise ProtocolError("the host stops here")
        return train(ctx, state, at, plan)

    monkeypatch.setattr(host_party, "train_epoch", stopping)


def batches_to_guest(hub: InMemoryHub) -> list[Batch]:
    return [b for _, to, _, b in decoded_traffic(hub) if to == "guest-1" and isinstance(b, Batch)]


@pytest.mark.parametrize("kept", [True, False])
def test_a_resumed_host_cannot_switch_to_another_attempt_of_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    # Prepare: the first session, cut by the Host before epoch 2; the curious Host's record.
    job = wide_host_job(23, epochs=3, lr_decay=1e6)  # the scores settle after epoch 0
    host = CuriousHost()
    host.watch(monkeypatch)
    first = InMemoryHub()
    with monkeypatch.context() as cut:
        stop_before(cut, STOP_AT)
        results = run_in_threads(job, first, tmp_path)
    assert "the host stops here" in str(failures(results)["host"])
    if not kept:  # the guest's check as it was: a fresh one in every session
        monkeypatch.setattr(joint_plan.PlanCheck, "restore", lambda self, record: None)
    monkeypatch.setattr(host_party, "job_plan", another_attempt)

    # Act: every party resumes; the Host sends the other attempt's batches.
    second = InMemoryHub()
    resume = {name: {"resume": True} for name in job.parties}
    results = run_in_threads(job, second, tmp_path, options=resume)

    # Assert
    failed = failures(results)
    if kept:
        message = str(failed["guest-1"])
        assert message.startswith(f"host sent batch 0 of epoch {STOP_AT} with other rows")
        assert "\n" not in message
        return
    assert not failed, failed
    sent = batches_to_guest(first) + batches_to_guest(second)
    assert {b.epoch for b in sent} == {0, 1, 2}
    reading = attack(equations(host, job, sent), 426)
    print(f"\nresumed on another attempt: {reading.read} of {reading.tried} scores read")
    assert reading.rank == reading.unknowns and reading.read > 0.7 * reading.tried
