"""`privfl init vfl --model KIND`: the job file carries the model, its table and its classes."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from privfl.cli import main
from privfl.config.vertical import ModelConfig, kind_default, load_job
from privfl.models.registry import KINDS, UNPROTECTED_READS

WEAK = ["--key-bits", "512", "--allow-weak-keys"]


def init(tmp_path: Path, *args: str) -> Path:
    result = CliRunner().invoke(main, ["init", "vfl", "--out", str(tmp_path), *WEAK, *args])
    assert result.exit_code == 0, result.output
    return tmp_path / "job.toml"


def test_multiclass_takes_its_classes_and_columns_from_the_table(tmp_path: Path) -> None:
    job = load_job(init(tmp_path, "--model", "multiclass", "--dataset", "digits"))

    assert job.model.kind == "multiclass" and job.model.classes == 10
    assert job.data.dataset == "digits"
    assert job.parties["host"].columns == tuple(range(21))  # the first third of 64
    assert job.parties["guest-1"].columns == tuple(range(21, 64))


@pytest.mark.parametrize("kind", ["linear", "poisson"])
def test_regression_without_bounds_or_explicit_inf_is_refused_in_one_line(
    tmp_path: Path, kind: str
) -> None:
    # Act
    result = CliRunner().invoke(
        main, ["init", "vfl", "--out", str(tmp_path), *WEAK, "--model", kind]
    )

    # Assert: one line naming both ways out and what a guest reads; nothing written.
    assert result.exit_code != 0 and "Traceback" not in result.output
    (line,) = result.output.splitlines()
    assert line.startswith(f"privfl: error: {kind} regression needs the labels' public bounds")
    assert "(--label-low/--label-high) for label DP at ε 8" in line
    assert "(--label-epsilon inf) to train without it, where a deviating guest reads" in line
    assert UNPROTECTED_READS[kind] in line
    assert not (tmp_path / "job.toml").exists()


def test_regression_takes_either_way_out_and_the_file_says_which(tmp_path: Path) -> None:
    # Act
    off = CliRunner().invoke(
        main,
        ["init", "vfl", "--out", str(tmp_path / "off"), *WEAK, "--model", "linear",
         "--label-epsilon", "inf"],
    )  # fmt: skip
    bounded = load_job(init(tmp_path / "on", "--model", "linear", "--label-high", "350"))

    # Assert: the explicit inf is written (so fingerprinted), and said with its read.
    assert off.exit_code == 0, off.output
    written = tomllib.loads((tmp_path / "off" / "job.toml").read_text())
    assert written["label_dp"]["epsilon"] == math.inf
    assert load_job(tmp_path / "off" / "job.toml").data.dataset == "diabetes"
    said = " ".join(off.output.split())
    assert "without label DP (ε = inf): a deviating guest reads" in said
    assert "--label-low/--label-high (label ε 8 then" in said
    assert bounded.label_dp.epsilon == 8.0 and bounded.model.label_high == 350.0


def test_each_kind_writes_its_default_label_epsilon_and_help_shows_it(tmp_path: Path) -> None:
    # Prepare: the defaults as the config declares them (docs/results.md, "The GLMs'
    # default label ε"); regression's applies once bounds are given.
    wanted = {kind: kind_default(kind, "label_dp.epsilon") for kind in KINDS}
    assert (wanted["logistic"], wanted["multiclass"], wanted["secureboost"]) == (1.5, 3.0, 2.0)

    # Act
    files = {kind: init(tmp_path / kind, "--model", kind) for kind in ("logistic", "multiclass")}
    files["secureboost"] = init(tmp_path / "boost", "--model", "secureboost")
    files["linear"] = init(tmp_path / "linear", "--model", "linear", "--label-high", "350")
    page = CliRunner().invoke(main, ["init", "vfl", "--help"]).output

    # Assert: the file says the value (so its fingerprint does), and so does --help.
    for kind, path in files.items():
        assert tomllib.loads(path.read_text())["label_dp"]["epsilon"] == wanted[kind], kind
    flat = " ".join(page.split())
    assert "logistic: 1.5, multiclass: 3, secureboost: 2; linear, poisson: 8" in flat


def test_bounds_are_written_only_when_set(tmp_path: Path) -> None:
    bounded = init(
        tmp_path / "a", "--model", "linear", "--label-epsilon", "2",
        "--label-low", "0", "--label-high", "350",
    )  # fmt: skip
    plain = init(tmp_path / "b", "--model", "multiclass")
    default = init(tmp_path / "c")

    model = tomllib.loads(bounded.read_text())["model"]
    assert "label_low" not in model and model["label_high"] == 350.0  # 0 is the default
    job = load_job(bounded)
    assert (job.model.label_low, job.model.label_high, job.label_dp.epsilon) == (0.0, 350.0, 2.0)
    assert "label_low" not in tomllib.loads(plain.read_text())["model"]
    assert "model" not in tomllib.loads(default.read_text())  # old fingerprints unchanged
    assert load_job(default).model == ModelConfig()


def test_a_dataset_alone_picks_its_model(tmp_path: Path) -> None:
    job = load_job(init(tmp_path, "--dataset", "counts", "--label-epsilon", "inf"))

    assert job.model.kind == "poisson" and job.model.exposure == "exposure"
    assert job.parties["host"].columns == (0, 1) and len(job.guests) == 1
