"""SecAgg+: the unmasked sum is the survivors' plaintext sum, dropouts and all."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from privfl.learning import secagg
from privfl.learning.secure_round import random_groups
from privfl.mechanisms import skellam
from privfl.mechanisms.noise import private_source


def _inputs(n: int, dims: int, seed: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i: rng.integers(-(2**20), 2**20, dims) for i in range(n)}


@pytest.mark.parametrize(("n", "dropped"), [(2, ()), (5, (3,)), (40, (0, 7, 8, 9, 30))])
def test_the_unmasked_sum_is_the_survivors_plaintext_sum(n: int, dropped: tuple[int, ...]) -> None:
    inputs = _inputs(n, 64)
    total, alive = secagg.run_round(inputs, b"test", dropped)
    assert alive == sorted(set(inputs) - set(dropped))
    assert np.array_equal(total, sum(inputs[i] for i in alive))


def test_a_masked_input_alone_looks_nothing_like_the_input() -> None:
    inputs = {i: np.zeros(4096, dtype=np.int64) for i in range(6)}
    clients = {i: secagg.ClientState(i, b"ctx", 4096) for i in inputs}
    server = secagg.ServerState(b"ctx", 4096)
    keys = secagg.plan_graph(server, [secagg.advertise(c) for c in clients.values()])
    sealed = [
        m for i, c in clients.items() for m in secagg.share_keys(c, keys[i], server.threshold)
    ]
    inbox = secagg.route_shares(server, sealed)
    y = secagg.masked_input(clients[0], inbox[0], inputs[0])
    # a zero input masked by uniform words: about one in 2^32 words is zero, so 4096
    # words hold more than 3 zeros with probability below 1e-9
    assert int((y == 0).sum()) <= 3


def test_the_graph_is_sparse_and_the_threshold_a_majority() -> None:
    assert secagg.neighbour_count(1000) == 20 and secagg.neighbour_count(10_000) == 28
    assert secagg.neighbour_count(3) == 2 and secagg.neighbour_count(2) == 1
    graph = secagg.ring_neighbours(list(range(1000)), 20)
    assert all(len(near) == 20 and i not in near for i, near in graph.items())
    assert all(i in graph[j] for i, near in graph.items() for j in near)  # symmetric
    assert secagg.threshold_for(20) == 11


def test_stages_out_of_order_and_tampered_shares_are_refused() -> None:
    a, b, c = (secagg.ClientState(i, b"ctx", 8) for i in range(3))
    with pytest.raises(secagg.SecAggAborted, match="out of order"):
        secagg.unmask(a, [0])
    server = secagg.ServerState(b"ctx", 8)
    keys = secagg.plan_graph(server, [secagg.advertise(x) for x in (a, b, c)])
    sealed = secagg.share_keys(b, keys[1], server.threshold)
    to_a = next(m for m in sealed if m.receiver == 0)
    bad = dataclasses.replace(
        to_a, ciphertext=bytes([to_a.ciphertext[0] ^ 1]) + to_a.ciphertext[1:]
    )
    secagg.share_keys(a, keys[0], server.threshold)
    with pytest.raises(secagg.SecAggAborted, match="fail to open"):
        secagg.masked_input(a, [bad], np.zeros(8, dtype=np.int64))


def test_too_many_dropouts_abort_instead_of_revealing() -> None:
    with pytest.raises(secagg.SecAggAborted, match="shares needed"):
        secagg.run_round(_inputs(8, 4), b"ctx", dropped=range(1, 8))


def test_seeds_and_keys_are_full_width() -> None:
    state = secagg.ClientState(0, b"ctx", 4)
    assert len(state.seed) * 8 >= 128 and len(state.s_key.secret) == 32


def test_random_groups_cover_the_clients_once() -> None:
    groups = random_groups(list(range(22)), 4)
    assert sorted(c for g in groups for c in g) == list(range(22))
    assert sorted(len(g) for g in groups) == [4, 4, 4, 5, 5]
    assert random_groups(list(range(3)), 0) == [[0, 1, 2]]


def test_a_thousand_clients_with_a_tenth_dropping_sum_to_plaintext_plus_the_noise() -> None:
    # prepare: quantized updates of norm ≤ B and each client's Skellam share, kept apart
    n, dims, bound = 1000, 32, 1.0
    source = private_source(exact=False)
    rng = np.random.default_rng(7)
    updates = rng.normal(size=(n, dims))
    updates *= bound / np.linalg.norm(updates, axis=1, keepdims=True)
    quantized = {i: skellam.quantize(updates[i], bound, source) for i in range(n)}
    variance = skellam.client_variance(1.0, dims, n)
    noise = {i: skellam.skellam(dims, variance, source) for i in range(n)}
    dropped = set(range(0, n, 10))
    # The ring order is fixed: with the OS CSPRNG's, a survivor has 10 or more of its 20
    # neighbours among the 100 dropped (fewer than its threshold of 11 left to rebuild its
    # seed, so the round aborts) with probability 5.2e-6 each, 0.46 % a round
    # (hypergeometric; docs/performance.md). This order gives every survivor enough.
    order = random.Random(1)
    # act
    total, alive = secagg.run_round(
        {i: quantized[i] + noise[i] for i in range(n)}, b"k", dropped, rng=order
    )
    # assert: exact in the quantized domain
    assert len(alive) == 900 and not dropped & set(alive)
    plain = sum(quantized[i] for i in alive)
    assert np.array_equal(total, plain + sum(noise[i] for i in alive))
    # the noise is the intended size: 900 shares of variance (z·Δ₂)²/1000 each; the
    # sample variance of 32 draws lies within 3× of it except with probability < 1e-6
    spread = float(np.var(total - plain)) / (900 * variance)
    assert 1 / 3 < spread < 3


def test_the_key_derivation_is_sp_800_56c_one_step() -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.concatkdf import ConcatKDFHash

    for secret in (b"\x07" * 32, b"\x09" * secagg.SEED_BYTES):
        purpose, context = b"pair mask", b"session|round 3"
        reference = ConcatKDFHash(hashes.SHA256(), 32, otherinfo=purpose + b"|" + context)
        assert secagg.derive(secret, purpose, context) == reference.derive(secret)
    # the purpose and the context both change the key
    assert secagg.derive(b"\x07" * 32, b"self mask", b"c") != secagg.derive(
        b"\x07" * 32, b"pair mask", b"c"
    )
    assert secagg.derive(b"\x07" * 32, b"pair mask", b"c") != secagg.derive(
        b"\x07" * 32, b"pair mask", b"d"
    )


def test_a_noisy_secure_run_books_its_distributed_epsilon() -> None:
    from privfl.config.horizontal import HflConfig
    from privfl.mechanisms.accountants import rdp_to_epsilon
    from privfl.runs.simulate import run_experiment

    config = HflConfig(
        clients=8, rounds=2, local_epochs=1, secure_aggregation=True, ddp_noise=1.0
    )  # two groups of 4: each client is in one group sum per round
    summary = run_experiment(config)
    # two releases at exactly z = 1 (a group of 4 sums four shares of (z·Δ₂)²/4)
    gaussian = rdp_to_epsilon([2 * a / 2 for a in skellam.ORDERS], skellam.ORDERS, 1e-5)[0]
    assert summary["epsilon_distributed"] == pytest.approx(gaussian, rel=0.01)
    assert "other members" in summary["epsilon_distributed_assumptions"]
    assert f"central ε = {gaussian:.3g} per client" in summary["privacy"]
    assert summary["refused_history"] == [0, 0]  # noisy group means pass the noise-aware screen


def test_a_short_or_low_order_public_key_is_refused_with_a_clear_error() -> None:
    with pytest.raises(secagg.SecAggAborted, match="must be 32 bytes"):
        secagg.Advertise(1, bytes(31), bytes(32))
    a = secagg.ClientState(0, b"ctx", 8)
    secagg.advertise(a)
    zero = secagg.Advertise(1, bytes(32), bytes(32))  # u = 0: every agreement gives zeros
    with pytest.raises(secagg.SecAggAborted, match="client 1's public key is of low order"):
        secagg.share_keys(a, [zero], 1)


def test_the_key_pairs_and_agreement_are_x25519_of_rfc_7748() -> None:
    # RFC 7748 §6.1: Alice's key pair, Bob's public key and their shared secret K
    alice = bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    alice_public = "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
    bob = bytes.fromhex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
    shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
    assert secagg.KeyPair.of(alice).public.hex() == alice_public
    assert secagg.agree(alice, bob, 1).hex() == shared
    fresh = secagg.KeyPair.fresh()
    assert (
        secagg.KeyPair.of(fresh.secret) == fresh and fresh.secret != secagg.KeyPair.fresh().secret
    )


def test_shares_that_rebuild_no_secret_abort() -> None:
    server = secagg.ServerState(b"ctx", 4, threshold=2)
    # two shares of a line through 2^200 at x = 0: no 16-byte seed
    with pytest.raises(secagg.SecAggAborted, match="rebuild no 16-byte secret"):
        secagg._rebuild(server, [(1, 2**200 + 1), (2, 2**200 + 2)], 3, secagg.SEED_BYTES)


def test_a_mask_stream_is_aes_256_ctr_from_a_zero_counter() -> None:
    # known answer: cryptography's public Cipher path over zeros, and the fallback the
    # module takes where its direct context constructor is missing
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    key = bytes(range(32))
    reference = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(4 * 37))
    streams = secagg.Keystreams(37)
    assert streams(key).tobytes() == reference
    assert secagg.prg(bytes(32), 37).tobytes() != reference  # another key, another stream
    fallback = secagg._cipher_ctx(algorithms.AES(key), modes.CTR(bytes(16)))
    assert fallback.update(bytes(4 * 37)) == reference
