"""A curious aggregator attacks one client's masked input under SecAgg+.

Two attacks an aggregator can run with what it legitimately receives:

- **Inconsistent views.** It tells half of the target's neighbours "the target
  survived" (they return shares of its self-mask seed ``b``) and the other half "the
  target dropped" (shares of its mask key ``s``), hoping to rebuild both and strip
  every mask from the target's input. The threshold is a strict majority of the
  neighbours, so one of the two halves is always short. Leaky arm: a threshold of half
  the neighbours lets the same attack read the input exactly.
- **Small seed space.** It claims the target dropped to everyone (after receiving its
  masked input), rebuilds ``s``, strips the pairwise masks and brute-forces the self-mask
  seed. With 128-bit seeds the search is hopeless; the leaky arm shrinks the seed to 12
  bits and the same search reads the input.
"""

from __future__ import annotations

import numpy as np
import pytest

from privfl.crypto import shamir
from privfl.learning import secagg

N, DIMS, TARGET = 12, 64, 0
HONEST_STATE = secagg.ClientState


def _round_to_stage_three(
    inputs: dict[int, np.ndarray],
) -> tuple[dict[int, secagg.ClientState], secagg.ServerState]:
    clients = {i: secagg.ClientState(i, b"attack", DIMS) for i in inputs}
    server = secagg.ServerState(b"attack", DIMS)
    keys = secagg.plan_graph(server, [secagg.advertise(c) for c in clients.values()])
    sealed = [
        m for i, c in clients.items() for m in secagg.share_keys(c, keys[i], server.threshold)
    ]
    inbox = secagg.route_shares(server, sealed)
    for i, c in clients.items():
        server.masked[i] = secagg.masked_input(c, inbox[i], inputs[i])
    return clients, server


def _inputs() -> dict[int, np.ndarray]:
    rng = np.random.default_rng(5)
    return {i: rng.integers(-1000, 1000, DIMS) for i in range(N)}


def _strip_pairs(server: secagg.ServerState, key: int) -> np.ndarray:
    """The target's masked input without its pairwise masks, given its mask key."""
    y = server.masked[TARGET]
    private = key.to_bytes(secagg.KEY_BYTES, "big")
    for j in server.graph[TARGET]:
        secret = secagg.agree(private, server.adverts[j].s_public, j)
        ctx = secagg.pair_context(server.context, TARGET, j)
        mask = secagg.prg(secagg.derive(secret, b"pair mask", ctx), DIMS)
        y = y - mask if j > TARGET else y + mask
    return y


def _strip_self(server: secagg.ServerState, y: np.ndarray, seed: int) -> np.ndarray:
    raw = seed.to_bytes(secagg.SEED_BYTES, "big")
    return secagg.signed(y - secagg.self_mask(raw, server.context, DIMS))


def _split_view_attack() -> tuple[np.ndarray, np.ndarray]:
    """Run the inconsistent-views attack; returns (what it reads, the true input)."""
    inputs = _inputs()
    clients, server = _round_to_stage_three(inputs)
    near = list(server.graph[TARGET])
    everyone = set(inputs)
    seed_shares, key_shares = [], []
    for pos, j in enumerate(near):
        told = everyone if pos % 2 == 0 else everyone - {TARGET}
        reply = secagg.unmask(clients[j], told)
        if TARGET in reply.seed_shares:
            seed_shares.append((j + 1, reply.seed_shares[TARGET]))
        else:
            key_shares.append((j + 1, reply.key_shares[TARGET]))
    seed = shamir.combine(seed_shares) % 2 ** (8 * secagg.SEED_BYTES)
    key = shamir.combine(key_shares) % 2**256
    return _strip_self(server, _strip_pairs(server, key), seed), inputs[TARGET]


def test_split_views_never_give_both_secrets() -> None:
    read, truth = _split_view_attack()
    assert not np.array_equal(read, truth)
    # what it reads is mask noise: nowhere near the input's ±1000 range
    assert np.abs(read).max() > 2**20


def test_leaky_arm_a_half_threshold_lets_split_views_read_the_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(secagg, "threshold_for", lambda k: k // 2)
    read, truth = _split_view_attack()
    assert np.array_equal(read, truth)


def _small_seed_attack(tries: int) -> tuple[np.ndarray | None, np.ndarray]:
    """Claim the target dropped to all, rebuild its key, brute-force ``tries`` seeds."""
    inputs = _inputs()
    clients, server = _round_to_stage_three(inputs)
    others = set(inputs) - {TARGET}
    replies = [secagg.unmask(clients[j], others) for j in server.graph[TARGET]]
    key_shares = [(r.client + 1, r.key_shares[TARGET]) for r in replies]
    unpaired = _strip_pairs(server, shamir.combine(key_shares[: server.threshold]))
    for guess in range(tries):
        read = _strip_self(server, unpaired, guess)
        if np.abs(read).max() < 2**16:  # an input looks small; masks look uniform
            return read, inputs[TARGET]
    return None, inputs[TARGET]


def test_a_128_bit_seed_defeats_the_brute_force() -> None:
    assert secagg.SEED_BYTES * 8 >= 128
    read, _ = _small_seed_attack(tries=2**12)
    assert read is None  # P(any wrong guess looks small) ≤ 4096·2^-960


def test_leaky_arm_a_12_bit_seed_falls_to_the_same_search(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secagg, "ClientState", _weak_seed_state)
    read, truth = _small_seed_attack(tries=2**12)
    assert read is not None and np.array_equal(read, truth)


def _weak_seed_state(me: int, context: bytes, dims: int) -> secagg.ClientState:
    """A client whose self-mask seed has only 12 bits of entropy (leading bytes zero)."""
    weak = int(np.random.default_rng().integers(0, 2**12)).to_bytes(secagg.SEED_BYTES, "big")
    return HONEST_STATE(me, context, dims, seed=weak)
