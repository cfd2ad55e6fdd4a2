"""A new user's first runs: references recorded, whole-command wall time, docs/ untouched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from processes import WEAK, privfl

from privfl.data.views import central_baseline


def test_run_local_records_the_centralised_reference(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = privfl("vfl", "run-local", *WEAK, "--epochs", "3", "--out", str(out), "--no-progress",
                    timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    [reference] = summary["references"]
    assert reference["name"] == "sklearn LogisticRegression"
    assert reference["metric"] == "accuracy"
    assert reference["value"] == central_baseline("breast_cancer", 0.25, 0)
    assert "centralised sklearn LR (reference)" in result.stdout
    # The whole command, not only the Host's loop: start-up and key generation count.
    assert summary["wall_seconds"] > summary["host_wall_seconds"]
    assert (out / "host" / "training.png").stat().st_size > 0


@pytest.mark.slow
def test_secureboost_run_local_prints_and_records_boosters(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = privfl(
        "vfl", "run-local", *WEAK, "--model", "secureboost", "--trees", "2", "--depth", "2",
        "--out", str(out), "--no-progress", timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    names = [r["name"] for r in summary["references"]]
    assert names[0] == "sklearn HistGradientBoosting"
    assert all(r["metric"] == "auc" and 0.5 < r["value"] <= 1.0 for r in summary["references"])
    assert "centralised sklearn HistGradientBoosting AUC (reference)" in result.stdout
    host = json.loads((out / "host" / "summary.json").read_text())
    guest_columns = host["importance_by_gain"].get("guest-1", {})
    assert all(not name.startswith("local column") for name in guest_columns)


def test_hfl_compare_writes_a_run_directory_not_docs(tmp_path: Path) -> None:
    # A fresh clone's layout: docs/results-hfl.md holds the measured table.
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "results-hfl.md").write_text("measured\n")
    result = subprocess.run(
        [sys.executable, "-m", "privfl", "hfl", "compare", "--mechanisms", "pnpm",
         "--epsilons", "2", "--clients", "4", "--rounds", "1"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (docs / "results-hfl.md").read_text() == "measured\n"
    [written] = (tmp_path / "runs").glob("*/results-hfl.md")
    assert "| pnpm | 2 | per weight | 4 |" in written.read_text()
    assert f"wrote {written.relative_to(tmp_path)}" in result.stderr
