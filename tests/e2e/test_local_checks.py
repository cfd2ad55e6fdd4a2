"""A party's own mistakes (its data file) are on its terminal before it tries its peers."""

from __future__ import annotations

import time
from pathlib import Path

from processes import WEAK, privfl_here, spawn


def test_a_missing_data_file_is_shown_before_the_party_tells_its_peers(tmp_path: Path) -> None:
    # Prepare: no peer runs, so telling them takes the whole 10 s reach window.
    made = privfl_here("init", "vfl", "--out", str(tmp_path / "kit"), *WEAK)
    assert made.returncode == 0, made.stderr
    log = tmp_path / "guest-1.log"

    # Act
    guest = spawn(
        "vfl", "guest", "--job", str(tmp_path / "kit" / "job.toml"), "--party", "guest-1",
        "--out", str(tmp_path / "g"), "--data", str(tmp_path / "missing.csv"), "--no-progress",
        log=log,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while "privfl: error:" not in log.read_text():
        assert guest.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    still_telling = guest.poll() is None
    code = guest.wait(timeout=60)

    # Assert: shown at once (the party was still trying its peers), and only once: the
    # terminal shows that one line and nothing else.
    text = log.read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    assert still_telling, text
    assert code == 1 and lines == [
        f"privfl: error: data file {tmp_path / 'missing.csv'} not found; check --data"
    ], text
    assert "told no peer that we stopped" in (tmp_path / "g" / "party.log").read_text()
