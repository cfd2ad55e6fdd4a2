"""Checkpoint / resume: a run interrupted mid-epoch and resumed ends with the same model.

In memory: one party fails after its k-th send (mid-epoch, so parties hold
different newest checkpoints); every party restarts with resume=True; the final
weights, flipped labels' effects and loss history equal an uninterrupted run's,
exactly. The label flips come from the OS CSPRNG in real runs; here the reference
and the interrupted run share a seeded generator and the resumed Host gets another
one, so only labels restored from its checkpoint can reproduce the reference.
Through the CLI: SIGKILL the host mid-run, restart all with --resume.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import tomllib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tomli_w
from helpers import (
    Crash,
    host_plan,
    host_start,
    memory_job,
    party_data,
    read_model,
    read_summary,
    run_resumable,
)
from processes import ONE_GUEST, WEAK, privfl_here, spawn_parties

from privfl.config.vertical import JobConfig, load_job
from privfl.data.views import PartyData
from privfl.learning.glm import glm_of, reference_train
from privfl.parties import checkpoint
from privfl.parties.vertical import joint_plan

# One worker makes the uninterrupted reference run (--dist loadgroup, tests/conftest.py).
pytestmark = pytest.mark.xdist_group("resume")

EPOCHS = 5
LABEL_SEED = 5  # seeded flips (not private), so two runs can flip alike


# In memory: the least key size privfl accepts (behind the weak-key flag); what is checked
# is the resume, the same at any key size (this file's in-memory runs: 7 CPU s with them,
# 15 with 512 bits). The command-line run keeps 512 bits, so that its Host is still
# training when the test kills it.
KEY_BITS = 256


def resume_job() -> JobConfig:
    """Mini-batches (RNG shuffles), label DP and flipback: every source of randomness in play."""
    job = memory_job(
        epochs=EPOCHS,
        epsilon=2.0,
        flipback_every=2,
        batch_size=128,
        timeout=5.0,
        tolerance=0.0,
    )
    return replace(job, key_bits=KEY_BITS)


@pytest.fixture(autouse=True, scope="module")
def same_plan_shares() -> Iterator[None]:
    """Every in-memory run here draws the same batch plan: constant seed shares (not
    private), as LABEL_SEED makes the flips alike; the plan is otherwise fresh per run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(joint_plan, "contribution", lambda: bytes(32))
        yield


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[JobConfig, Path]:
    job = resume_job()
    out = tmp_path_factory.mktemp("reference")
    results = run_resumable(job, out, label_seed=LABEL_SEED)
    assert not [r for r in results.values() if isinstance(r, BaseException)], results
    return job, out


