"""The aggregation rules on known answers, and the settings they refuse."""

from __future__ import annotations

import pytest
import torch

from privfl.config.horizontal import HflConfig
from privfl.errors import ConfigError
from privfl.learning.robust import combine, trimmed_count
from privfl.mechanisms.randomize import clip_update

REPORTS = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0], [1000.0, -1e6]])


def test_each_rule_on_a_known_answer() -> None:
    assert combine(REPORTS, "mean").tolist() == pytest.approx([202.0, -199980.0])
    assert combine(REPORTS, "median").tolist() == [3.0, 20.0]
    # trim 0.2 of 5 drops one value at each end, per coordinate
    assert combine(REPORTS, "trimmed-mean", 0.2).tolist() == pytest.approx([3.0, 20.0])
    assert combine(REPORTS[:4], "median").tolist() == [2.5, 25.0]  # even: the middle two


def test_the_trim_leaves_at_least_one_report() -> None:
    assert (
        trimmed_count(20, 0.1) == 2 and trimmed_count(3, 0.49) == 1 and trimmed_count(1, 0.4) == 0
    )
    one = REPORTS[:1]
    assert combine(one, "trimmed-mean", 0.4).tolist() == one[0].tolist()


def test_group_means_are_trimmed_for_the_clients_behind_them() -> None:
    # 5 group means of 20 clients: 0.1 of 20 is 2 deviating clients, so 2 groups a side
    assert trimmed_count(5, 0.1, clients=20) == 2 and trimmed_count(5, 0.1) == 0
    assert trimmed_count(5, 0.4, clients=20) == 2  # never past the middle group
    assert combine(REPORTS, "trimmed-mean", 0.1, clients=20).tolist() == [3.0, 20.0]
    assert combine(REPORTS, "trimmed-mean", 0.1).tolist() == combine(REPORTS, "mean").tolist()


def test_the_update_clip_bounds_the_distance_to_the_model_sent() -> None:
    sent = torch.zeros(3)
    clipped = clip_update(torch.tensor([3.0, 4.0, 0.0]), sent, 1.0)
    assert float(clipped.norm()) == pytest.approx(1.0)
    near = torch.tensor([0.3, 0.4, 0.0])
    assert torch.equal(clip_update(near, sent, 1.0), near)  # inside: unchanged


def test_server_noise_needs_the_mean_and_bad_rules_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"server_noise .* aggregation = 'mean'"):
        HflConfig(mechanism="gaussian", server_noise=True)
    HflConfig(mechanism="gaussian", server_noise=True, aggregation="mean")
    with pytest.raises(ConfigError, match="aggregation must be one of"):
        HflConfig(aggregation="krum")
    with pytest.raises(ConfigError, match="trim_fraction"):
        HflConfig(trim_fraction=0.5)
