"""The vertical GLMs end to end over the in-memory hub: each equals its plaintext oracle.

256-bit keys (the least privfl accepts, behind the weak-key flag: what is checked is the
protocol's arithmetic, the same at any key size; this file took 26 CPU s with them, 66
with the suite's usual 512 bits) and a few epochs keep each run to seconds. Linear
regression is exact under Paillier up to fixed point; Poisson adds the rounding of
``exp(z_G)`` to EXP_BITS fractional bits (measured below); multiclass carries all k
classes in one Forward per guest.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import (
    Crash,
    failures,
    host_plan,
    host_start,
    memory_job,
    party_data,
    read_model,
    read_summary,
    run_in_threads,
    run_resumable,
)

from privfl.config.vertical import JobConfig, ModelConfig
from privfl.data.tables import load_id_table, site_data
from privfl.data.views import PartyData, bundled
from privfl.errors import ConfigError
from privfl.learning.glm import glm_named, glm_of, reference_train
from privfl.parties import checkpoint
from privfl.protocol.codec import decode as decode_frames
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Forward, Residual

# Fixed point as in the logistic oracle test: features enter Xᵀ[[r]] at 2^-16, a relative
# error ≤ 2^-17 per product; linear regression's residuals are ~100× larger than the
# Taylor ones (raw diabetes targets), so its weights carry ~2e-5 relative error.
# Poisson's exp(z_G) is also rounded to 2^-16 (EXP_BITS).
WEIGHT_RTOL = 1e-4
WEIGHT_ATOL = {"linear": 1e-4, "multiclass": 1e-5, "poisson": 1e-4}


def glm_job(
    kind: str,
    dataset: str,
    *,
    guests: int = 1,
    epochs: int = 3,
    classes: int = 0,
    epsilon: float = math.inf,
    batch_size: int = 0,
    timeout: float = 60.0,
    **model: Any,
) -> JobConfig:
    """A demo job of one GLM kind on one bundled table, with 256-bit test keys."""
    job = memory_job(
        guests,
        epochs=epochs,
        epsilon=epsilon,
        timeout=timeout,
        batch_size=batch_size,
        dataset=dataset,
        model=ModelConfig(kind=kind, classes=classes, **model),
    )
    return replace(job, key_bits=256)


def oracle(
    job: JobConfig, data: dict[str, PartyData], start: np.ndarray, out: Path
) -> tuple[list[np.ndarray], list[float]]:
    """The plaintext protocol from the Host's private start, its batch plan (ε = ∞)."""
    host = data[job.host]
    assert host.y_train is not None
    x_host = np.hstack([host.x_train, np.ones((host.x_train.shape[0], 1))])
    parts = [x_host] + [data[g].x_train for g in job.guests]
    penalised = [np.r_[np.ones(host.x_train.shape[1]), 0.0]]
    penalised += [np.ones(data[g].x_train.shape[1]) for g in job.guests]
    rng = np.random.default_rng(job.seed)
    glm = glm_of(job)
    plan = host_plan(out, job, x_host)
    return reference_train(
        parts,
        host.y_train,
        job.training,
        rng,
        glm,
        host.offset_train,
        penalised,
        start=start,
        plan=plan,
    )


def saved(out: Path, job: JobConfig, data: dict[str, PartyData]) -> list[np.ndarray]:
    """Each party's model.json weights as ``(features, k)`` (the Host's bias last)."""
    k = glm_of(job).outputs
    host = read_model(out, job.host)
    rows = [host["weights"][f] for f in data[job.host].feature_names] + [host["bias"]]
    parts = [np.array(rows, dtype=np.float64).reshape(-1, k)]
    for guest in job.guests:
        weights = read_model(out, guest)["weights"]
        names = data[guest].feature_names
        parts.append(np.array([weights[f] for f in names], dtype=np.float64).reshape(-1, k))
    return parts


