"""Real processes: a forced restart is refused, --redraw-labels books a second draw.

After a full run, the Host and the Server are restarted with ``--resume`` while the
guest starts over with ``--overwrite`` (it offers no checkpoint): the Host refuses
with one line and every party stops. The operators then start over
(``--overwrite``), the Host with ``--redraw-labels``: the run trains on new labels
and summary.json books both draws' ε.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from processes import ONE_GUEST, WEAK, privfl_here, spawn_parties


def start(job: Path, runs: Path, logs: Path, extra: dict[str, list[str]]) -> dict[str, int]:
    """Every party as its own process, computing inline (``--workers 1``), the Host drawing
    no plots (no check reads them); their exit codes."""
    inline = {name: [*extra.get(name, []), "--workers", "1", "--no-plots"] for _, name in ONE_GUEST}
    procs = spawn_parties(job, runs, lambda name: logs / f"{name}.log", inline)
    return {name: p.wait(timeout=180) for name, p in procs.items()}


@pytest.mark.slow
def test_forced_restart_refused_and_redraw_booked(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    made = privfl_here(
        "init", "vfl", "--out", str(kit), *WEAK, "--epochs", "1", "--label-epsilon", "1"
    )
    assert made.returncode == 0, made.stderr
    job, runs = kit / "job.toml", tmp_path / "runs"
    for attempt in ("first", "forced", "redraw"):
        (tmp_path / attempt).mkdir()

    first = start(job, runs, tmp_path / "first", {})
    forced = start(
        job,
        runs,
        tmp_path / "forced",
        {"server": ["--resume"], "host": ["--resume"], "guest-1": ["--overwrite"]},
    )
    host_says = (tmp_path / "forced" / "host.log").read_text().strip().splitlines()
    redraw = start(
        job,
        runs,
        tmp_path / "redraw",
        {name: ["--overwrite"] for _, name in ONE_GUEST}
        | {"host": ["--overwrite", "--redraw-labels"]},
    )

    assert first == {"server": 0, "host": 0, "guest-1": 0}, first
    assert all(code != 0 for code in forced.values()), forced
    assert len(host_says) == 1 and "--redraw-labels" in host_says[0], host_says
    assert "Traceback" not in host_says[0]
    assert redraw == {"server": 0, "host": 0, "guest-1": 0}, redraw
    summary = json.loads((runs / "host" / "summary.json").read_text())
    assert summary["label_epsilon"] == 2.0 and summary["label_draws"] == 2
    draw = runs / "host" / "label-draw.json"
    assert json.loads(draw.read_text())["epsilons"] == [1.0, 1.0]
    assert stat.S_IMODE(draw.stat().st_mode) == 0o600
    assert stat.S_IMODE((runs / "host").stat().st_mode) == 0o700
