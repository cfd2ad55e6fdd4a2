"""`privfl vfl predict --allow-repeat-prediction`: documented, a SecureBoost guest's only."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from privfl.cli import main

WEAK = ["--key-bits", "512", "--allow-weak-keys"]


def test_predict_documents_the_flag() -> None:
    result = CliRunner().invoke(main, ["vfl", "predict", "--help"])

    assert result.exit_code == 0, result.output
    assert "--allow-repeat-prediction" in result.output and "predictions.jsonl" in result.output


@pytest.mark.parametrize(
    ("model", "party"), [("logistic", "guest-1"), ("secureboost", "host")], ids=["glm", "host"]
)
def test_the_flag_is_refused_where_it_does_not_apply(
    tmp_path: Path, model: str, party: str
) -> None:
    kit = tmp_path / "kit"
    made = CliRunner().invoke(main, ["init", "vfl", "--out", str(kit), "--model", model, *WEAK])
    assert made.exit_code == 0, made.output

    result = CliRunner().invoke(
        main,
        ["vfl", "predict", "--job", str(kit / "job.toml"), "--party", party,
         "--out", str(tmp_path / "p" / "p.csv"), "--allow-repeat-prediction"],
    )  # fmt: skip

    assert result.exit_code == 2
    assert "is for a guest of a SecureBoost model" in result.output
