"""The horizontal job file: round trips, party order, the fingerprint and helpful refusals."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from privfl.config.horizontal import (
    HflConfig,
    HflJob,
    HflParty,
    load_hfl_job,
    save_hfl_job,
    to_dict,
)
from privfl.errors import ConfigError


def _job(hosts: int = 3) -> HflJob:
    parties = {"aggregator": HflParty("aggregator", "aggregator", "tcp://127.0.0.1:6000")}
    for i in reversed(range(hosts)):  # file order differs from sorted order on purpose
        name = f"clients-{i + 1}"
        parties[name] = HflParty(name, "clients", "", 2 * i, 2)
    config = HflConfig(clients=2 * hosts, epsilon_budget=math.inf)
    return HflJob(session="s-1", config=config, parties=parties)


def test_a_saved_job_loads_back_with_its_fingerprint(tmp_path: Path) -> None:
    job = _job()

    save_hfl_job(job, tmp_path / "job.toml")
    loaded = load_hfl_job(tmp_path / "job.toml")

    assert loaded.config == job.config and loaded.parties == job.parties
    assert loaded.fingerprint() == job.fingerprint()
    assert loaded.keys_path() == tmp_path / "keys"


def test_names_follow_the_job_file_order(tmp_path: Path) -> None:
    job = _job(hosts=11)
    save_hfl_job(job, tmp_path / "job.toml")

    names = load_hfl_job(tmp_path / "job.toml").names("clients")

    assert names == [f"clients-{i}" for i in range(11, 0, -1)]
    assert job.names("aggregator") == ["aggregator"] and job.names("shuffler") == []


def test_the_fingerprint_is_sha256_of_the_canonical_job() -> None:
    job = _job()

    canonical = job.canonical()

    assert job.fingerprint() == hashlib.sha256(canonical).hexdigest()
    assert json.loads(canonical) == json.loads(json.dumps(to_dict(job)))
    assert b" " not in canonical and b'"epsilon_budget":"inf"' in canonical
    reordered = replace(job, parties=dict(reversed(list(job.parties.items()))))
    assert reordered.fingerprint() == job.fingerprint()  # keys are sorted


@pytest.mark.parametrize(
    "change",
    [
        lambda j: replace(j, session="s-2"),
        lambda j: replace(j, config=replace(j.config, rounds=11)),
        lambda j: replace(j, keys_dir="other-keys"),
        lambda j: replace(
            j, parties={**j.parties, "aggregator": replace(j.parties["aggregator"], endpoint="x")}
        ),
        lambda j: replace(
            j, parties={**j.parties, "clients-1": replace(j.parties["clients-1"], num_clients=3)}
        ),
        lambda j: replace(
            j, parties={**j.parties, "shuffler": HflParty("shuffler", "shuffler", "tcp://s:1")}
        ),
    ],
    ids=["session", "setting", "keys_dir", "endpoint", "client-range", "extra-party"],
)
def test_every_part_of_the_job_is_fingerprinted(change: object) -> None:
    job = _job()

    changed = change(job)  # type: ignore[operator]

    assert changed.fingerprint() != job.fingerprint()


def test_unknown_party_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"'nobody'.*aggregator, clients-1, clients-2"):
        _job().party("nobody")


def test_missing_or_broken_job_files_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"not found.*privfl hfl run-local"):
        load_hfl_job(tmp_path / "absent.toml")
    (tmp_path / "bad.toml").write_text("session = \n[[")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_hfl_job(tmp_path / "bad.toml")
    (tmp_path / "unknown.toml").write_text('session = "s"\n[hfl]\nnope = 1\n')
    with pytest.raises(ConfigError, match=r"unknown key hfl\.nope"):
        load_hfl_job(tmp_path / "unknown.toml")