@pytest.mark.parametrize(("victim", "after"), [("host", 40), ("guest-1", 21), ("server", 23)])
def test_resumed_run_equals_the_uninterrupted_run(
    uninterrupted: tuple[JobConfig, Path],
    tmp_path: Path,
    victim: str,
    after: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job, reference = uninterrupted
    crashed = run_resumable(job, tmp_path, die=(victim, after), label_seed=LABEL_SEED)
    assert isinstance(crashed[victim], Crash), crashed
    held = {n: sorted(os.listdir(tmp_path / n / checkpoint.FOLDER)) for n in job.parties}
    assert any(files for files in held.values()), "nothing was checkpointed before the crash"

    with caplog.at_level(logging.INFO, logger="privfl.checkpoint"):
        resumed = run_resumable(job, tmp_path, resume=True, label_seed=LABEL_SEED + 1)

    assert not [r for r in resumed.values() if isinstance(r, BaseException)], resumed
    for name in (job.host, *job.guests):
        assert read_model(tmp_path, name)["weights"] == read_model(reference, name)["weights"]
    ours, theirs = read_summary(tmp_path), read_summary(reference)
    assert ours["loss_history"] == theirs["loss_history"]
    assert ours["flipback"] == theirs["flipback"] and ours["accuracy"] == theirs["accuracy"]
    lines = (tmp_path / "host" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == list(range(EPOCHS))
    assert not list((tmp_path / "server").rglob("paillier*"))  # the key never left memory
    points = {r.getMessage() for r in caplog.records if "resuming after" in r.getMessage()}
    assert len(points) == 1, points  # every party agreed on one epoch
    assert int(points.pop().split()[2]) >= 1  # and it was not the start


def test_without_resume_a_rerun_starts_from_scratch(
    uninterrupted: tuple[JobConfig, Path], tmp_path: Path
) -> None:
    job, _ = uninterrupted
    run_resumable(job, tmp_path, die=("host", 40), label_seed=LABEL_SEED)
    before = sorted(os.listdir(tmp_path / "guest-1" / checkpoint.FOLDER))

    # The Host fails during the handshake.
    results = run_resumable(job, tmp_path, die=("host", 3), label_seed=LABEL_SEED)

    assert before, "the first attempt should have left checkpoints"
    assert isinstance(results["host"], Crash)
    assert sorted(os.listdir(tmp_path / "guest-1" / checkpoint.FOLDER)) in ([], before)


def test_checkpoint_files_are_private(uninterrupted: tuple[JobConfig, Path]) -> None:
    _, reference = uninterrupted
    files = list((reference / "host" / checkpoint.FOLDER).glob("epoch-*.json"))

    assert len(files) == checkpoint.KEEP
    assert all(f.stat().st_mode & 0o077 == 0 for f in files)


@pytest.mark.slow
def test_sigkilled_host_resumes_through_the_cli_to_the_same_model(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    made = privfl_here("init", "vfl", "--out", str(kit), *WEAK, "--epochs", "4", "--timeout", "15")
    assert made.returncode == 0, made.stderr
    job_path = kit / "job.toml"
    settings = tomllib.loads(job_path.read_text())
    settings["training"]["batch_size"] = 128
    # The flips come from the OS CSPRNG: without noise the run has a plaintext twin
    # (label restore is checked in memory above).
    settings["label_dp"].update(epsilon=float("inf"))
    job_path.write_text(tomli_w.dumps(settings))

    def start(out: Path, *extra: str) -> dict[str, Any]:
        def log_of(name: str) -> Path:
            return out.parent / f"{out.name}-{name}.log"

        # Paillier work inline (no worker pools to start) and no plots: what is checked is
        # the resume, through the command line's processes.
        inline = [*extra, "--workers", "1"]
        options = {n: [*inline, "--no-plots"] if n == "host" else inline for _, n in ONE_GUEST}
        return spawn_parties(job_path, out, log_of, options)

    interrupted = start(tmp_path / "b")
    metrics = tmp_path / "b" / "host" / "metrics.jsonl"
    deadline = time.monotonic() + 180  # a bound for a loaded machine, not a sleep
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):  # 2 of 4 epochs
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(interrupted["host"].pid, signal.SIGKILL)
    assert all(p.wait(timeout=30) != 0 for p in interrupted.values())
    resumed = start(tmp_path / "b", "--resume")
    codes = [p.wait(timeout=120) for p in resumed.values()]

    # The uninterrupted run of this job from the Host's private start (its model.json)
    # is the plaintext twin; an uninterrupted encrypted run would draw another start.
    assert codes == [0, 0, 0], (tmp_path / "b-host.log").read_text()
    job = load_job(job_path)
    data = party_data(job)
    want = uninterrupted_twin(job, data, host_start(tmp_path / "b"), tmp_path / "b")
    host, guest = read_model(tmp_path / "b", "host"), read_model(tmp_path / "b", "guest-1")
    got = [
        np.array([*(host["weights"][f] for f in data["host"].feature_names), host["bias"]]),
        np.array([guest["weights"][f] for f in data["guest-1"].feature_names]),
    ]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    log = (tmp_path / "b" / "host" / "party.log").read_text()
    assert "resuming after" in log


def uninterrupted_twin(
    job: JobConfig, data: dict[str, PartyData], start: np.ndarray, out: Path
) -> list[np.ndarray]:
    """The plaintext twin of an uninterrupted run from ``start`` (ε = ∞, the run's batch plan:
    the joint seed in the Host's model.json under ``out``)."""
    host = data[job.host]
    assert host.y_train is not None
    parts = [np.hstack([host.x_train, np.ones((len(host.x_train), 1))])]
    parts += [data[g].x_train for g in job.guests]
    penalised = [np.r_[np.ones(host.x_train.shape[1]), 0.0]]
    penalised += [np.ones(data[g].x_train.shape[1]) for g in job.guests]
    thetas, _ = reference_train(
        parts,
        host.y_train,
        job.training,
        np.random.default_rng(job.seed),
        glm_of(job),
        penalised=penalised,
        start=start,
        plan=host_plan(out, job, parts[0]),
    )
    return [t.ravel() for t in thetas]
