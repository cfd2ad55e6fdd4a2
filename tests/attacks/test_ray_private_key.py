"""A node of a party's Ray cluster never receives the key holder's primes unless the
operator puts them there (``--ray-private-key``).

The attacker is a curious node of the SecureBoost Host's Ray cluster: it reads every
argument its actors are given, at their start and in every task. The test replaces the
actor class by one that records every integer it receives (the same work, plus the
record), runs the Host's real obfuscator prefetch and its real histogram decryptions
(``decrypt_split``), and asks each actor whether it ever held ``p`` or ``q``. With the
default setting no actor did; with the opt-in (the leaky arm) the primes reach them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import pytest

from privfl.crypto import ray_pool
from privfl.crypto.engine import Engine
from privfl.crypto.paillier import generate_keypair, private_primes
from privfl.parties.vertical.secureboost.host import decrypt_split

# One worker starts the session's Ray cluster for every test that uses it (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("ray")


def _ints(values: Iterable[object]) -> set[int]:
    """Every integer among ``values`` and inside the lists and tuples among them."""
    found: set[int] = set()
    for value in values:
        if isinstance(value, int):
            found.add(value)
        elif isinstance(value, list | tuple):
            found |= _ints(value)
    return found


class CuriousWorker(ray_pool.Worker):
    """The real worker, plus a record of every integer it was handed."""

    def __init__(self, n: int, h_s: int, primes: tuple[int, int] | None, nice: int) -> None:
        super().__init__(n, h_s, primes, nice)
        self.seen = _ints([n, h_s, primes])

    def call(self, func: Any, *args: object) -> list[int]:
        self.seen |= _ints(args)
        return super().call(func, *args)

    def held(self, secrets: list[int]) -> bool:
        return bool(self.seen & set(secrets))


@pytest.mark.parametrize("opted_in", [False, True], ids=["default", "leaky-opt-in"])
def test_cluster_nodes_never_hold_the_primes_by_default(
    ray_cluster: Any, monkeypatch: pytest.MonkeyPatch, opted_in: bool
) -> None:
    # Prepare: the Host's key; the curious actors in place of the real ones.
    ray_cluster.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(ray_pool, "Worker", CuriousWorker)
    public, private = generate_keypair(512)
    primes = private_primes(private)
    values = list(range(40))
    ciphertexts = public.encrypt(values)
    pool = Engine("ray", private_on_cluster=opted_in).pool(public.n, 2, primes=primes)

    # Act: the Host's background obfuscators and its split decryptions, as in a tree.
    try:
        pool.prefetch(64)
        noise = pool.take(64)
        plain = decrypt_split(private, pool, ciphertexts)
        actors = [*pool._noise, *pool._busy]
        held = ray_cluster.get([actor.held.remote(list(primes)) for actor in actors])
    finally:
        pool.close()

    # Assert: the work is right either way; the primes reached a node only when opted in.
    assert plain == values
    assert private.decrypt(public.encrypt_with_noise([5] * 64, noise)) == [5] * 64
    assert any(held) is opted_in
