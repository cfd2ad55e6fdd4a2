"""`privfl vfl host --redraw-labels`: documented in --help, refused for the other roles."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from privfl.cli import main

WEAK = ["--key-bits", "512", "--allow-weak-keys"]


def test_the_host_documents_the_flag() -> None:
    result = CliRunner().invoke(main, ["vfl", "host", "--help"])

    assert result.exit_code == 0, result.output
    assert "--redraw-labels" in result.output and "label ε again" in result.output


def test_a_guest_is_told_the_flag_is_the_hosts(tmp_path: Path) -> None:
    made = CliRunner().invoke(main, ["init", "vfl", "--out", str(tmp_path / "kit"), *WEAK])
    assert made.exit_code == 0, made.output
    job = str(tmp_path / "kit" / "job.toml")

    result = CliRunner().invoke(
        main,
        ["vfl", "guest", "--job", job, "--party", "guest-1", "--out", str(tmp_path / "g"),
         "--redraw-labels"],
    )  # fmt: skip

    assert result.exit_code == 2
    assert "--redraw-labels is for the host" in result.output
