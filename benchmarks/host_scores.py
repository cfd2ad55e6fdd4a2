"""What the Host's gradient equations give away of its guests' scores (docs/security.md).

Runs the real vertical protocol (in-memory transport, real Paillier with test keys) on
breast cancer with 21 Host and 9 guest columns, and the Host's strongest linear read
(``tests/score_attack.py``) on it: one plan per job (as shipped) and a fresh permutation
each epoch (as before), with the default steps and with scores settled after epoch 0;
then the digits demo's rows the Host's columns pin, in the seeded plan and as sent.

    python benchmarks/host_scores.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

# The tests' harness (in-memory runs, the curious Host) and the attack live under tests/.
TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "attacks")]

import test_host_reads_scores as t  # noqa: E402
from score_attack import Reading, attack  # noqa: E402


def one(size: int, reshuffle: bool, **overrides: float) -> Reading:
    """Three epochs at batch ``size``; the Host's reading of the last one."""
    patch = pytest.MonkeyPatch()
    if reshuffle:
        t.reshuffle_every_epoch(patch)
        t.unchecked(patch)
    try:
        with tempfile.TemporaryDirectory() as folder:
            return t.run(t.wide_host_job(size, epochs=3, **overrides), Path(folder), patch)
    finally:
        patch.undo()


def digits(unpinned: bool) -> Reading:
    """The digits demo at b = 64: the seeded plan as drawn, or as the Host sends it."""
    job = t.memory_job(1, dataset="digits", batch_size=64)
    host = t.party_data(job)[job.host]
    x = np.hstack([host.x_train, np.ones((len(host.x_train), 1))])
    least = t.job_least_batch(job, len(x))
    sent = t.job_plan(job, x, least, t.SEED)
    drawn = t.joint_plan.drawn(t.SEED, sent.attempt, len(x), 64, least)
    return attack(*t.digits_equations(sent.batches if unpinned else drawn))


def main() -> None:
    for size in (23, 30, 44):
        print(f"one plan per job, b = {size}: {one(size, False)}", flush=True)
    for size in (23, 30):
        for settled in (False, True):
            extra = {"lr_decay": 1000.0} if settled else {}
            for reshuffle in (True, False):
                how = "fresh permutation per epoch" if reshuffle else "one plan per job"
                print(f"{how}, settled={settled}, b = {size}: {one(size, reshuffle, **extra)}")
    for unpinned in (False, True):
        print(f"digits b = 64, unpinned={unpinned}: {digits(unpinned)}", flush=True)


if __name__ == "__main__":
    main()
