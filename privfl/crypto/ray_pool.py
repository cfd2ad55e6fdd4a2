"""The :class:`NoisePool` interface on a Ray cluster: one actor per worker holding the key.

Each actor gets the modulus (and the DJN generator) once, when it starts; a task then
carries only its size, or its block of columns. A list every block of a call shares
(the ciphertexts of one slice of ``Xᵀ[[d]]``, of a histogram) is put in the object
store once and fetched once per node. The key holder's primes reach the actors only with
``private_on_cluster`` (the operator's ``--ray-private-key``); otherwise its CRT work
(decryptions) runs in processes on this machine and its obfuscators are computed
without the primes (the same distribution, ``r^n mod n²``, at the public-key cost).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from privfl.crypto.paillier import obfuscators, obfuscators_crt
from privfl.crypto.pools import BACKGROUND_NICE, CHUNK, NoisePool, _spawn_pool
from privfl.errors import ConfigError


def _ray() -> Any:
    """The ``ray`` module, or a ConfigError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            "--engine ray needs Ray: pip install 'privfl[ray]' on every machine of the cluster"
        ) from exc
    return ray


class Worker:
    """A Ray actor: one worker process of the party, holding its public key."""

    def __init__(self, n: int, h_s: int, primes: tuple[int, int] | None, nice: int) -> None:
        if nice:
            os.nice(nice)  # background noise yields to the work a peer waits for
        self.n, self.h_s, self.primes = n, h_s, primes

    def noise(self, size: int) -> list[int]:
        """``size`` obfuscators from this worker's own CSPRNG (``secrets``)."""
        if self.primes is not None:
            return obfuscators_crt(self.n, *self.primes, size)
        return obfuscators(self.n, size, self.h_s)

    def call(self, func: Callable[..., list[int]], *args: object) -> list[int]:
        """One block of a split computation (``func`` is a module-level function)."""
        return func(*args)


def connect(address: str | None) -> Any:
    """Ray, connected to ``address`` (None: a cluster of this machine alone) once per process."""
    ray = _ray()
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(
                f"cannot reach the Ray cluster at {address!r}: start it (`ray start --head`) "
                f"or fix --ray-address ({exc})"
            ) from exc
    return ray


def placements(ray: Any, count: int) -> list[str]:
    """``count`` node ids, dealt round the cluster's live nodes in proportion to their CPUs.

    In the two-node test (tests/e2e/test_ray_two_nodes.py) Ray's SPREAD strategy put
    every actor that asks for no CPU on one node; a party adds nodes to use them, so
    its workers are placed explicitly.
    """
    slots = [
        node["NodeID"]
        for node in ray.nodes()
        if node["Alive"]
        for _ in range(int(node["Resources"].get("CPU", 0)))
    ]
    if not slots:
        raise ConfigError("the Ray cluster has no CPUs: start its nodes with --num-cpus")
    # Node by node would fill the first node before the next; interleave them instead.
    order = sorted(range(len(slots)), key=lambda i: (slots[: i + 1].count(slots[i]), i))
    return [slots[order[i % len(slots)]] for i in range(count)]


class RayPool(NoisePool):
    """Obfuscators and split computations on a Ray cluster's workers (see module doc)."""

    # A Ray task costs more than a pipe message: with 32 DJN obfuscations per task
    # (about 5 ms at 1024 bits) Ray added 28 % CPU at 10,000 rows (docs/performance.md).
    chunk = 4 * CHUNK

    def __init__(
        self,
        n: int,
        workers: int = 0,
        h_s: int = 0,
        nice: int = BACKGROUND_NICE,
        primes: tuple[int, int] | None = None,
        *,
        address: str | None = None,
        private_on_cluster: bool = False,
        noise: bool = True,
    ) -> None:
        self._ray = connect(address)
        cluster = int(self._ray.cluster_resources().get("CPU", 1))
        super().__init__(n, 1, h_s, nice, primes)  # no local processes: the fields only
        self.workers = workers or cluster
        self.private_on_cluster = private_on_cluster
        shared = primes if private_on_cluster else None
        if primes is not None and shared is None:
            self.primes = None  # obfuscators by the public key on the cluster
        self._key_primes = primes
        self._local: ProcessPoolExecutor | None = None  # the key holder's private blocks
        # num_cpus=0: as with the pool, the OS shares the cores between noise and
        # compute; each worker is pinned to a node, in proportion to the nodes' CPUs.
        places = placements(self._ray, self.workers)
        self._noise = [self._actor(p).remote(n, h_s, shared, nice) for p in places if noise]
        self._busy = [self._actor(p).remote(n, h_s, shared, 0) for p in places]
        self._next_noise = itertools.cycle(self._noise)

    def _actor(self, node: str) -> Any:
        """The worker actor class, pinned to ``node``.

        Pinned hard: with soft affinity Ray put both workers on the head in 3 of 6 runs of
        the two-node test while the other node was alive (a cluster used as one machine,
        silently). A node lost mid-run now ends the run with Ray's error; a resumed run
        places its workers on the nodes alive then (:func:`placements`).
        """
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        where = NodeAffinitySchedulingStrategy(node, soft=False)
        return self._ray.remote(num_cpus=0, scheduling_strategy=where)(Worker)

    @property
    def parallel(self) -> bool:
        return bool(self._busy)

    def _submit_noise(self, size: int) -> Future[list[int]]:
        future: Future[list[int]] = next(self._next_noise).noise.remote(size).future()
        return future

    def _run_blocks(
        self, func: Callable[..., list[int]], blocks: Sequence[tuple[object, ...]]
    ) -> list[int]:
        refs = [
            self._busy[i % len(self._busy)].call.remote(func, *block)
            for i, block in enumerate(self._shared_once(blocks))
        ]
        return [value for block in self._ray.get(refs) for value in block]

    def _shared_once(self, blocks: Sequence[tuple[object, ...]]) -> list[tuple[object, ...]]:
        """The blocks with every list they all share replaced by one object-store copy."""
        first = blocks[0]
        refs = {
            i: self._ray.put(arg)
            for i, arg in enumerate(first)
            if isinstance(arg, list) and all(block[i] is arg for block in blocks[1:])
        }
        return [tuple(refs.get(i, arg) for i, arg in enumerate(block)) for block in blocks]

    def run_split(
        self,
        func: Callable[..., list[int]],
        blocks: Sequence[tuple[object, ...]],
        *,
        private: bool = False,
    ) -> list[int]:
        """As :meth:`NoisePool.run_split`; ``private`` blocks stay in processes on this
        machine unless the operator put the key on the cluster."""
        if private and not self.private_on_cluster:
            if self._local is None:
                self._local = _spawn_pool(os.cpu_count() or 1, 0)
            futures = [self._local.submit(func, *block) for block in blocks]
            return [value for future in futures for value in future.result()]
        return super().run_split(func, blocks)

    def close(self) -> None:
        """Stop the actors and any local processes (pending work is dropped)."""
        for actor in [*self._noise, *self._busy]:
            self._ray.kill(actor)
        self._noise, self._busy = [], []
        if self._local is not None:
            self._local.shutdown(wait=True, cancel_futures=True)
            self._local = None
        super().close()
