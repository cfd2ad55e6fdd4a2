"""A used --out is refused unless --resume or --overwrite; --overwrite clears the stale files."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from privfl.cli import main
from privfl.errors import ConfigError
from privfl.runs.outdir import STALE, claim

WEAK = ["--key-bits", "512", "--allow-weak-keys"]


def earlier_run(out: Path) -> None:
    """What a finished run leaves: a summary, a party folder with logs and checkpoints."""
    party = out / "host"
    (party / "checkpoints").mkdir(parents=True)
    (party / "checkpoints" / "epoch-00003.json").write_text("{}")
    (party / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (party / "party.log").write_text("old\n")
    (party / "model.json").write_text("{}")
    (out / "summary.json").write_text("{}")


def test_a_fresh_or_empty_folder_is_taken(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("kept\n")

    claim(tmp_path / "new")  # neither raises: nothing there to lose
    claim(tmp_path / "empty")

    assert not (tmp_path / "new").exists()  # claiming writes nothing; the run makes it
    assert list((tmp_path / "empty").iterdir()) == []
    with pytest.raises(ConfigError, match="already holds an earlier run"):
        claim(tmp_path / "used")  # the same call on a folder with one file is refused
    assert (tmp_path / "used" / "notes.txt").read_text() == "kept\n"


def test_a_used_folder_is_refused_naming_both_flags(tmp_path: Path) -> None:
    earlier_run(tmp_path)
    with pytest.raises(ConfigError, match="pass --resume to continue it or --overwrite"):
        claim(tmp_path)
    with pytest.raises(ConfigError, match="pass --overwrite to replace it"):
        claim(tmp_path, can_resume=False)
    claim(tmp_path, resume=True)  # resuming keeps everything
    assert (tmp_path / "host" / "checkpoints" / "epoch-00003.json").exists()


def test_overwrite_clears_stale_checkpoints_logs_and_metrics(tmp_path: Path) -> None:
    earlier_run(tmp_path)
    claim(tmp_path, overwrite=True)
    left = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")}
    assert left == {"host", "host/model.json"}  # rewritten by the next run, not appended to
    assert not any(name in left for name in STALE)


def test_resume_and_overwrite_exclude_each_other(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="pass one"):
        claim(tmp_path, resume=True, overwrite=True)


@pytest.mark.parametrize(
    "command",
    [
        ["init", "vfl", *WEAK],
        ["init", "hfl"],
        ["vfl", "run-local", *WEAK],
        ["hfl", "run-local"],
    ],
)
def test_every_command_with_out_refuses_a_used_one(tmp_path: Path, command: list[str]) -> None:
    # Prepare
    out = tmp_path / "out"
    earlier_run(out)

    # Act
    result = CliRunner().invoke(main, [*command, "--out", str(out)])

    # Assert: one line naming the flag; nothing started, nothing removed.
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--overwrite" in lines[-1], result.stderr
    assert (out / "host" / "checkpoints" / "epoch-00003.json").exists()


@pytest.mark.parametrize(
    ("mode", "role", "party"), [("vfl", "host", "host"), ("hfl", "aggregator", "aggregator")]
)
def test_party_commands_refuse_a_used_out(tmp_path: Path, mode: str, role: str, party: str) -> None:
    # Prepare: a kit, and a party folder an earlier run used.
    kit = tmp_path / "kit"
    made = CliRunner().invoke(
        main, ["init", mode, "--out", str(kit), *(WEAK if mode == "vfl" else [])]
    )
    assert made.exit_code == 0, made.output
    earlier_run(tmp_path / "runs")

    # Act
    args = [mode, role, "--job", str(kit / "job.toml"), "--party", party]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "runs" / "host")])

    # Assert
    assert result.exit_code == 1 and "already holds an earlier run" in result.stderr, result.output


def test_init_overwrite_rewrites_the_kit(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(main, ["init", "vfl", "--out", str(tmp_path), *WEAK])
    again = runner.invoke(main, ["init", "vfl", "--out", str(tmp_path), *WEAK])
    forced = runner.invoke(main, ["init", "vfl", "--out", str(tmp_path), *WEAK, "--overwrite"])

    assert first.exit_code == 0 and forced.exit_code == 0, first.output + forced.output
    assert again.exit_code == 1 and "--overwrite" in again.stderr
