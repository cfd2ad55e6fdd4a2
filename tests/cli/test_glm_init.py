"""`privfl init vfl --model KIND`: the job file carries the model, its table and its classes."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

from click.testing import CliRunner

from privfl.cli import main
from privfl.config.vertical import ModelConfig, kind_default, load_job
from privfl.models.registry import KINDS

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


def test_linear_without_bounds_has_no_label_dp_and_says_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["init", "vfl", "--out", str(tmp_path), *WEAK, "--model", "linear"]
    )
    assert result.exit_code == 0, result.output
    job = load_job(tmp_path / "job.toml")
    assert job.data.dataset == "diabetes" and math.isinf(job.label_dp.epsilon)
    said = " ".join(result.output.split())
    assert "without label DP (ε = inf): a deviating guest reads" in said
    assert "--label-low/--label-high (label ε 8 then" in said


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
    job = load_job(init(tmp_path, "--dataset", "counts"))

    assert job.model.kind == "poisson" and job.model.exposure == "exposure"
    assert job.parties["host"].columns == (0, 1) and len(job.guests) == 1
