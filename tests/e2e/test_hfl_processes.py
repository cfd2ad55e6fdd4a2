"""End to end through the real CLI: aggregator, Shuffler and client hosts as OS processes.

CURVE ZeroMQ on loopback; failure cases kill real processes.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import processes
import pytest

from privfl.config.horizontal import HflConfig
from privfl.runs.simulate import run_experiment

ONE_THREAD = {"OMP_NUM_THREADS": "1"}
# An aggregator started by hand: no bar, and no training.png where no check reads it (the
# private default's run-local test checks that one is drawn).
QUIET = ["--no-progress", "--no-plots"]
# The sites started by hand (one run, read by the tests of both its claims).
HAND_STARTED = pytest.mark.xdist_group("hfl_hand_started")


def privfl(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return processes.privfl(*args, timeout=timeout, env=ONE_THREAD)


def spawn(*args: str, log: Path) -> subprocess.Popen[bytes]:
    return processes.spawn(*args, log=log, env=ONE_THREAD)


def party(job: Path, role: str, name: str, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    """``privfl hfl ROLE --job JOB --party NAME --out OUT [extra]``; its console in OUT.log."""
    args = ["--job", str(job), "--party", name, "--out", str(out), *extra]
    return spawn("hfl", role, *args, log=out.with_suffix(".log"))


def wait_for_lines(path: Path, count: int, timeout: float) -> None:
    """Block until ``path`` has ``count`` lines (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} did not reach {count} lines in {timeout} s")


