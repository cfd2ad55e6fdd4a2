"""A new user's first runs: docs/ untouched.

The references a run records are checked on the runs other modules make: a GLM's (and
the whole command's wall time) in test_cli.py, SecureBoost's in test_secureboost_cli.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from processes import privfl_here


def test_hfl_compare_writes_a_run_directory_not_docs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh clone's layout: docs/results-hfl.md holds the measured table.
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "results-hfl.md").write_text("measured\n")
    monkeypatch.chdir(tmp_path)  # the command runs in this process (it simulates in-process)
    result = privfl_here(
        "hfl", "compare", "--mechanisms", "pnpm", "--epsilons", "2", "--clients", "4",
        "--rounds", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (docs / "results-hfl.md").read_text() == "measured\n"
    [written] = (tmp_path / "runs").glob("*/results-hfl.md")
    assert "| pnpm | 2 | per weight | 4 |" in written.read_text()
    assert f"wrote {written.relative_to(tmp_path)}" in result.stderr
