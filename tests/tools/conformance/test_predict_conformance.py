"""The kit against prediction sessions (``privfl conformance --session predict``), and
against the SecureBoost Server.

Our own parties run ``privfl vfl predict`` with hand-written model.json files (the
format of docs/protocol.md §6.8) and a tiny table of new rows, so no training run is
needed; the kit reads the same files for its known answers. One broken guest per flow
(GLM scores, SecureBoost decisions) must be failed by the check that names its bug.
Real processes, CURVE sockets, 512-bit keys.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_scripted_peer import cli, init, run_kit

# One worker makes the kits for every test here (--dist loadgroup, tests/conftest.py).
pytestmark = pytest.mark.xdist_group("predict_conformance")

BROKEN = [sys.executable, str(Path(__file__).with_name("broken_guest.py"))]
ROWS = 24


def write_rows(folder: Path, party: str, features: list[str], seed: int) -> Path:
    """A CSV of ROWS new rows of ``features`` (rows aligned by position)."""
    x = np.random.default_rng(seed).normal(size=(ROWS, len(features)))
    path = folder / f"{party}.csv"
    lines = [",".join(features), *(",".join(f"{v:.6f}" for v in row) for row in x)]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_model(folder: Path, party: str, body: dict[str, Any], features: list[str]) -> Path:
    """A model.json of ``party``: ``body`` and a standardisation of ``features``."""
    scale = {f: {"mean": 0.1 * i, "scale": 1.0 + 0.5 * i} for i, f in enumerate(features)}
    path = folder / f"{party}.json"
    path.write_text(json.dumps({"party": party, **body, "standardisation": scale}))
    return path


def make_kit(folder: Path, *options: str) -> Path:
    return init(folder, "--timeout", "60", *options)


@pytest.fixture(scope="module")
def glm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A logistic kit and each party's files: the host's weights with a bias."""
    root = tmp_path_factory.mktemp("glm-predict")
    kit = make_kit(root / "kit")  # 60 s: a loaded machine may take long to start a party
    kind = {"model": {"kind": "logistic", "outputs": 1}}
    write_model(root, "guest-1", {**kind, "weights": {"g0": 0.7, "g1": -1.2, "g2": 0.4}},
                ["g0", "g1", "g2"])  # fmt: skip
    write_model(root, "host", {**kind, "weights": {"h0": -0.5, "h1": 0.9}, "bias": 0.3},
                ["h0", "h1"])  # fmt: skip
    write_rows(root, "guest-1", ["g0", "g1", "g2"], 1)
    write_rows(root, "host", ["h0", "h1"], 2)
    return kit


