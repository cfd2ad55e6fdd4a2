"""The lower tails of the suite's model-quality asserts over fresh private draws.

Tests that train on draws from the OS CSPRNG (the Host's label flips and private start,
the batch plan's joint seed, DP noise) assert a quality bound that holds for most draws,
not all. This measures how many: it repeats each test's training in-process with its
plaintext twin (the GLM protocol is ``reference_train`` from the same flips, start and
plan; the federated trees are ``learning.secureboost.fit``; DP training reruns with a
seeded source on the identical code path) over seeds 0..N-1 and prints each case's
bound, median, 0.1 % quantile, minimum, and how many standard deviations the bound
lies below the mean.

    python benchmarks/assert_tails.py --draws 1000 glm-cli-3
    python benchmarks/assert_tails.py --list
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from privfl.config.vertical import JobConfig, kind_default
from privfl.data.views import PartyData
from privfl.learning.glm import glm_of, mean_of, reference_train
from privfl.learning.start import host_start
from privfl.parties.vertical.batches import job_least_batch, job_plan
from privfl.parties.vertical.host_steps import private_labels
from privfl.parties.vertical.runner import load_data

Case = tuple[str, float, Callable[[int], float]]  # metric name, the test's bound, one draw


def glm_twin(
    job: JobConfig, metric: str, data: dict[str, PartyData] | None = None
) -> Callable[[int], float]:
    """One draw of a GLM run's held-out ``metric``: the Host's flips, private start and the
    plan's joint seed from ``default_rng(seed)``, then the protocol's steps in the clear.

    Exact for runs shorter than ``flipback_every`` epochs (no flipback to repeat) and
    without early stopping (a run that stops early stops on a loss it already reached).
    """
    glm = glm_of(job)
    data = data or {n: load_data(job, n, None, None) for n in [job.host, *job.guests]}
    host = data[job.host]
    assert host.y_train is not None and host.y_test is not None
    x_host = np.hstack([host.x_train, np.ones((len(host.x_train), 1))])
    parts = [x_host] + [data[g].x_train for g in job.guests]
    penalised = [np.r_[np.ones(host.x_train.shape[1]), 0.0]]
    penalised += [np.ones(data[g].x_train.shape[1]) for g in job.guests]
    tests = [np.hstack([host.x_test, np.ones((len(host.x_test), 1))])]
    tests += [data[g].x_test for g in job.guests]
    least = job_least_batch(job, len(x_host))

    def draw(seed: int) -> float:
        rng = np.random.default_rng(seed)
        labels, _ = private_labels(glm, job, host.y_train, rng)
        start = host_start(
            glm,
            x_host,
            labels,
            offset=host.offset_train,
            penalised=penalised[0],
            training=job.training,
            rng=rng,
        )
        plan = job_plan(job, x_host, least, rng.bytes(32)).batches
        thetas, losses = reference_train(
            parts,
            labels,
            job.training,
            np.random.default_rng(job.seed),
            glm,
            host.offset_train,
            penalised,
            start=start,
            plan=plan,
        )
        if metric == "loss_drop":  # the first epoch's loss less the last's
            return float(losses[0] - losses[-1])
        if metric == "-last_loss":  # an upper bound on the last loss, as a lower one
            return -float(losses[-1])
        eta = np.sum([x @ t for x, t in zip(tests, thetas, strict=True)], axis=0)
        return float(glm.metrics(host.y_test, mean_of(glm, eta, host.offset_test))[metric])

    return draw


def memory(guests: int = 1, **kw: Any) -> JobConfig:
    """tests/helpers.memory_job, importable from here."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers import memory_job

    return memory_job(guests, **kw)


def cli_job(guests: int, epochs: int, epsilon: float | None = None) -> JobConfig:
    """`privfl vfl run-local`'s job: the demo split, the default label ε (logistic's) with
    flipback every 5 epochs."""
    eps = kind_default("logistic", "label_dp.epsilon") if epsilon is None else epsilon
    return memory(guests, epochs=epochs, epsilon=eps, flipback_every=5)


