"""The hidden-mode guest's prediction ledger: one session per model and row set by default."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import numpy as np
import pytest

from privfl.data.tables import IdTable
from privfl.errors import ConfigError
from privfl.parties.vertical.secureboost import sessions


def table(ids: list[str], x: list[list[float]]) -> IdTable:
    return IdTable(ids=tuple(ids), x=np.array(x), feature_names=("a", "b"))


def model_file(folder: Path, text: str = '{"trees": 2}') -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "model.json"
    path.write_text(text)
    return path


def test_a_second_session_over_the_same_rows_is_refused(tmp_path: Path) -> None:
    model = model_file(tmp_path)
    rows = sessions.rows_digest(table(["a", "b"], [[1, 2], [3, 4]]), by_id=True)
    sessions.admit(model, rows, 2, allow_repeat=False).close(70)

    with pytest.raises(ConfigError, match="--allow-repeat-prediction") as refused:
        sessions.admit(model, rows, 2, allow_repeat=False)

    assert "\n" not in str(refused.value)
    records = sessions.read(tmp_path / sessions.FILE_NAME)
    assert [r["answered"] for r in records] == [70]
    assert stat.S_IMODE((tmp_path / sessions.FILE_NAME).stat().st_mode) == 0o600


def test_a_repeat_given_explicitly_is_booked(tmp_path: Path) -> None:
    model = model_file(tmp_path)
    rows = sessions.rows_digest(table(["a"], [[1, 2]]), by_id=True)
    sessions.admit(model, rows, 1, allow_repeat=False).close(70)

    again = sessions.admit(model, rows, 1, allow_repeat=True)
    again.close(55)

    assert again.earlier == 1
    records = sessions.read(tmp_path / sessions.FILE_NAME)
    assert [(r["repeat"], r["answered"]) for r in records] == [(0, 70), (1, 55)]


def test_other_rows_or_another_model_are_new_sessions(tmp_path: Path) -> None:
    model = model_file(tmp_path)
    rows = sessions.rows_digest(table(["a", "b"], [[1, 2], [3, 4]]), by_id=True)
    sessions.admit(model, rows, 2, allow_repeat=False).close(70)

    fewer = sessions.rows_digest(table(["a"], [[1, 2]]), by_id=True)
    assert sessions.admit(model, fewer, 1, allow_repeat=False).earlier == 0
    model.write_text('{"trees": 3}')  # retrained in the same folder
    assert sessions.admit(model, rows, 2, allow_repeat=False).earlier == 0


def test_the_row_digest_is_of_the_set_by_id_and_of_the_values_by_position() -> None:
    one = table(["a", "b"], [[1, 2], [3, 4]])
    swapped = table(["b", "a"], [[3, 4], [1, 2]])
    renamed = table(["1", "2"], [[1, 2], [3, 4]])
    other = table(["1", "2"], [[1, 2], [3, 5]])

    assert sessions.rows_digest(one, by_id=True) == sessions.rows_digest(swapped, by_id=True)
    assert sessions.rows_digest(one, by_id=True) != sessions.rows_digest(renamed, by_id=True)
    # by position the ids are row numbers: the values say which rows these are
    assert sessions.rows_digest(one, by_id=False) == sessions.rows_digest(swapped, by_id=False)
    assert sessions.rows_digest(one, by_id=False) == sessions.rows_digest(renamed, by_id=False)
    assert sessions.rows_digest(one, by_id=False) != sessions.rows_digest(other, by_id=False)


def test_a_torn_last_record_is_dropped_a_damaged_one_refused(tmp_path: Path) -> None:
    path = tmp_path / sessions.FILE_NAME
    path.write_text(json.dumps({"model": "m", "rows": "r"}) + '\n{"model": "m", "ro')
    assert len(sessions.read(path)) == 1

    path.write_text('{"model": "m", "ro\n' + json.dumps({"model": "m", "rows": "r"}))
    with pytest.raises(ConfigError, match="restore it from your backup"):
        sessions.read(path)


def test_a_session_after_a_torn_record_leaves_a_readable_ledger(tmp_path: Path) -> None:
    model = model_file(tmp_path)
    path = tmp_path / sessions.FILE_NAME
    path.write_text('{"model": "m", "ro')

    sessions.admit(model, "r", 1, allow_repeat=False).close(3)

    assert [r["answered"] for r in sessions.read(path)] == [3]


def test_a_model_folder_it_cannot_write_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = model_file(tmp_path)

    def read_only(path: Path, text: str, *, durable: bool = False) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(sessions, "write_text", read_only)  # root writes anywhere

    with pytest.raises(ConfigError, match="make that folder writable") as refused:
        sessions.admit(model, "r", 1, allow_repeat=False)

    assert "\n" not in str(refused.value)