def wait_for_text(path: Path, text: str, timeout: float) -> None:
    """Block until ``path`` contains ``text`` (bounded): an event, not a delay."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{path} did not show {text!r} in {timeout} s"
        time.sleep(0.1)


def rounds(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


# The private default's rounds asked of run-local: its privacy settings and clients are
# the defaults' (no option names them); 10 rounds would be 2.5 times the DP-SGD steps,
# the test's whole cost, for a bar that only asks that the private default learns.
PRIVATE_ROUNDS = 4


def test_run_local_defaults_are_private_learn_and_print_the_epsilon(tmp_path: Path) -> None:
    # DP-SGD trains clients one by one: ≈ 20 s idle, minutes on a loaded machine (a bound)
    out = str(tmp_path / "run")
    rounds_asked = ["--rounds", str(PRIVATE_ROUNDS)]
    result = privfl("hfl", "run-local", *rounds_asked, "--out", out, "--no-progress", timeout=900)
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["config"]["local_dp"] == "dpsgd"  # private by default
    assert "private by default" in result.stderr
    # DP-SGD noise from the CSPRNG: the accuracy after round 4 of this job was 0.77-0.88
    # over eighteen runs (fourteen in-process, privfl.runs.simulate: the same clients and
    # noise, mean 0.84, sd 0.022; four through run-local: 0.77, 0.79, 0.87, 0.88, mean
    # 0.83, sd 0.056); 0.50 lies six run-local spreads below their mean, and the bar only
    # asks that the private default learns (after 10 rounds: 0.91-0.93; chance: 0.10,
    # the near-chance warning at 0.20)
    assert summary["accuracy"] >= 0.50 and summary["warning"] == ""
    assert summary["rounds"] == PRIVATE_ROUNDS and summary["clients"] == 10  # the default's
    assert summary["processes"] == {"aggregator": 0, "clients-1": 0, "clients-2": 0}
    # booked per row, at δ = 1e-5: 11.87 after 4 rounds of 134 rows (19.44 after 10)
    assert 0 < summary["epsilon_local_sample_level"] < 12.5
    assert "privacy ledger:" in result.stdout and "local dpsgd: ε of one row" in result.stdout
    assert "dpsgd, ε = " in result.stdout  # the results table's privacy row
    assert (tmp_path / "run" / "aggregator" / "training.png").exists()


def test_run_local_without_privacy_reaches_093_as_the_simulator_does(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = privfl(
        "hfl", "run-local", "--local-dp", "none", "--rounds", "4", "--out", str(out),
        "--no-progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["accuracy"] >= 0.93 and summary["privacy"] == "no privacy (ε = ∞)"
    assert {"epsilon_per_weight", "epsilon_per_client_round", "epsilon_total", "delta"} <= set(
        summary
    )
    # Two client processes over ZeroMQ compute what the in-process simulator computes.
    reference = run_experiment(HflConfig(rounds=4))
    assert summary["loss_history"] == pytest.approx(reference["loss_history"], rel=1e-5)


def test_shuffled_pnpm_run_opens_every_report_and_books_central_epsilon(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = privfl(
        "hfl",
        "run-local",
        "--out",
        str(out),
        "--no-progress",
        "--shuffler",
        "--mechanism",
        "pnpm",
        "--epsilon",
        "2",
        "--rounds",
        "2",
        "--clients",
        "6",
        "--client-processes",
        "1",  # one client host (one torch import fewer): the Shuffler's reports are the claim
    )
    assert result.returncode == 0, result.stderr
    records = rounds(out / "aggregator")
    assert [r["reports"] for r in records] == [6, 6] and all(
        r["invalid_reports"] == 0 for r in records
    )
    assert records[-1]["epsilon_per_weight"] == 2.0
    assert "epsilon_central_round" in records[-1]
    assert "forwarded 6" in (out / "shuffler" / "party.log").read_text()


def init_kit(tmp_path: Path, *options: str) -> Path:
    result = processes.privfl_here("hfl", "init", "--out", str(tmp_path / "kit"), *options)
    assert result.returncode == 0, result.stderr
    return tmp_path / "kit" / "job.toml"


@pytest.mark.slow
def test_slow_clients_exercise_the_window_and_dummy_padding(tmp_path: Path) -> None:
    # 2 client hosts of 2 clients; clients-2 is slow; each client joins with p = 0.5. The
    # Shuffler pads to 5 reports, one more than the 4 clients, so every round's batch is
    # padded whatever the join coins (at 4, all four joining twice, 1 in 256, left none).
    # The join window (the job's timeout) is
    # 60 s: it closes as soon as every party has joined, however slowly they start.
    # An absent host is tests/parties/horizontal/test_joins.py's.
    job = init_kit(
        tmp_path,
        "--clients",
        "4",
        "--client-processes",
        "2",
        "--shuffler",
        "--rounds",
        "2",
        "--participation",
        "0.5",
        "--timeout",
        "60",
        "--round-timeout",
        "10",
    )
    text = (
        job.read_text()
        .replace("min_reports = 0", "min_reports = 5")
        # p = 0.5: a round may have no valid report at all, which the default would stop
        .replace("min_valid_reports = 1", "min_valid_reports = 0")
        .replace("slot_seconds = 1.0", "slot_seconds = 0.3")
    )
    job.write_text(text)
    agg = party(job, "aggregator", "aggregator", tmp_path / "agg", *QUIET)
    party(job, "shuffler", "shuffler", tmp_path / "shuf")
    party(job, "client", "clients-1", tmp_path / "c1")
    party(job, "client", "clients-2", tmp_path / "c2", "--slow", "0.4")
    assert agg.wait(timeout=180) == 0, (tmp_path / "agg.log").read_text()
    records = rounds(tmp_path / "agg")
    assert len(records) == 2
    shuffler_log = (tmp_path / "shuf" / "party.log").read_text()
    assert "dummies" in shuffler_log
    # Every batch was padded to at least 5; the aggregator dropped exactly the dummies.
    padded = [
        int(line.split(" dummies")[0].split()[-1])
        for line in shuffler_log.splitlines()
        if " dummies" in line
    ]
    assert len(padded) == 2 and all(p > 0 for p in padded)
    assert [r["invalid_reports"] for r in records] == padded
    assert all(r["reports"] + r["invalid_reports"] >= 5 for r in records)


def test_a_secure_aggregation_run_over_the_network_unmasks_groups_and_books_epsilon(
    tmp_path: Path,
) -> None:
    # One aggregator and two client hosts of two clients; groups of 2 (two group sums a
    # round); each client adds its Skellam share (ddp_noise). The sums equal the plaintext
    # ones exactly: tests/parties/horizontal/test_secure_rounds.py, over the same stages.
    job = init_kit(
        tmp_path, "--clients", "4", "--rounds", "2", "--local-epochs", "1", "--timeout", "240"
    )
    text = (
        job.read_text()
        .replace("secure_aggregation = false", "secure_aggregation = true")
        .replace("secagg_group = 4", "secagg_group = 2")
        .replace("ddp_noise = 0.0", "ddp_noise = 1.0")
    )
    job.write_text(text)
    agg = party(job, "aggregator", "aggregator", tmp_path / "agg", *QUIET)
    hosts = [party(job, "client", f"clients-{i}", tmp_path / f"c{i}") for i in (1, 2)]

    assert agg.wait(timeout=300) == 0, (tmp_path / "agg.log").read_text()
    assert all(h.wait(timeout=60) == 0 for h in hosts), (tmp_path / "c1.log").read_text()
    records = rounds(tmp_path / "agg")
    assert [r["reports"] for r in records] == [2, 2]  # one noisy mean per group
    summary = json.loads((tmp_path / "agg" / "summary.json").read_text())
    assert 0 < summary["epsilon_distributed"] < math.inf
    assert "other members of its groups add" in summary["epsilon_distributed_assumptions"]
    assert "sent 2 masked input(s)" in (tmp_path / "c1" / "party.log").read_text()


@dataclass(frozen=True)
class HandStarted:
    """A job whose sites were started by hand: clients-1 first, then the aggregator and
    clients-2 (slowed), which is killed once the first round is in."""

    folder: Path
    codes: dict[str, int]


@pytest.fixture(scope="module")
def hand_started(tmp_path_factory: pytest.TempPathFactory) -> HandStarted:
    tmp_path = tmp_path_factory.mktemp("hand-started")
    # The timeout: how long clients-1 waits for the aggregator's interpreter to start (it
    # imports torch: over a minute on a loaded machine); a run that works waits for none.
    job = init_kit(
        tmp_path, "--clients", "6", "--rounds", "6", "--round-timeout", "4", "--timeout", "240"
    )
    client = party(job, "client", "clients-1", tmp_path / "c1")
    # The aggregator starts once the client says on its terminal that it waits.
    wait_for_text(tmp_path / "c1.log", "waiting for aggregator at tcp://", 300)
    agg = party(job, "aggregator", "aggregator", tmp_path / "agg", *QUIET)
    victim = party(job, "client", "clients-2", tmp_path / "c2", "--slow", "0.3")
    wait_for_lines(tmp_path / "agg" / "metrics.jsonl", 1, 300)
    victim.send_signal(signal.SIGKILL)
    codes = {"aggregator": agg.wait(timeout=180), "clients-1": client.wait(timeout=60)}
    return HandStarted(tmp_path, codes)


@HAND_STARTED
def test_a_client_host_started_before_the_aggregator_waits_for_it(
    hand_started: HandStarted,
) -> None:
    folder = hand_started.folder
    assert hand_started.codes["aggregator"] == 0, (folder / "agg.log").read_text()
    assert hand_started.codes["clients-1"] == 0, (folder / "c1.log").read_text()
    assert len(rounds(folder / "agg")) == 6  # every round, its first with clients-1 in it
    assert rounds(folder / "agg")[0]["reports"] == 6


@HAND_STARTED
def test_a_client_host_that_dies_mid_run_does_not_stop_the_job(hand_started: HandStarted) -> None:
    folder = hand_started.folder
    assert hand_started.codes["aggregator"] == 0, (folder / "agg.log").read_text()
    records = rounds(folder / "agg")
    assert len(records) == 6
    assert records[0]["reports"] == 6 and records[-1]["reports"] == 3
    summary = json.loads((folder / "agg" / "summary.json").read_text())
    assert summary["dropped_hosts"] == ["clients-2"] and summary["accuracy"] > 0.5
    assert not (folder / "agg" / "training.png").exists()  # started with --no-plots


@pytest.mark.slow
@pytest.mark.serial  # a wall-clock bound
def test_clients_exit_with_a_clear_error_when_the_aggregator_dies(tmp_path: Path) -> None:
    job = init_kit(
        tmp_path,
        "--clients",
        "4",
        "--client-processes",
        "1",
        "--rounds",
        "50",
        "--timeout",
        "600",
        "--round-timeout",
        "3",
    )
    agg = party(job, "aggregator", "aggregator", tmp_path / "agg", "--no-progress")
    client = party(job, "client", "clients-1", tmp_path / "c1")
    wait_for_lines(tmp_path / "agg" / "metrics.jsonl", 1, 90)
    agg.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    assert client.wait(timeout=60) == 1
    assert time.monotonic() - killed < 15  # the lost connection, not the 600 s timeout
    output = (tmp_path / "c1.log").read_text().strip().splitlines()
    # Waiting for the next round ("no round_start … from aggregator") or sending to it.
    assert output[-1].startswith("privfl: error: ")
    assert "aggregator" in output[-1] and "Traceback" not in "".join(output)


def test_bad_job_file_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "job.toml"
    bad.write_text("session = 'x'\n[hfl]\nmechanism = 'magic'\n")
    result = privfl("hfl", "client", "--job", str(bad), "--party", "clients-1")
    assert result.returncode == 1
    line = result.stderr.strip()
    assert line.startswith(f"privfl: error: job file {bad}: invalid hfl setting: mechanism"), line
    missing = privfl("hfl", "run-local", "--job", str(tmp_path / "none.toml"))
    assert missing.returncode == 1 and "not found" in missing.stderr
    no_files = privfl("hfl", "run-local", "--dataset", "mnist", "--out", str(tmp_path / "r"))
    assert no_files.returncode == 1
    assert no_files.stderr.strip().splitlines()[-1].startswith("privfl: error: dataset mnist")


def test_compare_writes_a_markdown_table(tmp_path: Path) -> None:
    # In this process: compare simulates its runs in-process anyway (no parties to start).
    out = tmp_path / "results.md"
    result = processes.privfl_here(
        "hfl", "compare", "--mechanisms", "pnpm,gaussian", "--epsilons", "2",
        "--clients", "4", "--rounds", "1", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 3  # header + none, pnpm, gaussian
    assert "| pnpm | 2 | per weight | 4 |" in out.read_text()
    bad = processes.privfl_here("hfl", "compare", "--mechanisms", "magic")
    assert bad.returncode == 2 and "mechanisms from" in bad.stderr