def cases() -> dict[str, Case]:
    """Every measured assert, by name."""
    out: dict[str, Case] = {
        # tests/e2e/test_cli.py::test_run_local_writes_every_output (its 2-guest run; its
        # 1-guest case reads the run without label DP, glm-cli-30-inf)
        "glm-cli-3-1guest": ("accuracy", 0.80, glm_twin(cli_job(1, 3), "accuracy")),
        "glm-cli-3-loss": ("-last_loss", -0.7, glm_twin(cli_job(1, 3), "-last_loss")),
        "glm-cli-3-2guests": ("accuracy", 0.80, glm_twin(cli_job(2, 3), "accuracy")),
        # tests/e2e/test_independent_guest.py (2 epochs) and the sites' runs (3 epochs)
        "glm-cli-2-1guest": ("accuracy", 0.80, glm_twin(cli_job(1, 2), "accuracy")),
        # tests/e2e/test_sites.py (2 guests, 15 missing cells, label DP off) and
        # test_netns.py (1 guest, 2 epochs, the default label ε): the rows every site holds
        "glm-sites-2guests-3": (
            "accuracy",
            0.85,
            glm_twin(cli_job(2, 3, math.inf), "accuracy", sites_data(2, 15)),
        ),
        # ... and its prediction on the ids below P00150 (mostly training rows), by the
        # saved models' standardisation
        "glm-sites-2guests-3-predict": (
            "accuracy",
            0.75,
            glm_twin(cli_job(2, 3, math.inf), "accuracy", sites_data(2, 15, "P00150")),
        ),
        "glm-netns-1guest-2": (
            "accuracy",
            0.85,
            glm_twin(cli_job(1, 2), "accuracy", sites_data(1, 0)),
        ),
        # tests/e2e/test_cli.py::test_without_label_dp_matches_central_logistic_regression
        "glm-cli-30-inf": (
            "accuracy",
            0.958 - 0.025,
            glm_twin(cli_job(1, 30, math.inf), "accuracy"),
        ),
        # tests/parties/vertical/test_glm_protocol.py (ε = ∞: the start and plan are random)
        "glm-wine-1-taylor": ("accuracy", 0.5, glm_twin(wine(1, "taylor"), "accuracy")),
        "glm-wine-1-separable": ("accuracy", 0.5, glm_twin(wine(1, "separable"), "accuracy")),
        "glm-wine-5": ("accuracy", 0.8, glm_twin(wine(5, "auto"), "accuracy")),
        "glm-counts-5": ("r2", 0.2, glm_twin(counts(), "r2")),
        # ... on a quarter of the rows, as test_sites_with_id_columns_train_each_glm trains
        "glm-counts-5-quarter": ("r2", 0.2, glm_twin(counts(0.75), "r2")),
        "glm-digits-2-loss": ("loss_drop", 0.0, glm_twin(digits(), "loss_drop")),
        # ... as the test runs it: 256 training rows, two batches an epoch
        "glm-digits-2-loss-256": ("loss_drop", 0.0, glm_twin(digits(0.857), "loss_drop")),
        # tests/learning/test_local_dp.py (DP-SGD / FSDP noise from the CSPRNG)
        "hfl-local-dpsgd": ("accuracy", 0.3, hfl(local_dp_config("dpsgd"))),
        "hfl-local-fsdp": ("accuracy", 0.3, hfl(local_dp_config("fsdp"))),
        # tests/e2e/test_hfl_processes.py: run-local's private default (in-process twin)
        "hfl-private-default": ("accuracy", 0.80, hfl(private_default())),
        # tests/mechanisms/test_dpsgd.py::test_private_training_learns_and_reports_its_epsilon
        "train-private-dpsgd": ("accuracy", 0.7, train_private_draw("dpsgd")),
        "train-private-fsdp": ("accuracy", 0.7, train_private_draw("fsdp")),
    }
    return out


def keyed(seed: int) -> Callable[..., Any]:
    """A stand-in for ``noise.private_source``: the same ChaCha20 generator, keyed by ``seed``."""
    from randomgen import ChaCha

    from privfl.mechanisms.noise import NoiseSource

    def source(exact: bool = True) -> NoiseSource:
        return NoiseSource(np.random.Generator(ChaCha(key=seed, rounds=20)), exact=exact)

    return source


def hfl(config: Any) -> Callable[[int], float]:
    """One in-process run of ``config`` whose CSPRNG is keyed by the draw's seed."""
    from privfl.runs import simulate

    def draw(seed: int) -> float:
        real = simulate.private_source
        simulate.private_source = keyed(seed)  # type: ignore[assignment]
        try:
            return float(simulate.run_experiment(config)["accuracy"])
        finally:
            simulate.private_source = real  # type: ignore[assignment]

    return draw


def local_dp_config(method: str) -> Any:
    from privfl.config.horizontal import HflConfig

    return HflConfig(
        local_dp=method, clients=4, rounds=3, local_epochs=1, batch_size=32,
        local_noise=0.6, fsdp_rank=4, lr=0.5, seed=1,
    )  # fmt: skip


def private_default() -> Any:
    from privfl.cli.hfl import build_config, private_by_default

    keys = ("mechanism", "local_dp", "local_noise", "iid", "clients", "dirichlet")
    opts: dict[str, Any] = {key: False if key == "iid" else None for key in keys}
    assert private_by_default(None, opts)
    return build_config(None, opts)