def run(job: JobConfig, out: Path) -> InMemoryHub:
    hub = InMemoryHub()
    results = run_in_threads(job, hub, out)
    assert not failures(results), failures(results)
    return hub


# The counts table's 2,000 rows train a quarter (500): the oracle holds on any rows.
@pytest.mark.parametrize(
    ("kind", "dataset", "guests", "classes", "batch", "test_size"),
    [
        ("linear", "diabetes", 1, 0, 0, 0.25),
        ("linear", "diabetes", 2, 0, 100, 0.25),
        ("poisson", "counts", 1, 0, 0, 0.75),
        ("multiclass", "wine", 1, 3, 0, 0.25),
        ("multiclass", "wine", 2, 3, 60, 0.25),
    ],
    ids=[
        "linear",
        "linear-2-guests-batches",
        "poisson",
        "multiclass-separable",
        "multiclass-2-guests-taylor",
    ],
)
def test_encrypted_glm_equals_the_plaintext_oracle(
    tmp_path: Path, kind: str, dataset: str, guests: int, classes: int, batch: int, test_size: float
) -> None:
    # Prepare
    job = glm_job(kind, dataset, guests=guests, classes=classes, batch_size=batch)
    job = replace(job, data=replace(job.data, test_size=test_size))
    data = party_data(job)

    # Act
    run(job, tmp_path)
    want_weights, want_losses = oracle(job, data, host_start(tmp_path), tmp_path)

    # Assert: same weights and per-epoch losses as the plaintext protocol.
    summary = read_summary(tmp_path)
    got = saved(tmp_path, job, data)
    for mine, theirs in zip(got, want_weights, strict=True):
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine, theirs, atol=WEIGHT_ATOL[kind], rtol=WEIGHT_RTOL)
    np.testing.assert_allclose(summary["loss_history"], want_losses, rtol=1e-4)
    assert summary["model"]["kind"] == kind
    assert summary["dataset"] == dataset


@pytest.mark.parametrize(("sigmoid", "per_score"), [("taylor", 1), ("separable", 4)])
def test_multiclass_sends_every_class_in_one_forward(
    tmp_path: Path, sigmoid: str, per_score: int
) -> None:
    # Prepare
    job = glm_job("multiclass", "wine", classes=3, epochs=1, sigmoid=sigmoid)
    data = party_data(job)
    rows = len(data[job.host].x_train)

    # Act: the Host's start from a seeded generator (the same code as its CSPRNG draw;
    # what is checked here is the messages' shape, not the start's privacy). From a fresh
    # start one epoch's accuracy has a long lower tail: over 2,000 starts of the plaintext
    # twin (benchmarks/assert_tails.py glm-wine-1-*) median 0.911, 0.1 % quantile 0.622,
    # minimum 0.600, too near 0.5 to bound its chance below 1e-6. This seed's twin: 0.889.
    hub = InMemoryHub()
    results = run_resumable(job, tmp_path, label_seed=0, hub=hub)
    assert not failures(results), failures(results)

    # Assert: one Forward per guest per batch, carrying rows × k scores (separable: the
    # guest's K basis values of each); the residual rows × k; per-class and macro metrics.
    bodies = [decode_frames(s.frames)[1] for s in hub.sent]
    forwards = [b for b in bodies if isinstance(b, Forward)]
    residuals = [b for b in bodies if isinstance(b, Residual)]
    assert [len(f.scores) for f in forwards] == [rows * 3 * per_score]
    assert [len(r.residual) for r in residuals] == [rows * 3]
    summary = read_summary(tmp_path)
    assert summary["model"]["sigmoid"] == sigmoid
    assert set(summary["per_class"]) == {"0", "1", "2"}
    assert 0.0 <= summary["f1"] <= 1.0 and summary["accuracy"] > 0.5


