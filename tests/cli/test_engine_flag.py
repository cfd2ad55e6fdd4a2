"""`privfl vfl host|guest --engine`: documented in --help; wrong combinations told in one line."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from privfl.cli import main

WEAK = ["--key-bits", "512", "--allow-weak-keys"]


def test_the_engine_options_are_documented() -> None:
    result = CliRunner().invoke(main, ["vfl", "guest", "--help"])

    assert result.exit_code == 0, result.output
    assert "--engine [pool|ray|cuda]" in result.output and "[default: pool]" in result.output
    assert "--ray-address" in result.output and "--ray-private-key" in result.output


def test_a_ray_address_without_the_ray_engine_is_refused_in_one_line(tmp_path: Path) -> None:
    made = CliRunner().invoke(main, ["init", "vfl", "--out", str(tmp_path / "kit"), *WEAK])
    assert made.exit_code == 0, made.output
    job = str(tmp_path / "kit" / "job.toml")

    result = CliRunner().invoke(
        main,
        ["vfl", "guest", "--job", job, "--party", "guest-1", "--out", str(tmp_path / "g"),
         "--ray-address", "auto"],
    )  # fmt: skip

    assert result.exit_code != 0
    assert result.output.strip().splitlines() == [
        "privfl: error: --ray-address and --ray-private-key need --engine ray"
    ]
    assert not (tmp_path / "g").exists()  # refused before any file was written
