"""End to end through the real CLI: separate OS processes, CURVE ZeroMQ on loopback."""

from __future__ import annotations

import json
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from processes import WEAK, privfl, privfl_here, spawn_parties

from privfl.data.views import GUEST_DEMO_COLUMNS, central_baseline, demo_columns

SUMMARY_KEYS = {
    "accuracy",
    "precision",
    "recall",
    "f1",
    "auc",
    "loss_history",
    "epoch_seconds",
    "label_epsilon",
    "flip",
    "key_bits",
    "epochs",
    "guests",
    "wall_seconds",
    "split_seed",
    "test_size",
}


def feature_names(columns: tuple[int, ...]) -> set[str]:
    from sklearn.datasets import load_breast_cancer

    names = load_breast_cancer().feature_names
    return {str(names[c]) for c in columns}


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@dataclass(frozen=True)
class Run:
    """A finished ``privfl vfl run-local``: its folder and its console."""

    out: Path
    result: subprocess.CompletedProcess[str]


def run_local(out: Path, *options: str) -> Run:
    args = ["vfl", "run-local", *WEAK, *options, "--out", str(out), "--no-progress"]
    result = privfl(*args, timeout=600)  # a cap: the machine is shared
    assert result.returncode == 0, result.stderr
    return Run(out, result)


