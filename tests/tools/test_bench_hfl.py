"""`privfl bench hfl --quick` end to end: every row measured, ratios in the same run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from privfl.tools.bench.hfl import HflBench, bench_config


def test_bench_hfl_quick_prints_both_trainers(tmp_path: Path) -> None:
    report = tmp_path / "hfl.json"
    result = subprocess.run(
        [sys.executable, "-m", "privfl", "bench", "hfl", "--quick", "--json", str(report)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = json.loads(report.read_text())["rows"]
    devices = {"cpu", "cuda"} if torch.cuda.is_available() else {"cpu"}
    assert {(r["clients"], r["trainer"], r["device"]) for r in rows} == {
        (c, t, d) for c in (4, 40) for t in ("sequential", "batched") for d in devices
    }
    assert all(r["seconds_per_round"] > 0 and 0 <= r["accuracy"] <= 1 for r in rows)
    assert "×seq-cpu" in result.stdout and "batched" in result.stdout


def test_bench_rounds_beyond_the_rows_sample_a_population() -> None:
    config = bench_config(HflBench(), 10_000, "batched", "cpu")
    assert config.clients == 1_000_000 and config.client_rows == 8 and config.batched
    assert round(config.fraction * config.clients) == 10_000
    assert bench_config(HflBench(), 20, "sequential", "cpu").clients == 20


def test_bench_hfl_refuses_a_malformed_client_list() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "privfl", "bench", "hfl", "--clients", "20,lots"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--clients takes whole numbers" in result.stderr
