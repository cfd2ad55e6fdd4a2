"""Sites with their own CSV files: PSI, training and prediction as separate OS processes."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tomli_w
from helpers import host_start
from processes import WEAK, privfl, spawn
from sites import Sites, make_sites

from privfl.config.vertical import TrainingConfig
from privfl.data.tables import read_id_csv, split_and_standardise, standardise_with
from privfl.learning.glm import glm_named, reference_train
from privfl.learning.taylor import sigmoid
from privfl.parties.vertical.predict import load_model

LOGISTIC = glm_named("logistic")


def kit(tmp_path: Path, guests: int, epochs: int, **psi: object) -> Path:
    """A kit with weak keys (Paillier 512, PSI RSA 1024) and label DP off."""
    folder = tmp_path / "kit"
    made = privfl(
        "init",
        "vfl",
        "--out",
        str(folder),
        *WEAK,
        "--epochs",
        str(epochs),
        "--guests",
        str(guests),
        "--label-epsilon",
        "inf",
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    path = folder / "job.toml"
    job = tomllib.loads(path.read_text())
    job["data"].update({"psi_key_bits": 1024, **psi})
    path.write_text(tomli_w.dumps(job))
    return path


def run_all(commands: dict[str, list[str]], logs: Path, timeout: float = 120) -> None:
    """Start every party as its own process; all must exit 0."""
    logs.mkdir(parents=True, exist_ok=True)
    procs = {}
    for name, args in commands.items():
        procs[name] = spawn(*args, log=logs / f"{name}.log")
    codes = {name: p.wait(timeout=timeout) for name, p in procs.items()}
    assert all(c == 0 for c in codes.values()), {
        n: (logs / f"{n}.log").read_text() for n, c in codes.items() if c
    }


def train(job: Path, sites: Sites, runs: Path, guests: int) -> None:
    base = ["--job", str(job), "--id-column", "patient_id", "--no-progress"]
    commands = {"server": ["vfl", "server", "--job", str(job), "--party", "server"]}
    commands["server"] += ["--out", str(runs / "server")]
    commands["host"] = ["vfl", "host", *base, "--party", "host", "--out", str(runs / "host")]
    commands["host"] += ["--data", str(sites.files["host"]), "--label-column", "diagnosis"]
    for i in range(guests):
        name = f"guest-{i + 1}"
        commands[name] = ["vfl", "guest", *base, "--party", name, "--out", str(runs / name)]
        commands[name] += ["--data", str(sites.files[name]), "--workers", "1"]
    run_all(commands, runs / "console")


def shared_reference(sites: Sites, epochs: int, start: np.ndarray) -> tuple[float, list[float]]:
    """Plain Taylor LR on the shared rows only, from the Host's private ``start``: test
    accuracy and loss per epoch."""
    views = []
    for name, path in sites.files.items():
        label = "diagnosis" if name == "host" else None
        table = read_id_csv(path, "patient_id", label)
        keep = [i for i, x in enumerate(table.ids) if x in sites.shared]
        ordered = sorted(keep, key=lambda i: table.ids[i])
        views.append(split_and_standardise(table.take(ordered), 0.25, 0))
    host, *guests = views
    ones = np.ones((host.x_train.shape[0], 1))
    parts = [np.hstack([host.x_train, ones])] + [g.x_train for g in guests]
    assert host.y_train is not None and host.y_test is not None
    blocks, losses = reference_train(
        parts,
        host.y_train,
        TrainingConfig(epochs=epochs),
        np.random.default_rng(0),
        LOGISTIC,
        start=start,
    )
    thetas = [t.ravel() for t in blocks]
    z = np.hstack([host.x_test, np.ones((host.x_test.shape[0], 1))]) @ thetas[0]
    z += sum(g.x_test @ t for g, t in zip(guests, thetas[1:], strict=True))
    return float(((sigmoid(z) >= 0.5) == host.y_test).mean()), losses


def foreign_ids(sites: Sites, site: str) -> set[str]:
    """Ids some other site holds and this one does not."""
    others = set().union(*(ids for name, ids in sites.ids.items() if name != site))
    return others - sites.ids[site]


def text_of(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


def test_two_sites_train_on_exactly_the_shared_rows(tmp_path: Path) -> None:
    # Prepare: shuffled files, ~10 % of the ids only at one site each.
    sites = make_sites(tmp_path / "data", guests=1, missing=0)
    job = kit(tmp_path, guests=1, epochs=4, psi="rsa")  # the other test runs ECDH
    runs = tmp_path / "runs"

    # Act
    train(job, sites, runs, guests=1)

    # Assert: the intersection is exact and training matches the plain reference.
    summary = json.loads((runs / "host" / "summary.json").read_text())
    assert summary["intersection_size"] == len(sites.shared)
    assert summary["train_rows"] + summary["test_rows"] == len(sites.shared)
    accuracy, losses = shared_reference(sites, epochs=4, start=host_start(runs))
    assert summary["accuracy"] == pytest.approx(accuracy, abs=1.01 / summary["test_rows"])
    assert summary["loss_history"] == pytest.approx(losses, abs=1e-4)
    # No output, log or console of a site names an id only another site held.
    for site in ("host", "guest-1"):
        written = text_of(runs / site) + (runs / "console" / f"{site}.log").read_text()
        leaked = [i for i in foreign_ids(sites, site) if i in written]
        assert not leaked, (site, leaked[:3])
    server = text_of(runs / "server") + (runs / "console" / "server.log").read_text()
    assert not [i for i in sites.ids["host"] | sites.ids["guest-1"] if i in server]


def test_two_guests_train_and_predict_with_their_own_files(tmp_path: Path) -> None:
    sites = make_sites(tmp_path / "data", guests=2, missing=15)
    job = kit(tmp_path, guests=2, epochs=3, psi="ecdh")
    runs = tmp_path / "runs"
    train(job, sites, runs, guests=2)
    summary = json.loads((runs / "host" / "summary.json").read_text())
    assert summary["intersection_size"] == len(sites.shared)
    # The Host's start is fresh (OS CSPRNG): the plaintext twin on these rows over 5,000
    # starts (benchmarks/assert_tails.py glm-sites-2guests-3) has median 0.947, minimum
    # 0.926; 0.85 lies 12 sd below the mean.
    assert summary["accuracy"] > 0.85

    # Predict on the rows with ids below P00150 of each site's file (in its own order).
    new = {}
    for name, path in sites.files.items():
        frame = pd.read_csv(path, dtype={"patient_id": str})
        frame = frame[frame["patient_id"] < "P00150"]
        new[name] = tmp_path / "new" / f"{name}.csv"
        new[name].parent.mkdir(exist_ok=True)
        frame.to_csv(new[name], index=False)
    scoring = set.intersection(
        *(set(pd.read_csv(p, dtype={"patient_id": str})["patient_id"]) for p in new.values())
    )
    pred = tmp_path / "pred"
    commands = {"server": ["vfl", "predict", "--job", str(job), "--party", "server"]}
    commands["server"] += ["--out", str(pred / "server" / "p.csv")]
    for name in sites.files:
        commands[name] = ["vfl", "predict", "--job", str(job), "--party", name]
        commands[name] += ["--model", str(runs / name), "--data", str(new[name])]
        commands[name] += ["--id-column", "patient_id", "--out", str(pred / name / "p.csv")]
    run_all(commands, pred / "console")

    out = pd.read_csv(pred / "host" / "p.csv", dtype={"id": str})
    assert list(out.columns) == ["id", "probability", "label"]
    assert set(out["id"]) == scoring and len(out) == len(scoring)
    truth = pd.read_csv(sites.files["host"], dtype={"patient_id": str}).set_index("patient_id")
    # The probabilities are the saved models' own, in the clear: each site's weights on its
    # rows, scaled with its training statistics (a draw-free check of the joint prediction).
    eta = np.zeros(len(out))
    for name, path in new.items():
        model = load_model(runs / name, name)
        table = read_id_csv(path, "patient_id", "diagnosis" if name == "host" else None)
        at = {x: i for i, x in enumerate(table.ids)}
        rows = table.take([at[x] for x in out["id"]])
        eta += standardise_with(rows, model.mean, model.scale) @ model.weights
        eta += 0.0 if model.bias is None else float(np.asarray(model.bias).ravel()[0])
    assert np.abs(out["probability"].to_numpy() - sigmoid(eta)).max() < 1e-4
    # These 103 rows are mostly training rows of the private run: the plaintext twin over
    # 20,000 fresh starts (benchmarks/assert_tails.py glm-sites-2guests-3-predict) gives
    # median 0.893, minimum 0.816, sd 0.016; 0.75 is 8.6 sd below the mean.
    accuracy = (out["label"].to_numpy() == truth.loc[out["id"], "diagnosis"].to_numpy()).mean()
    assert accuracy > 0.75 and out["probability"].between(0, 1).all()
    assert not (pred / "guest-1" / "p.csv").exists()  # only the Host writes predictions
    for site in sites.files:
        leaked = [i for i in foreign_ids(sites, site) if i in text_of(runs / site)]
        assert not leaked, (site, leaked[:3])


def test_a_missing_id_column_is_a_one_line_error(tmp_path: Path) -> None:
    sites = make_sites(tmp_path / "data", guests=1)
    job = kit(tmp_path, guests=1, epochs=1)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "privfl",
            "vfl",
            "guest",
            "--job",
            str(job),
            "--party",
            "guest-1",
            "--data",
            str(sites.files["guest-1"]),
            "--id-column",
            "mrn",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "no column 'mrn'" in result.stderr and "patient_id" in result.stderr


def test_predict_without_a_model_is_a_usage_error(tmp_path: Path) -> None:
    job = kit(tmp_path, guests=1, epochs=1)
    result = subprocess.run(
        [sys.executable, "-m", "privfl", "vfl", "predict", "--job", str(job), "--party", "host"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "host (host) needs --model DIR and --data FILE" in result.stderr
