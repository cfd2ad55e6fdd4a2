"""`vfl run-local --resume` applies --timeout (site-local) and refuses, naming each, the
options that would change the job; it never drops one silently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from privfl.cli import main
from privfl.config.vertical import load_job
from privfl.errors import PrivflError
from privfl.runs import launcher
from privfl.runs.kits import demo_job, write_kit


class Launched(PrivflError):
    """Raised by the stand-in launcher: the command got as far as starting the parties."""


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run folder whose kit is what run-local writes (no party has run: none is needed)."""
    write_kit(demo_job(key_bits=512, allow_weak_keys=True), tmp_path / "run" / "kit")
    return tmp_path / "run"


def test_resume_applies_the_timeout_and_keeps_the_fingerprint(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: the launcher is replaced by one that records the job the parties would get.
    kit_job = run_dir / "kit" / "job.toml"
    before = load_job(kit_job)
    seen: dict[str, Any] = {}

    def launch(job: Any, out: Path, **kwargs: Any) -> None:
        seen.update(job=job, resume=kwargs.get("resume"))
        raise Launched("parties started")

    monkeypatch.setattr(launcher, "run_local", launch)

    # Act
    result = CliRunner().invoke(
        main, ["vfl", "run-local", "--out", str(run_dir), "--resume", "--timeout", "900"]
    )

    # Assert: the parties (which read the kit) wait 900 s; the checkpoints still match.
    assert "parties started" in result.output, result.output
    assert seen["resume"] is True and seen["job"].timeout_seconds == 900.0
    after = load_job(kit_job)
    assert after.timeout_seconds == 900.0 and before.timeout_seconds == 120.0
    assert after.fingerprint() == before.fingerprint()
    assert "timeout_seconds = 900" in result.output


def test_resume_refuses_options_that_change_the_job_naming_each(run_dir: Path) -> None:
    kit_job = run_dir / "kit" / "job.toml"
    before = kit_job.read_text()

    result = CliRunner().invoke(
        main,
        ["vfl", "run-local", "--out", str(run_dir), "--resume", "--epochs", "5", "--seed", "3",
         "--timeout", "900"],
    )  # fmt: skip

    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("privfl: error: --resume"), lines
    assert "--epochs, --seed would change that job" in lines[0]
    assert "--timeout" not in lines[0].split("would change")[0]
    assert kit_job.read_text() == before  # nothing applied, not even the timeout


def test_a_refused_resume_tells_run_local_users_what_they_can_type(tmp_path: Path) -> None:
    from privfl.runs.launcher import for_run_local

    refused = (
        "party host failed: privfl: error: no checkpoint is common to all parties, so --resume "
        "would start this job over …, or with --overwrite --redraw-labels to draw new labels"
    )

    told = for_run_local(refused, tmp_path / "run")

    assert told.startswith(refused)
    assert "run-local (which has no --redraw-labels)" in told
    assert f"privfl vfl run-local --out {tmp_path / 'run'} --overwrite" in told
    assert for_run_local("party host failed: disk full", tmp_path) == (
        "party host failed: disk full"
    )
