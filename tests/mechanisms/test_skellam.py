"""Skellam distributed DP: the noise it draws, the sum it makes, the ε it books."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privfl.mechanisms import skellam, skellam_table
from privfl.mechanisms.accountants import rdp_gaussian_epsilon, rdp_to_epsilon
from privfl.mechanisms.noise import private_source


def test_shares_sum_to_the_target_variance() -> None:
    # 50 clients each add variance v/50; the sum's sample variance over 20,000
    # coordinates is within 6 % of v (its relative sd is 1 %: 6 sd, two-sided 2e-9),
    # and its mean within 6 sd of 0 (2e-9): 4e-9 for the test, where 5 sd each was 1.1e-6
    source = private_source(exact=False)
    target = 1e6
    total = sum(skellam.skellam(20_000, target / 50, source) for _ in range(50))
    assert abs(float(np.var(total)) / target - 1) < 0.06
    assert total.dtype == np.int64 and abs(float(total.mean())) < 6 * math.sqrt(target / 20_000)


def test_quantization_is_unbiased_and_keeps_the_l2_bound() -> None:
    source = private_source(exact=False)
    update = np.full(1000, 1 / math.sqrt(1000)) * 0.999  # norm 0.999 < B = 1
    draws = np.stack([skellam.quantize(update, 1.0, source) for _ in range(200)])
    assert np.all(np.linalg.norm(draws, axis=1) <= skellam.l2_sensitivity(1000))
    step = skellam.grid_step(1.0)
    # each coordinate is floor or ceil of x/step; the mean over 200,000 roundings is
    # within 0.01 steps of x/step (sd 0.0011 steps: 9 sd)
    assert abs(float(draws.mean()) - update[0] / step) < 0.01


def test_skellam_rdp_is_above_the_gaussian_and_tends_to_it() -> None:
    dims = 19_466
    for z in (0.5, 1.0, 4.0):
        variance = (z * skellam.l2_sensitivity(dims)) ** 2
        for order in (2, 8, 32):
            gaussian = order / (2 * z**2)
            rdp = skellam.skellam_rdp(variance, dims, order)
            assert gaussian <= rdp <= gaussian * 1.001


def test_the_accountant_books_what_the_gaussian_would_for_large_variance() -> None:
    # prepare: 10 releases at z = 1 for client 0, 5 for client 1
    dims = 1000
    accountant = skellam.SkellamAccountant(dims, delta=1e-5)
    variance = skellam.l2_sensitivity(dims) ** 2
    for round_ in range(10):
        accountant.book([0, 1] if round_ < 5 else [0], variance)
    # assert: the worst client is client 0, within 1 % of the Gaussian mechanism's ε at
    # the same (integer) orders, and above the Gaussian's at every order
    gaussian = rdp_to_epsilon([10 * a / 2 for a in skellam.ORDERS], skellam.ORDERS, 1e-5)[0]
    assert accountant.epsilon() == pytest.approx(gaussian, rel=0.01)
    assert accountant.epsilon() >= rdp_gaussian_epsilon(1.0, 1.0, 10, 1e-5)
    assert accountant.epsilon(1) < accountant.epsilon(0) == accountant.epsilon()


def test_no_noise_books_infinity_and_no_release_books_nothing() -> None:
    accountant = skellam.SkellamAccountant(10, delta=1e-5)
    assert accountant.epsilon() == 0.0
    accountant.book([3], 0.0)
    assert math.isinf(accountant.epsilon())


def test_the_booked_delta_adds_the_samplers_distance() -> None:
    # prepare: two releases at z = 1 to a group of 1,000 drawing from the table (the
    # bench's shares), one more to client 7 alone, one without a distance to client 5,000
    dims, group = 19_210, 1000
    share = skellam.client_variance(1.0, dims, group)
    per_share = skellam.share_distance(share, dims)
    accountant = skellam.SkellamAccountant(dims, delta=1e-5)
    for _ in range(2):
        accountant.book(range(group), group * share, group * per_share)
    accountant.book([7], group * share, group * per_share)
    accountant.book([5000], group * share)
    # assert: the distance is the table's bound times the coordinates (about 2e-11 a
    # share), booked per client as δ + (1 + e^ε)·η over its releases; 0 for a wide share
    assert per_share == dims * skellam_table.distance(share)
    assert 1e-13 < per_share < 1e-9
    eps_0, eps_7 = accountant.epsilon(0), accountant.epsilon(7)
    assert accountant.delta_booked(0) == pytest.approx(
        1e-5 + (1 + math.exp(eps_0)) * 2 * group * per_share, rel=1e-12
    )
    assert accountant.delta_booked(5000) == 1e-5
    assert accountant.delta_booked() == accountant.delta_booked(7) > accountant.delta_booked(0)
    assert eps_7 > eps_0
    assert skellam.share_distance(skellam.client_variance(1.0, dims, 4), dims) == 0.0


def test_a_secure_round_books_its_members_distance() -> None:
    # one group of 40 clients at z = 0.5 (shares of σ ≈ 5,200: from the table)
    import torch

    from privfl.config.horizontal import HflConfig
    from privfl.learning import fedavg as engine
    from privfl.learning.models import get_flat
    from privfl.learning.secure_round import RoundInput, secure_round

    config = HflConfig(
        clients=40, mechanism="none", secure_aggregation=True, secagg_group=0, ddp_noise=0.5
    )
    setup = engine.make_setup(config)
    weights = get_flat(setup.model)
    reports = [weights + 1e-4 * torch.randn_like(weights) for _ in range(40)]
    accountant = skellam.SkellamAccountant(setup.dims, delta=1e-5)
    parts = RoundInput(setup, list(range(40)), reports, weights, 1, private_source(False))
    secure_round(parts, accountant)
    share = skellam.client_variance(0.5, setup.dims, 40)
    eta = 40 * setup.dims * skellam_table.distance(share)
    assert accountant.delta_booked() == pytest.approx(
        1e-5 + (1 + math.exp(accountant.epsilon())) * eta, rel=1e-12
    )
    assert accountant.delta_booked() > 1e-5
