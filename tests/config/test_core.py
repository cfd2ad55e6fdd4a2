"""What both job files share (config/core.py): ±∞ in the canonical encoding, TOML in and out."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from privfl.config.core import canonical, fingerprint, finite, read_toml, write_toml
from privfl.errors import ConfigError


def test_finite_replaces_every_infinity_at_any_depth() -> None:
    value = {"a": math.inf, "b": [1.5, -math.inf, {"c": (math.inf,)}], "d": "inf", "e": 0}

    assert finite(value) == {"a": "inf", "b": [1.5, "-inf", {"c": ["inf"]}], "d": "inf", "e": 0}


def test_canonical_is_rfc8785_and_refuses_what_it_cannot_encode() -> None:
    assert canonical({"b": 120.0, "a": [1e-6, math.inf]}) == b'{"a":[0.000001,"inf"],"b":120}'
    assert fingerprint(b"") == ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    with pytest.raises(ConfigError, match="cannot be fingerprinted"):
        canonical({"n": 2**60})


def test_toml_round_trips_and_a_missing_file_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "new" / "job.toml"

    write_toml({"session": "x", "parties": {"a": {"role": "r"}}}, path)

    assert read_toml(path, "") == {"session": "x", "parties": {"a": {"role": "r"}}}
    with pytest.raises(ConfigError, match=r"job file .*absent.toml not found; make one"):
        read_toml(tmp_path / "absent.toml", "make one")
