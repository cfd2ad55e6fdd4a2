"""Tests for the job file: save/load round trips, fingerprints and helpful refusals."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from privfl.config.vertical import (
    LOCAL_JOB_KEYS,
    DataConfig,
    JobConfig,
    LabelDPConfig,
    PartySpec,
    TrainingConfig,
    canonical_job,
    from_dict,
    load_job,
    save_job,
    to_dict,
    with_overrides,
)
from privfl.errors import ConfigError

JOB_TOML = """\
session = "demo-1"
key_bits = 2048

[training]
epochs = 5

[label_dp]
epsilon = 2.0

[parties.server]
role = "server"
endpoint = "tcp://127.0.0.1:5550"

[parties.host]
role = "host"
endpoint = "tcp://127.0.0.1:5551"

[parties.guest1]
role = "guest"
endpoint = "tcp://127.0.0.1:5552"
columns = [0, 1, 2]
"""


def _parties(*roles: str) -> dict[str, PartySpec]:
    """Parties named after their roles (guest1, guest2 … for repeats)."""
    parties: dict[str, PartySpec] = {}
    for i, role in enumerate(roles):
        name = role if role not in parties else f"{role}{i}"
        parties[name] = PartySpec(name, role, f"tcp://127.0.0.1:{5550 + i}", (i,))
    return parties


def _job(**overrides: Any) -> JobConfig:
    fields: dict[str, Any] = {
        "session": "demo-1",
        "parties": _parties("server", "host", "guest", "guest"),
        "training": TrainingConfig(epochs=7, learning_rate=0.25, batch_size=64),
        "label_dp": LabelDPConfig(epsilon=1.5, flipback_every=3, flipback_fraction=0.05),
        "data": DataConfig(dataset="breast_cancer", test_size=0.3, split_seed=11),
    }
    return JobConfig(**{**fields, **overrides})


def _load_text(tmp_path: Path, text: str) -> JobConfig:
    path = tmp_path / "job.toml"
    path.write_text(text)
    return load_job(path)


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("epsilon", [1.5, math.inf, 0.0])
def test_save_load_round_trip(tmp_path: Path, epsilon: float) -> None:
    # Prepare
    job = _job(
        label_dp=LabelDPConfig(epsilon=epsilon, flipback_every=0),
        key_bits=512,
        allow_weak_keys=True,
        timeout_seconds=2.5,
        seed=99,
        keys_dir="my-keys",
    )
    path = tmp_path / "sub" / "job.toml"

    # Act
    save_job(job, path)
    loaded = load_job(path)

    # Assert: equal except for where it was read from.
    assert replace(loaded, source=None) == job
    assert loaded.source == path.resolve()
    assert loaded.keys_path() == path.resolve().parent / "my-keys"
    assert loaded.label_dp.epsilon == epsilon
    assert loaded.guests == ["guest", "guest3"]
    assert loaded.party("guest3").columns == (3,)


def test_infinite_epsilon_is_written_as_toml_inf(tmp_path: Path) -> None:
    # Act
    save_job(_job(label_dp=LabelDPConfig(epsilon=math.inf)), tmp_path / "job.toml")

    # Assert
    assert "epsilon = inf" in (tmp_path / "job.toml").read_text()


def test_hand_written_job_file_loads(tmp_path: Path) -> None:
    # Act
    job = _load_text(tmp_path, JOB_TOML)

    # Assert: given values are read, the others default.
    assert (job.session, job.server, job.host, job.guests) == (
        "demo-1",
        "server",
        "host",
        ["guest1"],
    )
    assert job.training.epochs == 5 and job.training.learning_rate == 0.3
    assert job.label_dp.epsilon == 2.0
    assert job.party("guest1") == PartySpec("guest1", "guest", "tcp://127.0.0.1:5552", (0, 1, 2))


# ---------------------------------------------------------------- fingerprints


def test_equal_jobs_have_equal_fingerprints() -> None:
    # Prepare: built separately, and one of them with a source path.
    first, second = _job(), replace(_job(), source=Path("/somewhere/job.toml"))

    # Act
    a, b = first.fingerprint(), second.fingerprint()

    # Assert
    assert a == b
    assert len(a) == 64 and int(a, 16) >= 0


@pytest.mark.parametrize(
    "change",
    [
        {"epochs": 8},
        {"learning_rate": 0.26},
        {"lr_decay": 0.0},
        {"l2": 0.0},
        {"batch_size": 32},
        {"tolerance": 1e-7},
        {"divergence_factor": 3.0},
        {"score_noise": 1.0},
    ],
    ids=lambda change: next(iter(change)),
)
def test_training_changes_change_the_fingerprint(change: dict[str, Any]) -> None:
    # Prepare
    job = _job()

    # Act
    changed = with_overrides(job, **change)

    # Assert
    assert changed.fingerprint() != job.fingerprint()


def test_score_noise_is_in_the_job_only_when_set() -> None:
    # Prepare
    job = _job()

    # Act
    off = with_overrides(job, score_noise=0.0)
    on = with_overrides(job, score_noise=0.5)

    # Assert: an unset key leaves older fingerprints as they were; a set one is agreed.
    assert "score_noise" not in to_dict(off)["training"] and off.fingerprint() == job.fingerprint()
    assert to_dict(on)["training"]["score_noise"] == 0.5
    assert from_dict(to_dict(on)).training.score_noise == 0.5


@pytest.mark.parametrize("sigma", [-0.1, math.inf, math.nan])
def test_score_noise_must_be_finite_and_not_negative(sigma: float) -> None:
    with pytest.raises(ConfigError, match=r"training\.score_noise"):
        _job(training=TrainingConfig(score_noise=sigma))


def test_other_agreed_fields_change_the_fingerprint() -> None:
    # Prepare
    job = _job()

    # Act
    variants = [
        replace(job, session="demo-2"),
        replace(job, label_dp=LabelDPConfig(epsilon=math.inf)),
        replace(job, data=DataConfig(split_seed=12)),
        replace(job, parties=_parties("server", "host", "guest")),
    ]

    # Assert
    assert len({v.fingerprint() for v in variants} | {job.fingerprint()}) == 5


# ---------------------------------------------------------------- refusals


def test_weak_keys_need_the_flag() -> None:
    # Act / assert
    with pytest.raises(ConfigError, match="--allow-weak-keys"):
        _job(key_bits=1024)
    assert _job(key_bits=1024, allow_weak_keys=True).key_bits == 1024


def test_tiny_keys_are_refused_even_when_weak_keys_are_allowed() -> None:
    # Act / assert
    with pytest.raises(ConfigError, match="256"):
        _job(key_bits=128, allow_weak_keys=True)


@pytest.mark.parametrize(
    "roles",
    [("host", "guest"), ("server", "server", "host", "guest"), ("server", "host")],
    ids=["no-server", "two-servers", "no-guest"],
)
def test_wrong_role_counts_are_refused(roles: tuple[str, ...]) -> None:
    # Act / assert
    with pytest.raises(ConfigError, match="exactly one server, one host and at least one guest"):
        _job(parties=_parties(*roles))


def test_unknown_role_is_refused_with_the_known_roles() -> None:
    # Act / assert
    with pytest.raises(ConfigError, match=r"'auditor'.*server, host, guest"):
        _job(parties=_parties("server", "host", "guest", "auditor"))


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ({"training": TrainingConfig(epochs=0)}, "epochs >= 1"),
        ({"training": TrainingConfig(learning_rate=0.0)}, "learning_rate > 0"),
        ({"label_dp": LabelDPConfig(epsilon=-1.0)}, "epsilon"),
        ({"label_dp": LabelDPConfig(epsilon=math.nan)}, "epsilon"),
        ({"label_dp": LabelDPConfig(flipback_fraction=1.5)}, "flipback_fraction"),
        ({"data": DataConfig(test_size=1.0)}, "test_size"),
        ({"timeout_seconds": 0.0}, "timeout_seconds"),
    ],
    ids=["epochs", "lr", "eps-negative", "eps-nan", "fraction", "test-size", "timeout"],
)
def test_out_of_range_values_are_refused(section: dict[str, Any], match: str) -> None:
    # Act / assert
    with pytest.raises(ConfigError, match=match):
        _job(**section)


def test_unknown_key_in_a_section_is_refused(tmp_path: Path) -> None:
    # Prepare
    text = JOB_TOML.replace("epochs = 5", "epochz = 3")

    # Act / assert: the message names the typo and the file.
    with pytest.raises(ConfigError, match="epochz") as caught:
        _load_text(tmp_path, text)
    assert "job.toml" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("colour = 'blue'\n" + JOB_TOML, "colour"),
        (JOB_TOML.replace('session = "demo-1"\n', ""), "session"),
        (JOB_TOML.replace('endpoint = "tcp://127.0.0.1:5550"\n', ""), "endpoint"),
        ("parties = 3\n" + JOB_TOML.split("[training]")[0].replace("[parties", ""), "must be a"),
        (JOB_TOML.replace("epochs = 5", 'epochs = "five"'), r"training\.epochs must be an integer"),
        (JOB_TOML.replace("epsilon = 2.0", "epsilon = nan"), "epsilon"),
    ],
    ids=["unknown-top-level", "no-session", "no-endpoint", "parties-int", "epochs-str", "eps-nan"],
)
def test_malformed_job_files_are_refused(tmp_path: Path, text: str, match: str) -> None:
    # Act / assert
    with pytest.raises(ConfigError, match=match):
        _load_text(tmp_path, text)


def test_missing_job_file_says_how_to_create_one(tmp_path: Path) -> None:
    # Act / assert
    with pytest.raises(ConfigError, match=r"not found.*privfl init"):
        load_job(tmp_path / "absent.toml")


def test_invalid_toml_is_refused(tmp_path: Path) -> None:
    # Act / assert
    with pytest.raises(ConfigError, match="not valid TOML"):
        _load_text(tmp_path, "session = \n[[")


@pytest.mark.parametrize("kind", ["binary", "directory"])
def test_unreadable_job_file_is_refused(tmp_path: Path, kind: str) -> None:
    # Prepare: bytes that are not UTF-8, or a folder where the file should be.
    path = tmp_path / "job.toml"
    if kind == "binary":
        path.write_bytes(b"\xff\xfe\x00session")
    else:
        path.mkdir()

    # Act / assert
    with pytest.raises(ConfigError, match="cannot read job file"):
        load_job(path)


def test_unknown_party_lists_the_known_ones() -> None:
    # Prepare
    job = _job()

    # Act / assert
    with pytest.raises(ConfigError, match=r"'nobody'.*guest, guest3, host, server"):
        job.party("nobody")


def test_to_dict_from_dict_round_trip() -> None:
    # Prepare
    job = _job(label_dp=LabelDPConfig(epsilon=math.inf))

    # Act
    again = from_dict(to_dict(job))

    # Assert
    assert again == job


def test_the_liveness_grace_is_each_sites_own_and_bounded(tmp_path: Path) -> None:
    # Prepare
    job = _job()
    patient = replace(job, liveness_grace_seconds=9.0)
    path = tmp_path / "job.toml"

    # Act
    save_job(patient, path)
    loaded = load_job(path)

    # Assert: kept in the file, left out of the fingerprint, refused out of range.
    assert job.liveness_grace_seconds == 3.0 and loaded.liveness_grace_seconds == 9.0
    assert patient.fingerprint() == job.fingerprint()
    for bad in (0.0, -1.0, 61.0):
        with pytest.raises(ConfigError, match="liveness_grace_seconds"):
            replace(job, liveness_grace_seconds=bad)


def test_every_site_local_top_level_key_is_left_out_of_the_fingerprint() -> None:
    # Prepare: each site's own patience, memory and way to the relay; a shared setting
    from privfl.config.relay import RelayConfig

    job = _job()
    relay = RelayConfig(endpoint="tcp://relay.example.org:443", socks_proxy="proxy:1080")
    local = replace(
        job, timeout_seconds=900.0, liveness_grace_seconds=7.0, max_buffered_mib=64, relay=relay
    )
    shared = replace(job, seed=99)

    # Act
    canonical = json.loads(canonical_job(local))

    # Assert
    assert local.fingerprint() == job.fingerprint()
    assert shared.fingerprint() != job.fingerprint()
    assert not set(LOCAL_JOB_KEYS) & set(canonical)
    assert set(LOCAL_JOB_KEYS) <= set(to_dict(local))  # kept in the site's own file


def test_model_table_defaults_keep_the_fingerprint_and_bad_kinds_are_refused() -> None:
    from privfl.config.vertical import ModelConfig, from_dict, to_dict

    base = to_dict(_job(key_bits=512, allow_weak_keys=True))
    job = from_dict(dict(base))
    assert job.model == ModelConfig() and "model" not in to_dict(job)
    boosted = from_dict({**base, "model": {"kind": "secureboost", "trees": 5}})
    assert boosted.model.trees == 5 and boosted.fingerprint() != job.fingerprint()
    with pytest.raises(ConfigError, match=r"model\.kind"):
        from_dict({**base, "model": {"kind": "forest"}})
    with pytest.raises(ConfigError, match="subsample"):
        from_dict({**base, "model": {"kind": "secureboost", "subsample": 0}})


def test_a_secureboost_job_hides_the_instance_space_unless_it_asks_to_share_it() -> None:
    from privfl.config.vertical import from_dict, to_dict

    base = to_dict(_job(key_bits=512, allow_weak_keys=True))
    default = from_dict({**base, "model": {"kind": "secureboost"}})
    hidden = from_dict({**base, "model": {"kind": "secureboost", "instance_space": "hidden"}})
    shared = from_dict({**base, "model": {"kind": "secureboost", "instance_space": "shared"}})
    assert (
        default.model.instance_space == "hidden" and default.fingerprint() == hidden.fingerprint()
    )
    # Always written for trees: a job file that leaves it out meant "shared" before, so its
    # fingerprint must not let an older party run it in the other mode.
    assert to_dict(default)["model"]["instance_space"] == "hidden"
    assert to_dict(shared)["model"]["instance_space"] == "shared"
    assert hidden.fingerprint() != shared.fingerprint()
    assert from_dict(to_dict(shared)).model == shared.model
    assert from_dict(to_dict(hidden)).model == hidden.model
    # A GLM's [model] does not carry it: its fingerprint is the one it always had.
    multiclass = from_dict({**base, "model": {"kind": "multiclass", "classes": 3}})
    assert "instance_space" not in to_dict(multiclass)["model"]
    with pytest.raises(ConfigError, match="instance_space must be one of shared, hidden"):
        from_dict({**base, "model": {"kind": "secureboost", "instance_space": "secret"}})


def test_a_secureboost_job_takes_its_own_label_epsilon_and_min_child_weight() -> None:
    from privfl.config.vertical import from_dict, kind_tables, switch_kind, to_dict

    base = to_dict(_job(key_bits=512, allow_weak_keys=True))
    del base["label_dp"]["epsilon"]
    glm = from_dict({**base, "model": {"kind": "multiclass", "classes": 3}})
    boost = from_dict({**base, "model": {"kind": "secureboost"}})
    logistic = from_dict(base)
    assert logistic.label_dp.epsilon == 1.5  # docs/results.md, "The GLMs' default label ε"
    assert glm.label_dp.epsilon == 3.0 and glm.model.min_child_weight == 1.0
    bounded = from_dict({**base, "model": {"kind": "linear", "label_high": 350.0}})
    assert bounded.label_dp.epsilon == 8.0  # regression's Laplace ε, once bounds are given
    assert boost.label_dp.epsilon == 2.0 and boost.model.min_child_weight == 4.0
    # Both are in the canonical job, so the fingerprint says the values used.
    assert to_dict(boost)["label_dp"]["epsilon"] == 2.0
    assert to_dict(boost)["model"]["min_child_weight"] == 4.0
    assert from_dict(to_dict(boost)).fingerprint() == boost.fingerprint()
    # A job file that says ε = 8 (an older init's) keeps it.
    older = from_dict(
        {
            **base,
            "label_dp": {"epsilon": 8.0},
            "model": {"kind": "secureboost", "min_child_weight": 1.0},
        }
    )
    assert older.label_dp.epsilon == 8.0 and older.model.min_child_weight == 1.0
    # Switching a job's kind takes the new kind's defaults, keeps what the file chose.
    assert switch_kind(glm, "secureboost").label_dp.epsilon == 2.0
    assert (
        switch_kind(
            replace(glm, label_dp=replace(glm.label_dp, epsilon=1.0)), "secureboost"
        ).label_dp.epsilon
        == 1.0
    )
    assert switch_kind(boost, "logistic").label_dp.epsilon == 1.5
    assert kind_tables(logistic, "multiclass")["label_dp"].epsilon == 3.0


@pytest.mark.parametrize("kind", ["linear", "poisson"])
def test_regression_without_label_dp_must_be_the_job_files_choice(kind: str) -> None:
    from privfl.config.vertical import from_dict, to_dict

    # Prepare: a job file that leaves the label ε out, and one per way out.
    base = to_dict(_job(key_bits=512, allow_weak_keys=True))
    parties = {"server": base["parties"]["server"], "host": base["parties"]["host"]}
    base["parties"] = {**parties, "guest": base["parties"]["guest"]}  # Poisson: one guest
    del base["label_dp"]["epsilon"]
    model = {"kind": kind}

    # Act / Assert: left out, it is refused in one line naming both ways out and the read.
    with pytest.raises(ConfigError) as refused:
        from_dict({**base, "model": model}, source=Path("job.toml"))
    said = str(refused.value)
    assert "\n" not in said and said.startswith(f"job file job.toml: {kind} regression needs")
    assert "model.label_low < model.label_high (--label-low/--label-high)" in said
    assert "label_dp.epsilon = inf (--label-epsilon inf)" in said
    assert "a deviating guest reads" in said
    off = from_dict({**base, "model": model, "label_dp": {**base["label_dp"], "epsilon": "inf"}})
    on = from_dict({**base, "model": {**model, "label_low": 0.0, "label_high": 15.0}})

    # Assert: an explicit inf is in the canonical job, so every party agrees on it.
    assert math.isinf(off.label_dp.epsilon) and on.label_dp.epsilon == 8.0
    assert b'"epsilon":"inf"' in off.canonical()
    assert from_dict(to_dict(off)).fingerprint() == off.fingerprint() != on.fingerprint()
