"""`privfl relay`: mistakes are one line, never a traceback."""

from __future__ import annotations

from pathlib import Path

from processes import WEAK, privfl


def test_a_relay_without_its_key_or_an_endpoint_says_what_to_do(tmp_path: Path) -> None:
    made = privfl("init", "vfl", "--out", str(tmp_path / "kit"), *WEAK)
    assert made.returncode == 0, made.stderr
    job = str(tmp_path / "kit" / "job.toml")

    no_endpoint = privfl("relay", "--job", job)
    no_key = privfl("relay", "--job", job, "--bind", "tcp://127.0.0.1:0")

    assert no_endpoint.returncode == 1 and "pass --bind" in no_endpoint.stderr
    assert no_key.returncode == 1 and "relay.key_secret" in no_key.stderr
    for result in (no_endpoint, no_key):
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
