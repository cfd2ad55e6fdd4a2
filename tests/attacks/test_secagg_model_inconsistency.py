"""An aggregator sends one client host the real model and the others a crafted one.

The model inconsistency attack on secure aggregation (Pasquini, Francati and Ateniese,
CCS 2022): secure aggregation reveals only a group's sum, but the aggregator chooses
the model each host trains. It sends the target's host the real global model and every
other host of the group a model whose updates it knows — all-zero weights: an MLP's
hidden layer then stays dead, and local training moves only the output bias. The
group's sum is then the target's update on every other coordinate, exactly. Measured
with the real trainer (digits, the default MLP, update bound 4.75, ``ddp_noise`` 0, the
default): the sum of the target and three clients trained from zeros equals the
target's clipped, quantized update on 19,200 of 19,210 weights.

With a Shuffler the hosts' round digests already stop this (``test_hfl_tagging.py``).
Under SecAgg+ the hosts now agree on the same digest (v7: the "models" part of the view
tags, ``secure_view.py``) before they unmask: every host refuses the unmask stage, in
one line naming the other host, and the aggregator gets no sum. Leaky arm: the view
without the models part (v6) — the round unmasks and the sum less what the aggregator
knows is the target's input.

Four honest client hosts run their real loop over the in-memory transport; the
aggregator runs the honest stages (``secure_collect``). One group (``secagg_group`` 0);
the target's host runs client 0 alone. Inputs as the crafted model makes them: zero
for the crafted hosts' clients but the last coordinate (the output bias).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from secagg_harness import DIMS, ROUND, inputs_of, job_of, network

from privfl.parties.horizontal import secure_view
from privfl.parties.horizontal.secure_aggregator import secure_collect

SIZES = [1, 2, 2, 2]  # client 0 alone on clients-1
REAL, CRAFTED = b"digest of the real round_start", b"digest of an all-zero model's"


def _round(caplog: pytest.LogCaptureFixture) -> tuple[list[tuple[list[int], np.ndarray]], dict]:
    job = job_of(SIZES)
    inputs = inputs_of(job)
    for client in range(1, job.config.clients):  # trained from zeros: only the bias moved
        inputs[client] = np.zeros(DIMS, dtype=inputs[client].dtype)
        inputs[client][-1] = 5 - client
    with caplog.at_level(logging.ERROR), network(job) as net:
        for name in job.names("clients"):
            net.host(name, inputs, model=REAL if name == "clients-1" else CRAFTED)
        sums, _ = secure_collect(job, net.aggregator, net.asked(), ROUND, DIMS)
    assert not net.errors
    return sums, inputs


def test_hosts_given_different_models_refuse_to_unmask(caplog: pytest.LogCaptureFixture) -> None:
    sums, _ = _round(caplog)
    assert sums == []  # nothing unmasked
    refusals = [r.getMessage() for r in caplog.records if "aborted" in r.getMessage()]
    assert len(refusals) == 4  # every host
    assert all("was shown other models than we were" in line for line in refusals), refusals


def test_leaky_arm_without_the_models_part_the_sum_is_the_targets_input(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    digests = secure_view.View.digests
    monkeypatch.setattr(
        secure_view.View, "digests", lambda view: (*digests(view)[:3], bytes(32))
    )  # v6: the view has no models part
    sums, inputs = _round(caplog)
    [(members, total)] = sums
    assert members == list(range(7))
    assert np.array_equal(total[:-1], inputs[0][:-1])  # every coordinate but the bias
