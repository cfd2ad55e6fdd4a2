"""A party on Ray trains to the same model as on its process pool (the Server: as in its
own process, where it decrypts without Ray); a local Ray cluster, 512-bit keys.

The engine is site-local: the peers cannot tell it, and the decrypted arithmetic is the
same, so the saved models, the loss history and the trees must be equal exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import failures, memory_job, read_model, read_summary, run_in_threads

from privfl.config.vertical import JobConfig, ModelConfig
from privfl.crypto.engine import Engine
from privfl.crypto.pools import NoisePool
from privfl.crypto.ray_pool import RayPool
from privfl.protocol.memory import InMemoryHub

# One worker starts the session's Ray cluster for every test that uses it (--dist loadgroup).
pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.xdist_group("ray")]


class SeenEngine(Engine):
    """The Ray engine, noting every pool it opens (so a test knows Ray did the work)."""

    opened: list[NoisePool] = []  # noqa: RUF012  (one list for the whole module)

    def pool(self, *args: Any, **kwargs: Any) -> NoisePool:
        opened = super().pool(*args, **kwargs)
        self.opened.append(opened)
        return opened


def train(
    job: JobConfig,
    out: Path,
    on_ray: dict[str, int],
    pools: int | None = None,
    pooled: frozenset[str] = frozenset(),
) -> Path:
    """Every party in a thread; the ``on_ray`` parties' workers (so many) on the Ray cluster.

    The Host's flips and start come from a seeded generator (not private), so two runs
    start alike; a ``pooled`` party has 2 worker processes, every other party off Ray
    computes inline (a party the test does not put on Ray starts no pool it would not
    compare). Each Ray worker is two actors, each a process to start: the tests keep
    them few.
    """
    SeenEngine.opened.clear()
    options: dict[str, dict[str, Any]] = {
        name: {"workers": on_ray[name], "engine": SeenEngine("ray")}
        if name in on_ray
        else {"workers": 2 if name in pooled else 1}
        for name in [job.host, *job.guests]
    }
    if job.server in on_ray:  # the key holder's decryptions on the cluster (--ray-private-key)
        engine = SeenEngine("ray", private_on_cluster=True)
        options[job.server] = {"workers": on_ray[job.server], "engine": engine}
    options[job.host]["label_rng"] = np.random.default_rng(7)
    results = run_in_threads(job, InMemoryHub(record=False), out, options=options)
    assert not failures(results), failures(results)
    assert len(SeenEngine.opened) == (len(on_ray) if pools is None else pools)
    assert all(isinstance(p, RayPool) for p in SeenEngine.opened)
    return out


def test_logistic_regression_on_ray_equals_the_pool_run(tmp_path: Path) -> None:
    # Prepare: ε = 1, so the flips (seeded) are part of what must be equal.
    job = memory_job(1, epochs=2, epsilon=1.0)

    # Act
    pool = train(job, tmp_path / "pool", on_ray={}, pooled=frozenset({"guest-1"}))
    ray = train(job, tmp_path / "ray", on_ray={"guest-1": 1})  # Xᵀ[[d]], its obfuscators

    # Assert: the same weights at both parties, the same loss history.
    for name in ("host", "guest-1"):
        assert read_model(ray, name)["weights"] == read_model(pool, name)["weights"]
    assert read_summary(ray)["loss_history"] == read_summary(pool)["loss_history"]


def test_a_server_decrypting_on_ray_trains_the_pool_runs_model(tmp_path: Path) -> None:
    # Prepare: flipback every epoch, so the Server decrypts packed training and test scores
    # (vectors long enough to split) besides the gradients.
    job = memory_job(1, epochs=3, epsilon=1.0, flipback_every=1)
    calls: list[int] = []
    split = RayPool.run_split

    def counted(pool: RayPool, func: Any, blocks: Any, *, private: bool = False) -> list[int]:
        calls.append(len(blocks) if private else 0)
        return split(pool, func, blocks, private=private)

    # Act: the reference run decrypts in the Server's own process, as every party computes.
    pool = train(job, tmp_path / "pool", on_ray={})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RayPool, "run_split", counted)
        ray = train(job, tmp_path / "ray", on_ray={"server": 2})

    # Assert: the Server's decryptions went to its Ray workers; the same model and losses.
    assert any(blocks >= 2 for blocks in calls), calls
    for name in ("host", "guest-1"):
        assert read_model(ray, name)["weights"] == read_model(pool, name)["weights"]
    assert read_summary(ray)["loss_history"] == read_summary(pool)["loss_history"]


def test_secureboost_on_ray_equals_the_pool_run(tmp_path: Path) -> None:
    # Prepare: the guest's bin sums, divisions and packing split over 2 Ray workers; the
    # Host (key holder) on one, its obfuscators there by the public key alone.
    model = ModelConfig(kind="secureboost", trees=2, depth=2, bins=8)
    job = memory_job(1, timeout=60.0, model=model)

    # Act
    pool = train(job, tmp_path / "pool", on_ray={}, pooled=frozenset({"host", "guest-1"}))
    # the hidden-space guest opens a second pool for its own key (its candidate sets)
    ray = train(job, tmp_path / "ray", on_ray={"host": 1, "guest-1": 2}, pools=3)

    # Assert: the same trees, the same guest lookup table, the same metrics.
    for name in ("host", "guest-1"):
        assert read_model(ray, name) == read_model(pool, name)
    assert read_summary(ray)["auc"] == read_summary(pool)["auc"]
