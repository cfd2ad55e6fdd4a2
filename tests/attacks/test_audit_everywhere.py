"""Attack (governance): edit or rewrite the audit log of a horizontal run or a prediction session.

The horizontal roles (aggregator, Shuffler, client hosts) and every ``vfl predict``
session write ``audit.jsonl`` as the vertical training does: hash-chained, cross-checked
by link digests, and anchored by the chain heads each party sends its peers. Real
processes: one ``hfl run-local`` with a Shuffler, and one prediction session of the
three vertical parties on a kit trained by tests/attacks/conftest.py.

``privfl audit verify`` passes on each untouched, flags an edited line in each, and
catches a whole-chain rewrite with the peers' logs present; leaky arm: the chain alone
(``--chains-only``) passes that rewrite.
"""

from __future__ import annotations

import csv
import json
import shutil
import tomllib
from pathlib import Path

import pytest
from processes import privfl, reap, spawn_predict

from privfl.data.views import bundled
from privfl.parties.audit import FILE_NAME, GENESIS, line_hash
from privfl.tools.audit.verify import verify

ROWS = 12


@pytest.fixture(scope="module")
def hfl_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hfl") / "run"
    # One local epoch: the logs' lines are per round and message, not per local step. No
    # local DP and one client host (three parties: aggregator, Shuffler, client host): the
    # logs record the messages, whatever the training does with them, and each party
    # process costs its torch import.
    result = privfl(
        "hfl", "run-local", "--out", str(out), "--no-progress", "--shuffler", "--rounds", "2",
        "--clients", "4", "--client-processes", "1", "--local-dp", "none", "--local-epochs", "1",
        "--timeout", "300", timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def predict_session(
    vertical_runs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """One prediction session of server, host and guest-1, each in its own folder."""
    run, _ = vertical_runs
    tmp = tmp_path_factory.mktemp("predict")
    job_path = run / "kit" / "job.toml"
    job = tomllib.loads(job_path.read_text())
    x, names, _, _ = bundled("breast_cancer")
    processes = {}
    try:
        for name, spec in job["parties"].items():
            log, out = tmp / f"{name}.log", tmp / "pred" / name / "p.csv"
            if spec["role"] == "server":
                processes[name] = spawn_predict(job_path, name, out, log=log)
                continue
            rows = tmp / "new" / f"{name}.csv"
            rows.parent.mkdir(parents=True, exist_ok=True)
            with rows.open("w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow([names[c] for c in spec["columns"]])
                writer.writerows(x[:ROWS, spec["columns"]].tolist())
            processes[name] = spawn_predict(
                job_path, name, out, log=log, model=run / name, data=rows
            )
        codes = {name: p.wait(timeout=180) for name, p in processes.items()}
    finally:
        reap()
    assert set(codes.values()) == {0}, {n: (tmp / f"{n}.log").read_text() for n in processes}
    return tmp / "pred"


def copy_of(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(run, target, ignore=shutil.ignore_patterns("kit", "checkpoints", "*.pt"))
    return target


def edit_a_middle_line(log: Path) -> None:
    lines = log.read_text().splitlines()
    sent = [i for i, line in enumerate(lines) if json.loads(line)["direction"] == "sent"]
    i = sent[len(sent) // 2]
    record = json.loads(lines[i])
    lines[i] = json.dumps(record | {"size": record["size"] + 1})
    log.write_text("".join(line + "\n" for line in lines))


def rewrite_everything(log: Path) -> None:
    """Every time and hmac_sha256 replaced, every seq and prev recomputed."""
    out, prev = [], GENESIS
    for seq, line in enumerate(log.read_text().splitlines()):
        record = json.loads(line) | {"time": "2026-01-01T00:00:00.000000+00:00"}
        if "hmac_sha256" in record:
            record["hmac_sha256"] = line_hash(line)
        out.append(json.dumps(record | {"seq": seq, "prev": prev}))
        prev = line_hash(out[-1])
    log.write_text("".join(line + "\n" for line in out))


CASES = [("hfl", "aggregator"), ("hfl", "shuffler"), ("predict", "host"), ("predict", "server")]


@pytest.fixture
def runs(hfl_run: Path, predict_session: Path) -> dict[str, Path]:
    return {"hfl": hfl_run, "predict": predict_session}


@pytest.mark.parametrize("which", ["hfl", "predict"])
def test_every_party_writes_a_log_and_an_untouched_one_passes(
    runs: dict[str, Path], which: str
) -> None:
    run = runs[which]
    parties = sorted(p.name for p in run.iterdir() if p.is_dir() and p.name != "kit")

    report = verify([run])

    assert report.ok, report.findings
    # the closing exchange: each party's lines up to its last heads are anchored in a
    # peer's log, and after them come only last heads that both ends record (no note)
    assert not report.notes, report.notes
    assert len(report.chains) == len(parties) >= 3
    assert all((run / p / FILE_NAME).is_file() for p in parties)
    anchored = [
        line for c in report.chains for s in c.sessions for line in s.lines
        if "anchor" in line.record
    ]  # fmt: skip
    assert anchored  # the heads really travel in these modes too


@pytest.mark.parametrize(("which", "party"), CASES)
def test_an_edited_line_is_flagged(
    runs: dict[str, Path], tmp_path: Path, which: str, party: str
) -> None:
    run = copy_of(runs[which], tmp_path)
    log = run / party / FILE_NAME
    edit_a_middle_line(log)

    report = verify([run])

    assert any(f.startswith(f"{log}:") and "does not chain to line" in f for f in report.findings)


@pytest.mark.parametrize(("which", "party"), CASES)
@pytest.mark.parametrize("cross", [True, False], ids=["with-peers", "leaky-chain-only"])
def test_a_whole_chain_rewrite_is_caught_only_with_the_peers_logs(
    runs: dict[str, Path], tmp_path: Path, which: str, party: str, cross: bool
) -> None:
    run = copy_of(runs[which], tmp_path)
    log = run / party / FILE_NAME
    rewrite_everything(log)

    report = verify([run], cross=cross)

    assert report.ok is not cross, report.findings
    if cross:
        assert any(
            f.startswith(f"{log}:") and "do not end in the head" in f for f in report.findings
        )
