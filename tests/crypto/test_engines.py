"""One suite over both engines: the pool's processes and a local Ray cluster's actors."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from privfl.crypto.engine import Engine
from privfl.crypto.paillier import (
    PrivateKey,
    PublicKey,
    decrypt_with_primes,
    generate_keypair,
    private_primes,
)
from privfl.crypto.pools import CHUNK, MATVEC_ROWS, NoisePool, decrypt_split, row_blocks
from privfl.errors import ConfigError
from privfl.parties.vertical.server import decryption_pool

# One worker starts the session's Ray cluster for every test that uses it (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("ray")

ENGINES = [Engine(), Engine("ray")]


Keys = tuple[PublicKey, PrivateKey]


@pytest.fixture(scope="module")
def keypair() -> Keys:
    return generate_keypair(512)


@pytest.fixture(params=ENGINES, ids=lambda e: e.kind)
def engine(request: pytest.FixtureRequest) -> Engine:
    if request.param.kind == "ray":
        request.getfixturevalue("ray_cluster")
    return request.param  # type: ignore[no-any-return]


def few(engine: Engine) -> int:
    """Two pool workers (one would run inline); one Ray worker: its two actors are remote,
    and each is a process to start."""
    return 2 if engine.kind == "pool" else 1


@pytest.fixture(scope="module", params=ENGINES, ids=lambda e: e.kind)
def pool(request: pytest.FixtureRequest, keypair: Keys) -> Iterator[NoisePool]:
    """One obfuscator pool per engine for the tests that need no other (its workers, Ray's
    actors above all, are processes to start); each test leaves it as it found it."""
    engine: Engine = request.param
    if engine.kind == "ray":
        request.getfixturevalue("ray_cluster")
    shared = engine.pool(keypair[0].n, few(engine))
    try:
        yield shared
    finally:
        shared.close()


def test_obfuscators_encrypt_correctly(pool: NoisePool, keypair: Keys) -> None:
    public, private = keypair
    pool.prefetch(CHUNK + 5)
    noise = pool.take(2 * CHUNK)
    assert len(set(noise)) == 2 * CHUNK
    plain = list(range(2 * CHUNK))
    assert private.decrypt(public.encrypt_with_noise(plain, noise)) == plain


def test_matvec_is_the_inline_result(pool: NoisePool, keypair: Keys) -> None:
    public, _ = keypair
    rng = np.random.default_rng(0)
    x = rng.integers(0, 1 << 20, size=(40, 5), dtype=np.int64)
    c = public.encrypt([int(v) for v in rng.integers(0, 1000, size=40)])
    assert pool.parallel  # remote workers, not the inline path
    assert pool.matvec_t(public, x, c) == public.matvec_t(x, c)


def test_matvec_in_many_row_slices_is_the_inline_result(pool: NoisePool, keypair: Keys) -> None:
    # Prepare: signed exponents, a column of zeros, and slices of 7 rows (6 slices).
    public, _ = keypair
    rng = np.random.default_rng(1)
    x = rng.integers(-(1 << 20), 1 << 20, size=(40, 4), dtype=np.int64)
    x[:, 2] = 0
    c = public.encrypt([int(v) for v in rng.integers(0, 1000, size=40)])
    pool.matvec_rows = 7

    # Act
    try:
        split = pool.matvec_t(public, x, c)
    finally:
        pool.matvec_rows = MATVEC_ROWS

    # Assert: the slices' partial products multiply to the one-pass ciphertexts exactly.
    assert split == public.matvec_t(x, c)


def test_row_slices_cover_every_row_once_within_the_bound() -> None:
    for rows, most in [(1, 10), (10, 3), (40, 7), (10_000, 65_536), (100_000, 65_536)]:
        blocks = row_blocks(rows, most)
        covered = [i for b in blocks for i in range(rows)[b]]
        assert covered == list(range(rows))
        assert all(0 < b.stop - b.start <= most for b in blocks)
        assert len(blocks) == -(-rows // most)


def test_split_decryptions_keep_their_order(engine: Engine, keypair: Keys) -> None:
    public, private = keypair
    p, q = private_primes(private)
    values = list(range(12))
    cts = public.encrypt(values)
    pool = engine.pool(public.n, few(engine), primes=(p, q))
    try:
        blocks = [(public.n, p, q, cts[i : i + 4]) for i in range(0, 12, 4)]
        assert pool.run_split(decrypt_with_primes, blocks, private=True) == values
    finally:
        pool.close()


def test_the_servers_decryption_pool_decrypts_in_order_and_never_obfuscates(
    engine: Engine, keypair: Keys
) -> None:
    # Prepare: the GLM Server's pool (no obfuscator workers), 2 workers.
    public, private = keypair
    values = list(range(40))
    cts = public.encrypt(values)
    pool = decryption_pool(engine, private, 2)
    assert pool is not None

    # Act
    try:
        plain = decrypt_split(private, pool, cts)
    finally:
        pool.close()

    # Assert: in order; no noise workers were started; one or no worker stays inline.
    assert plain == values
    assert decryption_pool(engine, private, 1) is None or engine.kind == "ray"
    assert getattr(pool, "_executor", None) is None and not getattr(pool, "_noise", [])


def test_ray_without_ray_or_with_pool_options_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigError, match="need --engine ray"):
        Engine("pool", address="auto")
    with pytest.raises(ConfigError, match="must be one of pool, ray"):
        Engine("spark")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'privfl\[ray\]'"):
        Engine("ray").pool(1 << 64 | 1, 1)


def test_private_blocks_run_in_this_machines_processes(
    ray_cluster: Any,
    keypair: Keys,
) -> None:
    public, private = keypair
    # Ray's workers cannot import this test module: _parent travels by value to them.
    ray_cluster.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    pool = Engine("ray").pool(public.n, 1, primes=private_primes(private))
    try:
        local = pool.run_split(_parent, [(), ()], private=True)
        remote = pool.run_split(_parent, [(), ()])
    finally:
        pool.close()
    assert local == [os.getpid(), os.getpid()]  # our own worker processes
    assert os.getpid() not in remote  # Ray's workers, children of its raylet


def _parent() -> list[int]:
    """Worker task: the worker's parent process."""
    return [os.getppid()]


class FakeRay:
    """What ``placements`` reads of a cluster: its nodes."""

    def __init__(self, cpus: dict[str, int], dead: tuple[str, ...] = ()) -> None:
        self._nodes = [
            {"NodeID": name, "Alive": name not in dead, "Resources": {"CPU": float(n)}}
            for name, n in cpus.items()
        ]

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes


def test_workers_are_dealt_round_the_live_nodes_by_their_cpus() -> None:
    from privfl.crypto.ray_pool import placements

    cluster = FakeRay({"a": 2, "b": 1, "c": 4}, dead=("c",))
    assert placements(cluster, 3) == ["a", "b", "a"]
    assert placements(cluster, 4) == ["a", "b", "a", "a"]
    with pytest.raises(ConfigError, match="no CPUs"):
        placements(FakeRay({"a": 0}), 2)
