"""Each GLM through the real CLI: `privfl vfl run-local --model KIND`, then `privfl vfl predict`.

Tiny 512-bit keys (behind --allow-weak-keys), one epoch and each party's Paillier work
inline (``--workers 1``: no pools of worker interpreters to start for a few hundred
rows; tests/e2e/test_cli.py runs the default pools): this checks the commands, the
outputs and the per-kind columns, not the accuracy (tools/experiments does that).
"""

from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from processes import WEAK, privfl, spawn_predict

from privfl.config.vertical import kind_default
from privfl.data.views import bundled
from privfl.models.registry import UNPROTECTED_READS

KINDS = {
    "linear": ("diabetes", {"rmse", "mae", "r2"}, ["id", "prediction"]),
    "poisson": ("counts", {"deviance", "rmse", "mae", "r2"}, ["id", "rate", "prediction"]),
    "multiclass": ("wine", {"accuracy", "precision", "recall", "f1", "per_class"}, None),
}
# A regression job says how its labels are protected: linear takes label DP from public
# bounds (ε 8 then), Poisson says no label DP explicitly; each way out runs end to end.
LABELS = {
    "linear": ["--label-low", "0", "--label-high", "350"],
    "poisson": ["--label-epsilon", "inf"],
    "multiclass": [],
}
ROWS = 12


def write_rows(path: Path, dataset: str, columns: list[int], exposure: str = "") -> None:
    """The first ROWS rows of a bundled table's ``columns``, with their feature names, and
    its exposures in a column of that name when ``exposure`` names one."""
    x, names, _, exposures = bundled(dataset)
    cells = x[:ROWS, columns]
    if exposure:
        cells = np.column_stack([cells, exposures[:ROWS]])
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([names[c] for c in columns] + ([exposure] if exposure else []))
        writer.writerows(cells.tolist())


@pytest.mark.parametrize("kind", list(KINDS))
def test_run_local_then_predict(tmp_path: Path, kind: str) -> None:
    dataset, metrics, header = KINDS[kind]
    run = tmp_path / "run"

    # Act: train.
    result = privfl(
        "vfl", "run-local", "--model", kind, *LABELS[kind], *WEAK, "--epochs", "1",
        "--workers", "1", "--no-progress", "--out", str(run), timeout=300,
    )  # fmt: skip

    # Assert: the summary names the data, the split and every hyper-parameter.
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["dataset"] == dataset
    assert summary["test_size"] == 0.25 and summary["split_seed"] == 0
    assert summary["model"]["kind"] == kind and summary["model"]["learning_rate"] == 0.3
    assert metrics <= set(summary), set(summary)
    assert (run / "host" / "training.png").stat().st_size > 0
    # Regression without label DP (chosen): said at the start and in the table.
    unprotected = kind == "poisson"
    assert ("without label DP (ε = inf): a deviating guest reads" in result.stderr) == unprotected
    assert ("a deviating guest reads" in result.stdout) == unprotected
    want_epsilon = "inf" if unprotected else kind_default(kind, "label_dp.epsilon")
    assert summary["label_epsilon"] == want_epsilon

    # Act: predict ROWS new rows, every party from its own CSV (rows in the same order);
    # the Poisson Host's file has the exposure column the job names (the demo's).
    job_path = run / "kit" / "job.toml"
    job = tomllib.loads(job_path.read_text())
    exposure = job["model"].get("exposure", "")
    assert bool(exposure) == (kind == "poisson")
    if kind == "poisson":  # without it, the Host refuses its file before it contacts anyone
        assert_one_line_without_exposure(tmp_path, run, job["parties"]["host"]["columns"])
    pred = tmp_path / "pred"
    processes = {
        "server": spawn_predict(
            job_path, "server", pred / "server" / "p.csv", log=tmp_path / "server.log"
        )
    }
    for name, spec in job["parties"].items():
        if spec["role"] == "server":
            continue
        rows = tmp_path / "new" / f"{name}.csv"
        write_rows(rows, dataset, spec["columns"], exposure if spec["role"] == "host" else "")
        processes[name] = spawn_predict(
            job_path,
            name,
            pred / name / "p.csv",
            log=tmp_path / f"{name}.log",
            model=run / name,
            data=rows,
        )
    codes = {name: p.wait(timeout=120) for name, p in processes.items()}

    # Assert: the Host wrote one row per scored row with the kind's columns.
    logs = {n: (tmp_path / f"{n}.log").read_text() for n in processes}
    assert set(codes.values()) == {0}, logs
    with (pred / "host" / "p.csv").open() as handle:
        table = list(csv.reader(handle))
    classes = summary["model"].get("classes", 0)
    want = header or ["id", *(f"p_{c}" for c in range(classes)), "label"]
    assert table[0] == want
    assert len(table) == ROWS + 1
    values = np.array([[float(v) for v in row[1:]] for row in table[1:]])
    assert np.isfinite(values).all()
    if kind == "poisson":  # rate > 0, and the expected count is rate × exposure
        assert (values > 0).all()
        exposures = bundled(dataset)[3][:ROWS]
        np.testing.assert_allclose(values[:, 1], values[:, 0] * exposures, atol=1e-5)


@pytest.mark.parametrize(
    ("kind", "options"),
    [("linear", []), ("poisson", []), ("linear", ["--label-epsilon", "1"])],
)
def test_regression_without_bounds_is_one_line(
    tmp_path: Path, kind: str, options: list[str]
) -> None:
    result = privfl(
        "vfl", "run-local", "--model", kind, *options, *WEAK, "--out", str(tmp_path),
        timeout=120,
    )  # fmt: skip

    # Assert: refused before any party starts, naming both ways out.
    assert result.returncode != 0 and "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert "--label-low/--label-high" in line and "--label-epsilon inf" in line
    assert f"a deviating guest reads {UNPROTECTED_READS[kind]}" in line
    assert not (tmp_path / "summary.json").exists()


def test_poisson_with_two_guests_is_one_line(tmp_path: Path) -> None:
    result = privfl(
        "vfl", "run-local", "--model", "poisson", "--guests", "2", *WEAK,
        "--out", str(tmp_path), timeout=120,
    )  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "exactly one guest" in result.stderr


def assert_one_line_without_exposure(tmp_path: Path, run: Path, columns: list[int]) -> None:
    """The Poisson Host's prediction file lacks the job's exposure column: one line, exit 1."""
    rows = tmp_path / "no-exposure.csv"
    write_rows(rows, "counts", columns)
    result = privfl(
        "vfl", "predict", "--job", str(run / "kit" / "job.toml"), "--party", "host",
        "--model", str(run / "host"), "--data", str(rows), "--out", str(tmp_path / "p.csv"),
    )  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "has no exposure column 'exposure'" in result.stderr
