"""The secure-aggregation settings: what they combine with, and where they run."""

from __future__ import annotations

import pytest

from privfl.config.horizontal import HflConfig, check_networked, config_from_dict
from privfl.errors import ConfigError


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"secure_aggregation": True, "mechanism": "pnpm"}, "set mechanism = 'none'"),
        ({"secure_aggregation": True, "shuffler": True}, "shuffler = false"),
        ({"secure_aggregation": True, "update_clip": float("inf")}, "must be finite"),
        ({"ddp_noise": -1.0}, "ddp_noise must be >= 0"),
    ],
)
def test_impossible_combinations_are_one_line_errors(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        config_from_dict(settings)
    assert "\n" not in str(caught.value)


def test_the_networked_roles_refuse_only_the_bound_check_with_a_way_out() -> None:
    check_networked(HflConfig())  # the default runs anywhere
    check_networked(HflConfig(secure_aggregation=True, update_clip=1.0))  # SecAgg+: v5
    with pytest.raises(ConfigError, match="set secagg_bounds = false") as caught:
        check_networked(HflConfig(secure_aggregation=True, secagg_bounds=True, update_clip=1.0))
    assert "\n" not in str(caught.value)
