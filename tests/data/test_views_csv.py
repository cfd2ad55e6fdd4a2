"""`read_csv` parses a table block by block: the same floats as one pass, the same refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privfl.data import views
from privfl.data.views import read_csv
from privfl.errors import ConfigError


def test_blocks_give_the_floats_of_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: 23 rows in blocks of 5 (the last block short), written as repr floats.
    monkeypatch.setattr(views, "CSV_BLOCK_ROWS", 5)
    x = np.random.default_rng(0).normal(size=(23, 3))
    y = np.arange(23) % 2
    rows = zip(x.tolist(), y.tolist(), strict=True)
    lines = ["a,b,c,y", *(",".join([*map(repr, row), str(v)]) for row, v in rows)]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")

    # Act
    table = read_csv(path, "y")

    # Assert: exactly the values written, in order; labels apart.
    assert np.array_equal(table.x, x)
    assert table.y is not None and table.y.tolist() == y.tolist()
    assert table.feature_names == ("a", "b", "c")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a,b\n1,2\n3\n", "every row needs 2 finite numbers"),
        ("a,b\n1,2\n1,x\n", "non-numeric value"),
        ("a,b\n1,nan\n", "every row needs 2 finite numbers"),
        ("a,b\n", "needs a header row and at least one data row"),
        ("", "needs a header row and at least one data row"),
    ],
)
def test_a_bad_table_is_refused_in_any_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, said: str
) -> None:
    monkeypatch.setattr(views, "CSV_BLOCK_ROWS", 1)
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=said):
        read_csv(path, None)