def test_separable_sigmoid_refuses_two_guests_and_auto_falls_back() -> None:
    # Act / assert: explicit separable with two guests is refused, naming why; auto
    # resolves to the Taylor residual there and to separable with one guest.
    with pytest.raises(ConfigError, match="exactly one guest"):
        glm_job("multiclass", "wine", guests=2, classes=3, sigmoid="separable")
    assert glm_of(glm_job("multiclass", "wine", guests=2, classes=3)).sigmoid == "taylor"
    assert glm_of(glm_job("multiclass", "wine", classes=3)).sigmoid == "separable"
    with pytest.raises(ConfigError, match="multiclass"):
        glm_job("logistic", "breast_cancer", sigmoid="separable")


def test_poisson_refuses_two_guests() -> None:
    # Act / assert: the job itself is refused, naming why.
    with pytest.raises(ConfigError, match="exactly one guest"):
        glm_job("poisson", "counts", guests=2)


def test_regression_with_finite_epsilon_needs_bounds() -> None:
    with pytest.raises(ConfigError, match="label_low"):
        glm_job("linear", "diabetes", epsilon=2.0)


def test_linear_with_laplace_labels_reports_its_noise(tmp_path: Path) -> None:
    # Prepare: ε = 1 on labels clipped to [0, 400] (diabetes targets lie in 25..346).
    job = glm_job("linear", "diabetes", epsilon=1.0, label_low=0.0, label_high=400.0)

    # Act
    run(job, tmp_path)

    # Assert
    summary = read_summary(tmp_path)
    assert summary["flip"]["mechanism"] == "laplace"
    assert summary["flip"]["laplace_scale"] == pytest.approx(400.0)
    assert summary["label_epsilon"] == 1.0
    assert summary["model"]["label_low"] == 0.0 and summary["model"]["label_high"] == 400.0


def test_glm_of_refuses_other_kinds() -> None:
    job = glm_job("linear", "diabetes")
    boost = replace(job, model=ModelConfig(kind="secureboost"))
    with pytest.raises(ConfigError, match="not a GLM"):
        glm_of(boost)
    assert glm_of(job) == glm_named("linear", 1)


# The counts table trains on a tenth of its 2,000 rows: full batches send as many
# messages whatever the rows, so the Host still dies at the same point of the run.
@pytest.mark.parametrize(
    ("kind", "dataset", "classes", "test_size"),
    [
        ("linear", "diabetes", 0, 0.25),
        ("poisson", "counts", 0, 0.9),
        ("multiclass", "wine", 3, 0.25),
    ],
)
def test_an_interrupted_glm_run_resumes_to_the_same_model(
    tmp_path: Path, kind: str, dataset: str, classes: int, test_size: float
) -> None:
    # Prepare: a reference run, and one whose Host dies mid-run; both Hosts start alike
    # (a seeded draw), the resumed one from another seed: its start must come from the
    # checkpoint.
    job = replace(glm_job(kind, dataset, classes=classes, epochs=4), timeout_seconds=5.0)
    job = replace(job, training=replace(job.training, tolerance=0.0))
    job = replace(job, data=replace(job.data, test_size=test_size))
    reference = run_resumable(job, tmp_path / "a", label_seed=1)
    assert not failures(reference), failures(reference)
    crashed = run_resumable(job, tmp_path / "b", die=(job.host, 24), label_seed=1)
    assert isinstance(crashed[job.host], Crash), crashed

    # Act
    resumed = run_resumable(job, tmp_path / "b", resume=True, label_seed=2)

    # Assert: the same weights and losses as the run that was never interrupted.
    assert not failures(resumed), failures(resumed)
    for name in (job.host, *job.guests):
        ours = read_model(tmp_path / "b", name)
        theirs = read_model(tmp_path / "a", name)
        assert ours["weights"] == theirs["weights"] and ours.get("start") == theirs.get("start")
    summaries = [read_summary(tmp_path / r) for r in "ab"]
    assert summaries[0]["loss_history"] == summaries[1]["loss_history"]
    assert (tmp_path / "b" / "host" / checkpoint.FOLDER).is_dir()


