"""The run-directory files every party writes: atomic JSON and appended JSON lines."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path

import pytest

from privfl.parties.files import append_jsonl, write_json


def test_write_json_is_indented_with_a_final_newline_and_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "summary.json"

    write_json(path, {"loss": 0.5, "inf": math.inf})

    text = path.read_text()
    assert text == '{\n  "loss": 0.5,\n  "inf": Infinity\n}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["summary.json"]


def test_compact_durable_json_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "epoch-00001.json"

    write_json(path, {"a": [1, 2]}, compact=True, durable=True)

    assert path.read_text() == '{"a": [1, 2]}'


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    write_json(path, {"v": 1})

    with pytest.raises(TypeError):
        write_json(path, {"v": object()}, durable=True)

    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["model.json"]


def test_append_jsonl_adds_one_line_per_record(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"

    append_jsonl(path, {"epoch": 0})
    append_jsonl(path, {"epoch": 1})

    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"epoch": 0}, {"epoch": 1}]