def train_private_draw(method: str) -> Callable[[int], float]:
    """test_dpsgd's private training on its seeded table, the noise keyed by the draw's seed."""
    import torch
    from torch import nn

    from privfl.learning import dpsgd

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    cfg = dpsgd.PrivateTrainConfig(
        method=method, epsilon=8.0, epochs=3, batch_size=50, lr=0.5, rank=2
    )

    def draw(seed: int) -> float:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
        real = dpsgd.private_source
        dpsgd.private_source = keyed(seed)  # type: ignore[assignment]
        try:
            result = dpsgd.train_private(model, x[:300], y[:300], x[300:], y[300:], cfg)
        finally:
            dpsgd.private_source = real  # type: ignore[assignment]
        return float(result["accuracy"])

    return draw


def sites_data(guests: int, missing: int, below: str = "") -> dict[str, PartyData]:
    """tests/sites.make_sites's files, on the ids every site holds (what the PSI leaves).
    With ``below``, the test rows are the shared ids below it instead (test_sites'
    prediction), scaled with the training rows' statistics as a saved model is."""
    import dataclasses
    import sys
    import tempfile
    from pathlib import Path

    from privfl.data.tables import read_id_csv, split_and_standardise, standardise_with

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from sites import make_sites

    with tempfile.TemporaryDirectory() as tmp:
        made = make_sites(Path(tmp), guests=guests, missing=missing)
        views = {}
        for name, path in made.files.items():
            label = "diagnosis" if name == "host" else None
            table = read_id_csv(path, "patient_id", label)
            keep = [i for i, x in enumerate(table.ids) if x in made.shared]
            ordered = sorted(keep, key=lambda i: table.ids[i])
            views[name] = split_and_standardise(table.take(ordered), 0.25, 0)
            if below:
                at = {x: i for i, x in enumerate(table.ids)}
                rows = table.take([at[x] for x in sorted(made.shared) if x < below])
                x_test = standardise_with(rows, views[name].mean, views[name].scale)
                views[name] = dataclasses.replace(views[name], x_test=x_test, y_test=rows.y)
    return views


def counts(test_size: float = 0.25) -> JobConfig:
    """test_glm_protocol's Poisson job on the counts table with its exposure (5 epochs)."""
    import dataclasses

    from privfl.config.vertical import ModelConfig

    model = ModelConfig(kind="poisson", classes=0, exposure="exposure")
    job = memory(1, epochs=5, dataset="counts", model=model, batch_size=0)
    return dataclasses.replace(job, data=dataclasses.replace(job.data, test_size=test_size))


def digits(test_size: float = 0.25) -> JobConfig:
    """test_glm_protocol's separable multiclass job on digits (2 epochs, batches of 128)."""
    import dataclasses

    from privfl.config.vertical import ModelConfig

    model = ModelConfig(kind="multiclass", classes=10)
    job = memory(1, epochs=2, dataset="digits", model=model, batch_size=128)
    return dataclasses.replace(job, data=dataclasses.replace(job.data, test_size=test_size))


def wine(epochs: int, sigmoid: str) -> JobConfig:
    """test_glm_protocol's multiclass job on wine (3 classes, one guest, full batches)."""
    from privfl.config.vertical import ModelConfig

    model = ModelConfig(kind="multiclass", classes=3, sigmoid=sigmoid)
    return memory(1, epochs=epochs, dataset="wine", model=model, batch_size=0)


def summary(name: str, metric: str, bound: float, values: list[float], seconds: float) -> str:
    """One line: the case, its bound and the measured tail."""
    v = np.sort(np.asarray(values))
    mean, sd = float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0
    z = (mean - bound) / sd if sd > 0 else math.inf
    below = int(np.sum(~(v > bound)))  # a diverged draw (NaN) fails the test's assert too
    return (
        f"{name}: {metric} bound {bound:.4f}; {len(v)} draws: median {statistics.median(v):.4f}, "
        f"q0.001 {np.quantile(v, 0.001):.4f}, min {v[0]:.4f}, mean {mean:.4f}, sd {sd:.4f}, "
        f"bound at mean - {z:.1f} sd, at/below bound {below}; {seconds:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    known = cases()
    if args.list:
        print("\n".join(known))
        return
    for name in args.names or list(known):
        metric, bound, draw = known[name]
        started = time.process_time()
        values = [draw(seed) for seed in range(args.draws)]
        print(summary(name, metric, bound, values, time.process_time() - started), flush=True)


if __name__ == "__main__":
    main()