def write_site_csvs(job: JobConfig, folder: Path) -> dict[str, Path]:
    """Each party's demo columns as its own CSV keyed by ``rid``, rows shuffled per site;
    the Host's with its label (and, for counts, its exposure column)."""
    x, names, labels, exposure = bundled(job.data.dataset)
    rng = np.random.default_rng(1)
    paths = {}
    for name in [job.host, *job.guests]:
        columns = list(job.party(name).columns)
        keep = rng.permutation(len(x))[: len(x) - 5]  # each site misses a few ids
        frame: dict[str, Any] = {"rid": [f"r{i:04d}" for i in keep]}
        frame.update({names[c]: x[keep, c] for c in columns})
        if name == job.host:
            frame["label"] = labels[keep]
            if exposure is not None:
                frame["exposure"] = exposure[keep]
        paths[name] = folder / f"{name}.csv"
        pd.DataFrame(frame).to_csv(paths[name], index=False)
    return paths


@pytest.mark.parametrize(
    ("kind", "dataset", "classes", "metric", "floor", "test_size"),
    [
        ("multiclass", "wine", 3, "accuracy", 0.8, 0.25),
        # a quarter of the counts table's rows train: over 1,000 draws of the plaintext
        # twin's private start (benchmarks/assert_tails.py glm-counts-5-quarter) r2 had
        # median 0.483, minimum 0.478, the floor 0.2 at the mean less 657 sd
        ("poisson", "counts", 0, "r2", 0.2, 0.75),
    ],
)
def test_sites_with_id_columns_train_each_glm(
    tmp_path: Path,
    kind: str,
    dataset: str,
    classes: int,
    metric: str,
    floor: float,
    test_size: float,
) -> None:
    # Prepare: id-keyed CSVs, rows matched by PSI (exposure read apart at the Host).
    exposure = "exposure" if kind == "poisson" else ""
    job = glm_job(kind, dataset, classes=classes, epochs=5, exposure=exposure)
    job = replace(job, data=replace(job.data, psi="ecdh", test_size=test_size))
    paths = write_site_csvs(job, tmp_path)
    tables = {
        name: load_id_table(site_data(job, name, path, "rid")) for name, path in paths.items()
    }
    if kind == "poisson":
        assert tables[job.host] is not None and tables[job.host].exposure is not None
        assert "exposure" not in tables[job.host].feature_names

    # Act
    results = run_resumable(job, tmp_path / "out", tables=tables)

    # Assert
    assert not failures(results), failures(results)
    summary = read_summary(tmp_path / "out")
    assert summary["intersection_size"] < len(bundled(dataset)[0])
    assert summary[metric] > floor


def test_the_separable_loss_on_digits_is_never_negative(tmp_path: Path) -> None:
    # Prepare: digits with one guest (the separable path), in batches of 128 (two
    # epochs keep the suite short). The plain least-squares fit this replaced reported
    # −0.42 at the third epoch of the vfl-models case (batches of 64);
    # tests/learning/test_separable.py shows that fit going below −2 (its leaky arm),
    # in plaintext, without a protocol run. 256 of the 1,797 rows train (two full
    # batches an epoch): every batch's loss goes through the same separable path, and
    # the Paillier work is a fifth of the default 75/25 split's. The loss falls from the
    # first epoch to the second in each of 1,000 draws of the plaintext twin's private
    # start and batch plan (benchmarks/assert_tails.py glm-digits-2-loss-256: median drop
    # 0.98, minimum 0.90, the bound 0 at the mean less 45 sd).
    # A busy machine stretches this run: the parties wait up to 300 s.
    job = glm_job("multiclass", "digits", classes=10, epochs=2, batch_size=128, timeout=300.0)
    job = replace(job, data=replace(job.data, test_size=0.857))

    # Act
    run(job, tmp_path)

    # Assert: every loss the Server reported is ≥ 0 and the curve falls.
    losses = read_summary(tmp_path)["loss_history"]
    assert len(losses) == 2
    assert min(losses) >= 0.0 and losses[-1] < losses[0]
