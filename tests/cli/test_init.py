"""`privfl init vfl|hfl` writes a kit; the old `privfl hfl init` still works and says so."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from privfl.cli import main
from privfl.config.horizontal import load_hfl_job
from privfl.config.vertical import load_job


def test_init_hfl_and_its_old_spelling_write_the_same_kit(tmp_path: Path) -> None:
    runner = CliRunner()
    new = runner.invoke(main, ["init", "hfl", "--out", str(tmp_path / "a"), "--rounds", "3"])
    old = runner.invoke(main, ["hfl", "init", "--out", str(tmp_path / "b"), "--rounds", "3"])

    assert new.exit_code == 0 and old.exit_code == 0, new.output + old.output
    assert "alias of `privfl init hfl`" in old.output and "alias" not in new.output
    a, b = load_hfl_job(tmp_path / "a" / "job.toml"), load_hfl_job(tmp_path / "b" / "job.toml")
    assert a.config == b.config and a.config.rounds == 3
    assert sorted(a.parties) == sorted(b.parties)


def test_init_vfl_writes_a_job_and_keys(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["init", "vfl", "--out", str(tmp_path), "--key-bits", "512", "--allow-weak-keys"]
    )

    assert result.exit_code == 0, result.output
    job = load_job(tmp_path / "job.toml")
    assert {spec.role for spec in job.parties.values()} == {"server", "host", "guest"}
    assert all((tmp_path / job.keys_dir / f"{name}.key").exists() for name in job.parties)