@pytest.fixture(scope="module")
def boost(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SecureBoost kit; the host's two trees, with a guest split in each."""
    root = tmp_path_factory.mktemp("boost-predict")
    kit = make_kit(root / "kit", "--model", "secureboost")
    kind = {"model": {"kind": "secureboost"}}
    split = {"party": "guest-1", "gain": 1.0}
    trees = [
        [{"node": 0, **split}, {"node": 1, "party": "host", "gain": 0.5, "feature": "h0",
         "threshold": 0.2}, {"node": 2, "leaf": 0.3}, {"node": 3, "leaf": -0.4},
         {"node": 4, "leaf": 0.2}],
        [{"node": 0, "party": "host", "gain": 0.7, "feature": "h1", "threshold": -0.1},
         {"node": 1, "leaf": -0.2}, {"node": 2, **split}, {"node": 5, "leaf": 0.1},
         {"node": 6, "leaf": 0.25}],
    ]  # fmt: skip
    write_model(root, "host", {**kind, "base_margin": 0.1, "trees": trees}, ["h0", "h1"])
    splits = [
        {"tree": 0, "node": 0, "feature": "g1", "bin": 3, "threshold": 0.1},
        {"tree": 1, "node": 2, "feature": "g2", "bin": 1, "threshold": -0.3},
    ]
    write_model(root, "guest-1", {**kind, "splits": splits}, ["g0", "g1", "g2"])
    write_rows(root, "guest-1", ["g0", "g1", "g2"], 3)
    write_rows(root, "host", ["h0", "h1"], 4)
    return kit


def predict_check(
    kit: Path, out: Path, role: str, ending: str = "finish", party_cmd: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``privfl conformance --session predict`` starting our party's ``vfl predict``."""
    party = {"guest": "guest-1", "host": "host", "server": "server"}[role]
    files: list[str] = []
    if role != "server":
        folder = kit.parent.parent  # the fixture's root: kit/job.toml beside the files
        files = ["--model", str(folder / f"{party}.json"), "--data", str(folder / f"{party}.csv")]
    predictions = str(out / "predictions.csv")
    args = ["--session", "predict", "--role", role, "--job", str(kit), "--party", party]
    kit_files = [*files, "--predictions", predictions] if role == "host" else files
    command = [*(party_cmd or cli("vfl")), "predict", "--job", str(kit), "--party", party]
    return run_kit(
        [*args, "--ending", ending, *kit_files],
        [*command, *files, "--out", predictions],
        out / f"{party}.console",
    )


def assert_conforms(result: subprocess.CompletedProcess[str], last_check: str) -> str:
    """Every check passed and ``last_check`` among them; the run's whole output."""
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "FAIL" not in result.stdout, output
    assert last_check in result.stdout, result.stdout
    return output


# The last check of each run, the one that needs the party's files.
GLM_RUNS = {
    ("guest", "finish"): "PASS  scores are the model's z = x·θ of every new row, in order",
    ("host", "finish"): "PASS  predictions are the kind's columns of z_H + bias + Σ_g z_g",
    ("server", "finish"): "PASS  scores decryption is correct",
    ("host", "violation"): "PASS  scores one ciphertext short make it Abort",
}


@pytest.mark.parametrize(("role", "ending"), list(GLM_RUNS))
def test_our_glm_prediction_parties_conform(
    glm: Path, tmp_path: Path, role: str, ending: str
) -> None:
    # Act
    result = predict_check(glm, tmp_path, role, ending)

    # Assert: every check passed, the one that needs the party's files among them.
    output = assert_conforms(result, GLM_RUNS[(role, ending)])
    assert "Traceback" not in output


BOOST_RUNS = {
    ("guest", "finish"): "PASS  every mask is x[:, column] ≤ threshold of the new rows, in order",
    ("host", "finish"): "PASS  predictions are σ(base + Σ leaves) of the rows routed by the host's",
    # a guest never decides another party's node (the Host once took any (tree, node))
    ("host", "violation"): "PASS  decisions for a node another party split make it Abort",
}


@pytest.mark.parametrize(("role", "ending"), list(BOOST_RUNS))
def test_our_secureboost_prediction_parties_conform(
    boost: Path, tmp_path: Path, role: str, ending: str
) -> None:
    # Act
    result = predict_check(boost, tmp_path, role, ending)

    # Assert
    assert_conforms(result, BOOST_RUNS[(role, ending)])


@pytest.mark.parametrize(
    ("flow", "bug", "caught_by"),
    [
        ("glm", "shifted-prediction-rows", "FAIL  scores are the model's z = x·θ of every new row"),
        ("boost", "reversed-decision-rows", "FAIL  every mask is x[:, column] ≤ threshold"),
    ],
)
def test_the_kit_catches_a_broken_prediction_guest(
    glm: Path, boost: Path, tmp_path: Path, flow: str, bug: str, caught_by: str
) -> None:
    # Act
    kit = glm if flow == "glm" else boost
    result = predict_check(kit, tmp_path, "guest", party_cmd=[*BROKEN, bug, "vfl"])

    # Assert: failed by name, in one line, no traceback
    assert result.returncode == 1, result.stdout + result.stderr
    assert caught_by in result.stdout and "Traceback" not in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("ending", "last"),
    [
        ("finish", "PASS  server exits 0 after finish"),
        ("violation", "PASS  a guest's rows not lined up with the host's make it Abort"),
    ],
)
def test_our_secureboost_server_conforms(
    boost: Path, tmp_path: Path, ending: str, last: str
) -> None:
    # Act: a training session (the Server checks Hellos, then waits for the Host's finish)
    args = ["--role", "server", "--job", str(boost), "--party", "server", "--ending", ending]
    command = cli("vfl", "server", "--job", str(boost), "--party", "server", "--out", str(tmp_path))
    result = run_kit(args, command, tmp_path.with_name(f"{tmp_path.name}.console"))

    # Assert
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "FAIL" not in result.stdout, output
    assert last in result.stdout
    assert "PASS  the server sends nothing after the Hellos" in result.stdout or ending != "finish"
