"""Id-keyed CSV input: one-line refusals, the missing-value policy, the split agreed by id."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privfl.data.tables import (
    IdTable,
    held_out_mask,
    read_id_csv,
    split_and_standardise,
)
from privfl.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "site.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("id,a,y\n1,2,0\n", ["no column 'b'", "id, a, y"]),
        ("id,a,b,y\n1,2,x,0\n", ["column 'b'", "non-numeric value 'x'", "line 2"]),
        ("id,a,b,y\n1,2,3,0\n2,2,3,1\n1,5,5,0\n", ["1 duplicate id", "line 4"]),
        ("id,a,b,y\n,2,3,0\n", ["empty id", "line 2"]),
        ("id,a,b,y\n1,2,3,2\n", ["must hold 0 or 1"]),
        ("id,a,b,y\n1,2,3,\n", ["label is missing on line 2"]),
    ],
)
def test_bad_files_are_refused_with_one_clear_line(
    tmp_path: Path, text: str, fragments: list[str]
) -> None:
    path = write(tmp_path, text)

    with pytest.raises(ConfigError) as caught:
        read_id_csv(path, "id", "y", ["a", "b"])

    message = str(caught.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_ids_are_text_and_features_default_to_every_other_column(tmp_path: Path) -> None:
    path = write(tmp_path, "id,a,y,b\n007,1.5,1,2\n 8 ,NA,0,3\n")

    table = read_id_csv(path, "id", "y")

    assert table.ids == ("007", "8")  # leading zeros kept, spaces stripped
    assert table.feature_names == ("a", "b")
    assert np.isnan(table.x[1, 0]) and table.x[0, 0] == 1.5
    assert table.y is not None and table.y.tolist() == [1, 0]


def test_missing_values_become_the_training_mean() -> None:
    ids = tuple(f"id-{i}" for i in range(200))
    x = np.arange(400, dtype=np.float64).reshape(200, 2)
    x[5, 0] = np.nan
    x[150, 1] = np.nan
    table = IdTable(ids=ids, x=x, feature_names=("a", "b"), y=np.arange(200) % 2)

    data = split_and_standardise(table, 0.25, 0)

    test = held_out_mask(ids, 0.25, 0)
    observed = x[~test][:, 0]
    assert data.mean[0] == pytest.approx(np.nanmean(observed))
    assert np.isfinite(data.x_train).all() and np.isfinite(data.x_test).all()
    row = int(np.flatnonzero(~test).tolist().index(5)) if not test[5] else None
    if row is not None:
        assert data.x_train[row, 0] == 0.0
    assert data.x_train.mean(axis=0) == pytest.approx([0.0, 0.0], abs=0.05)


def test_the_split_depends_on_the_id_only() -> None:
    ids = [f"patient-{i}" for i in range(4000)]
    shuffled = list(reversed(ids))

    mask = held_out_mask(ids, 0.25, 3)
    again = dict(zip(shuffled, held_out_mask(shuffled, 0.25, 3), strict=True))

    assert [again[i] for i in ids] == mask.tolist()  # row order does not matter
    assert abs(mask.mean() - 0.25) < 0.03  # binomial sd ≈ 0.007
    assert held_out_mask(ids, 0.25, 4).tolist() != mask.tolist()  # the seed matters


def test_a_column_empty_in_the_training_rows_is_refused() -> None:
    ids = tuple(str(i) for i in range(50))
    x = np.full((50, 1), np.nan)
    table = IdTable(ids=ids, x=x, feature_names=("empty",))

    with pytest.raises(ConfigError, match="'empty' has no value"):
        split_and_standardise(table, 0.25, 0)


def test_site_keys_in_the_job_file_are_local_and_resolve_next_to_it(tmp_path: Path) -> None:
    from dataclasses import replace

    from privfl.config.vertical import PartySpec, load_job, save_job
    from privfl.data.tables import site_data
    from privfl.runs.kits import demo_job

    job = demo_job(key_bits=512, allow_weak_keys=True)
    host = replace(job.party("host"), data="cohort.csv", id_column="mrn", features=("a", "b"))
    mine = replace(job, parties={**job.parties, "host": host})
    path = tmp_path / "site" / "job.toml"
    save_job(mine, path)

    loaded = load_job(path)
    site = site_data(loaded, "host")

    assert site.path == tmp_path / "site" / "cohort.csv"
    assert (site.id_column, site.label_column, site.features) == ("mrn", "label", ("a", "b"))
    assert loaded.fingerprint() == job.fingerprint()  # local keys do not change the job
    override = site_data(loaded, "host", tmp_path / "x.csv", "id", "y", ["c"])
    assert (override.path, override.id_column, override.features) == (
        tmp_path / "x.csv",
        "id",
        ("c",),
    )
    assert isinstance(loaded.party("guest-1"), PartySpec)
    with pytest.raises(ConfigError, match="only the host holds a label"):
        site_data(loaded, "guest-1", label_column="y")