@pytest.fixture(scope="module")
def without_label_dp(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One guest, the default 30 epochs, label DP off: read by two tests below."""
    return run_local(tmp_path_factory.mktemp("no-label-dp") / "run", "--label-epsilon", "inf")


ONE_RUN = pytest.mark.xdist_group("cli_without_label_dp")


@pytest.mark.parametrize("guests", [pytest.param(1, marks=ONE_RUN), 2])
def test_run_local_writes_every_output(
    request: pytest.FixtureRequest, tmp_path: Path, guests: int
) -> None:
    # Prepare: 2 guests, 3 epochs at the default label ε (1.5), each party inline (the
    # 1-guest run starts the default pools); 1 guest: the run without label DP below (30
    # epochs), whose accuracy test_without_label_dp_… bounds.
    if guests == 1:
        run: Run = request.getfixturevalue("without_label_dp")
    else:
        run = run_local(tmp_path / "run", "--epochs", "3", "--guests", "2", "--workers", "1")
    out, result = run.out, run.result
    epochs = 30 if guests == 1 else 3

    assert "joint accuracy" in result.stdout and "joint AUC" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= SUMMARY_KEYS
    assert summary["guests"] == guests and summary["max_epochs"] == epochs
    assert summary["key_bits"] == 512
    assert 0 < summary["epochs"] == len(summary["loss_history"]) <= epochs
    host = out / "host"
    assert len((host / "metrics.jsonl").read_text().splitlines()) == summary["epochs"]
    if guests == 2:
        # Fresh flips (ε = 1.5) and a fresh private start: the plaintext twin over 5,000
        # draws (benchmarks/assert_tails.py glm-cli-3-*; full batches, so 1 and 2 guests
        # agree) ends at loss 0.555 median, 0.617 at most (0.7: 7.4 sd above the mean),
        # accuracy median 0.930, minimum 0.846 (0.80: 7.0 sd below the mean).
        assert summary["epochs"] == 3 and summary["loss_history"][-1] < 0.7
        assert summary["accuracy"] > 0.80
    assert (host / "training.png").stat().st_size > 1000
    # The centralised reference is recorded and printed beside the joint model.
    [reference] = summary["references"]
    assert reference["name"] == "sklearn LogisticRegression"
    assert reference["metric"] == "accuracy"
    assert reference["value"] == central_baseline("breast_cancer", 0.25, 0)
    assert "centralised sklearn LR (reference)" in result.stdout
    # The whole command, not only the Host's loop: start-up and key generation count.
    assert summary["wall_seconds"] > summary["host_wall_seconds"]
    host_model = json.loads((host / "model.json").read_text())
    assert set(host_model["weights"]) == feature_names(tuple(range(10)))
    assert "bias" in host_model
    shares = demo_columns(guests)
    seen: set[str] = set()
    for i in range(guests):
        name = f"guest-{i + 1}"
        model = json.loads((out / name / "model.json").read_text())
        assert set(model["weights"]) == feature_names(shares[name])
        assert "bias" not in model
        seen |= set(model["weights"])
    assert seen == feature_names(GUEST_DEMO_COLUMNS)
    assert not (out / "server" / "model.json").exists()
    assert (out / "server" / "party.log").exists()
    secret = out / "kit" / "keys" / "server.key_secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600


@ONE_RUN
def test_without_label_dp_matches_central_logistic_regression(without_label_dp: Run) -> None:
    summary = json.loads((without_label_dp.out / "summary.json").read_text())
    baseline = central_baseline("breast_cancer", 0.25, 0)
    assert summary["flip"]["count"] == 0
    # The Host's private start (learning/start.py) moves the 30-epoch model a little. Its
    # plaintext twin over 20,000 starts (benchmarks/assert_tails.py glm-cli-30-inf) got
    # 134 of the 143 test rows right 8 times, 135: 1,348, 136: 10,649, 137: 7,985, 138: 10
    # (sklearn: 137). The bound fails at 131 or fewer: 134 was 168 times rarer than 135,
    # and at no better a rate 131 comes once in 10^10 runs (133, the old bound 0.025 under,
    # once in 400,000).
    assert summary["accuracy"] >= baseline - 0.035, (summary["accuracy"], baseline)


def test_kit_runs_as_separate_commands(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    made = privfl_here("init", "vfl", "--out", str(kit), *WEAK, "--epochs", "2", "--guests", "2")
    assert made.returncode == 0, made.stderr
    job = kit / "job.toml"
    assert {p.name for p in (kit / "keys").iterdir()} == {
        f"{n}{suffix}"
        for n in ("server", "host", "guest-1", "guest-2")
        for suffix in (".key", ".key_secret")
    }
    runs = tmp_path / "runs"
    roles = [("server", "server"), ("host", "host"), ("guest", "guest-1"), ("guest", "guest-2")]
    # No plots (no check here reads them: run-local's above do) and each data holder's
    # Paillier work inline: no pools of worker processes to start (run-local's run them).
    inline = {name: ["--workers", "1"] for name in ("host", "guest-1", "guest-2")}
    extra = inline | {"host": ["--no-plots", "--workers", "1"]}
    procs = spawn_parties(job, runs, lambda name: tmp_path / f"{name}.log", extra, roles)
    codes = [p.wait(timeout=120) for p in procs.values()]
    assert codes == [0, 0, 0, 0], [(tmp_path / f"{n}.log").read_text() for n in ("host",)]
    assert json.loads((runs / "host" / "summary.json").read_text())["epochs"] == 2
    assert (runs / "guest-2" / "model.json").exists()


def test_unknown_party_is_a_one_line_error(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    assert privfl_here("init", "vfl", "--out", str(kit), *WEAK).returncode == 0
    result = privfl("vfl", "host", "--job", str(kit / "job.toml"), "--party", "nobody")
    assert_one_line_error(result, "no party named 'nobody'", "guest-1", "server")


# A missing data file: tests/e2e/test_local_checks.py (one line, shown at once).


def test_missing_job_file_is_a_one_line_error(tmp_path: Path) -> None:
    result = privfl("vfl", "server", "--job", str(tmp_path / "nope.toml"), "--party", "server")
    assert_one_line_error(result, "nope.toml", "privfl init vfl")


@pytest.mark.parametrize("command", [["init", "vfl", "--out", "KIT"], ["vfl", "run-local"]])
def test_weak_keys_need_the_flag(tmp_path: Path, command: list[str]) -> None:
    args = [str(tmp_path / "kit") if a == "KIT" else a for a in command]
    result = privfl(
        *args,
        "--key-bits",
        "1024",
        "--out" if "run-local" in args else "--seed",
        str(tmp_path / "o") if "run-local" in args else "0",
    )
    assert_one_line_error(result, "1024", "--allow-weak-keys")
    assert not (tmp_path / "kit").exists()


@pytest.mark.parametrize(
    "command",
    [[], ["vfl"], ["vfl", "run-local"], ["vfl", "host"], ["init", "vfl"], ["keys", "gen"]],
)
def test_help_teaches(command: list[str]) -> None:
    result = privfl(*command, "--help")
    assert result.returncode == 0
    assert "Usage:" in result.stdout and len(result.stdout.splitlines()) > 5
