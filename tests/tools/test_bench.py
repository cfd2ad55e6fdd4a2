"""`privfl bench vfl` end to end with tiny keys (measures, never times), and the DJN option."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from privfl.crypto.packing import slots
from privfl.errors import ConfigError
from privfl.runs.kits import demo_job
from privfl.tools.bench.report import protocol_counts
from privfl.tools.bench.workload import synthetic


def privfl(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "privfl", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_bench_smoke_reports_every_variant_and_party(tmp_path: Path) -> None:
    # Act: the smallest meaningful bench (256-bit keys need no flag: it deploys nothing).
    report_file = tmp_path / "bench.json"
    result = privfl(
        "bench", "vfl", "--key-bits", "256", "--dataset", "synthetic", "--rows", "60",
        "--features", "5", "--epochs", "2", "--naive-rows", "20", "--cores", "2",
        "--json", str(report_file), "--out", str(tmp_path / "runs"),
    )  # fmt: skip

    # Assert: every variant has every stage; both real runs trained and were measured.
    assert result.returncode == 0, result.stderr
    report = json.loads(report_file.read_text())
    data = report["datasets"]["synthetic_60x5"]
    variants = {v["variant"]: v for v in data["stages"]}
    assert {"naive phe", "privfl standard", "privfl djn"} <= set(variants)
    for v in variants.values():
        assert set(v["stages"]) == {"encrypt", "residual", "gradient", "decrypt", "evaluate"}
        assert v["epoch"] > 0 and v["ratio_to_naive"] > 0
    assert variants["naive phe"]["extrapolated"]  # 20 of 60 rows measured
    runs = {r["obfuscation"]: r for r in data["runs"]}
    assert set(runs) == {"standard", "djn"}
    for run in runs.values():
        assert len(run["epoch_seconds"]) == 2
        # 60 rows, 2 epochs from the Host's private (CSPRNG) start: a measured run, not a
        # trained model; its accuracy on a dozen held-out rows may be anything.
        assert 0.0 <= run["accuracy"] <= 1.0
        assert set(run["per_party"]) == {"server", "host", "guest-1"}
        assert all(0 < m["party"] <= m["with_workers"] for m in run["per_party"].values())
    assert set(report["obfuscations_per_second"]) == {"1", "2"}
    assert data["floor_seconds"]["djn"] < data["floor_seconds"]["standard"]
    assert "privfl standard" in result.stdout and "floor on 2 cores" in result.stdout
    assert "standard epoch / floor" in result.stdout
    assert data["protocol_counts"]["per_party"]["host"] > 60  # the residual, re-randomised
    relayed = data["relayed"]  # the same job, every party behind a relay process
    assert len(relayed["epoch_seconds"]) == 2 and 0.5 <= relayed["accuracy"] <= 1.0
    assert relayed["ratio_to_direct"] > 0 and "behind the relay" in result.stdout


def test_protocol_counts_follow_packing() -> None:
    # 2048-bit keys pack 21 values per plaintext; 60 + 40 synthetic features, 1 guest.
    workload = synthetic(100, 10)
    n = (1 << 2047) + 1
    assert slots(n) == 21
    counts = protocol_counts(workload, n)
    test_rows = workload.test_rows
    test = -(-test_rows // 21)
    # Guest: scores, Σz², gradient, test scores. Host: the residual's re-randomisation,
    # gradient, loss, the masked test-score sum.
    assert counts["per_party"] == {"guest": 100 + 1 + 1 + test, "host": 100 + 1 + 1 + test}
    assert counts["obfuscations"] == 2 * (100 + 2 + test)
    assert counts["decryptions"] == 1 + 1 + 1 + test


def test_obfuscation_is_part_of_the_job_and_checked() -> None:
    from dataclasses import replace

    job = demo_job(key_bits=512, allow_weak_keys=True)
    djn = replace(job, obfuscation="djn")
    assert job.fingerprint() != djn.fingerprint()
    with pytest.raises(ConfigError, match="obfuscation must be one of"):
        replace(job, obfuscation="fast")


def test_init_writes_the_obfuscation_flag(tmp_path: Path) -> None:
    result = privfl(
        "init", "vfl", "--out", str(tmp_path / "kit"), "--key-bits", "512", "--allow-weak-keys",
        "--obfuscation", "djn",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job = tomllib.loads((tmp_path / "kit" / "job.toml").read_text())
    assert job["obfuscation"] == "djn"


def test_fate_utils_is_skipped_cleanly_when_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    from privfl.tools.bench import stages

    # A None entry in sys.modules makes `import fate_utils` raise ImportError.
    monkeypatch.setitem(sys.modules, "fate_utils", None)
    monkeypatch.setitem(sys.modules, "fate_utils.paillier", None)
    assert stages.fate_epoch(synthetic(20, 4), 256, 10) is None
