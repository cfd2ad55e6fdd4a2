"""`privfl board`'s routes without a browser: run folders made by hand, the ASGI app in memory.

The status of a run, its live records, the refusal of every path that leaves a run or
names a key, the token, the Host-header check, the ledger as `privfl site budget --json`
prints it, and the command's one-line refusals.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from processes import privfl

httpx = pytest.importorskip(
    "httpx", reason="the board's tests need httpx (pip install -e '.[test]')"
)
pytest.importorskip("starlette", reason="privfl board needs starlette (pip install -e '.[board]')")

from privfl.tools.board.app import Board, create_app  # noqa: E402

JOBS = Path(__file__).parents[1] / "policy_fixture" / "accepted"
LOG = "2026-11-28 08:54:{:02d},512 {} privfl.{}: {}\n"


def get(board: Board, url: str, **kwargs: Any) -> httpx.Response:
    """One GET against the app in memory (no socket), as the browser on the loopback sends it."""

    async def fetch() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(board))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.get(url, **kwargs)

    return asyncio.run(fetch())


def party(folder: Path, lines: list[str], records: list[dict[str, Any]] | None = None) -> None:
    folder.mkdir(parents=True)
    (folder / "party.log").write_text("".join(lines))
    if records is not None:
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A folder of runs: one finished, one running (a half-written record), one failed."""
    root = tmp_path / "runs"
    done = root / "20261128-0854"
    lines = [LOG.format(1, "INFO", "host", "start"), LOG.format(9, "INFO", "host", "end")]
    epochs = [
        {"epoch": 0, "loss": 0.5, "accuracy": 0.8},
        {"epoch": 1, "loss": 0.4, "accuracy": 0.9},
    ]
    party(done / "host", lines, epochs)
    party(done / "guest-1", [LOG.format(2, "INFO", "guest", "start")])
    summary = {
        "accuracy": 0.9,
        "auc": 0.95,
        "model": {"kind": "logistic"},
        "stop_reason": "max_epochs",
        "references": [{"name": "pooled", "metric": "accuracy", "value": 0.96}],
    }
    (done / "summary.json").write_text(json.dumps(summary))
    live = root / "20261128-0900"
    party(live / "host", [LOG.format(3, "INFO", "channel", "waiting for forward from guest-1")],
          [{"epoch": 0, "loss": 0.6, "accuracy": 0.7}])  # fmt: skip
    with (live / "host" / "metrics.jsonl").open("a") as handle:
        handle.write('{"epoch": 1, "lo')  # the Host is writing this record now
    party(live / "guest-1", [LOG.format(4, "INFO", "guest", "epoch 1")])
    (live / "kit").mkdir()
    (live / "kit" / "job.toml").write_text((JOBS / "vertical.toml").read_text())
    failed = root / "20261128-0910"
    party(failed, [LOG.format(5, "ERROR", "session", "host stopped: guest-1 went silent")])
    (done / "kit" / "keys").mkdir(parents=True)
    (done / "kit" / "keys" / "host.key_secret").write_text("secret")
    (done / "host" / "checkpoints").mkdir()
    (done / "host" / "checkpoints" / "epoch-00001.json").write_text("{}")
    (done / "host" / "training.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return root


def test_the_runs_table_tells_finished_running_and_failed_apart(runs: Path) -> None:
    rows = {r["id"]: r for r in get(Board([runs]), "/api/runs").json()}
    assert rows["20261128-0854"]["status"] == "finished"
    assert rows["20261128-0854"]["metrics"] == {"accuracy": 0.9, "auc": 0.95}
    assert rows["20261128-0854"]["parties"] == ["guest-1", "host"]
    assert rows["20261128-0854"]["started"] == "2026-11-28 08:54:01"
    assert rows["20261128-0854"]["ended"] == "2026-11-28 08:54:09"
    assert rows["20261128-0900"]["status"] == "running" and rows["20261128-0900"]["ended"] == ""
    assert rows["20261128-0910"]["status"] == "failed"
    assert rows["20261128-0910"]["reason"].endswith("host stopped: guest-1 went silent")
    assert list(rows) == ["20261128-0910", "20261128-0900", "20261128-0854"]  # newest first


def test_the_live_view_skips_a_record_being_written(runs: Path) -> None:
    live = get(Board([runs]), "/api/runs/20261128-0900/live").json()
    assert (live["done"], live["steps"], live["curves"]["loss"]) == (1, [1], [0.6])
    assert (live["planned"], live["unit"]) == (10, "epoch")  # from kit/job.toml
    assert live["parties"]["host"]["message"] == "waiting for forward from guest-1"
    finished = get(Board([runs]), "/api/runs/20261128-0854/live").json()
    assert finished["references"][0]["value"] == 0.96


@pytest.mark.parametrize(
    "path",
    [
        "..%2F..%2F..%2Fetc%2Fpasswd",
        "host%2F..%2F..%2F20261128-0900%2Fhost%2Fparty.log",
        "%2Fetc%2Fpasswd",
        "kit/keys/host.key_secret",
        "host/checkpoints/epoch-00001.json",
        "host/linked.png",
        "host/inside.png",
    ],
)
def test_a_path_outside_the_run_or_to_a_key_is_refused(runs: Path, path: str) -> None:
    done = runs / "20261128-0854"
    (done / "host" / "linked.png").symlink_to("/etc/passwd")
    (done / "host" / "inside.png").symlink_to(done / "host" / "training.png")
    response = get(Board([runs]), f"/runs/20261128-0854/files/{path}")
    assert response.status_code in (403, 404)
    assert "root:" not in response.text and "secret" not in response.text


def test_a_run_output_is_served_and_an_unknown_run_is_not(runs: Path) -> None:
    board = Board([runs])
    plot = get(board, "/runs/20261128-0854/files/host/training.png")
    assert plot.status_code == 200 and plot.headers["content-type"] == "image/png"
    assert get(board, "/runs/20261128-0854/files/host/party.log").text.endswith("end\n")
    assert get(board, "/api/runs/..%2F..%2Fetc/live").status_code == 404
    assert get(board, "/static/..%2Fapp.py").status_code == 404


def test_with_a_token_every_request_must_carry_it(runs: Path) -> None:
    board = Board([runs], token="s3cret")
    assert get(board, "/api/runs").status_code == 401
    assert get(board, "/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert get(board, "/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    first = get(board, "/?token=s3cret")
    assert first.status_code == 200 and "HttpOnly" in first.headers["set-cookie"]
    cookie = {"Cookie": "privfl_board=s3cret"}
    assert get(board, "/api/runs", headers=cookie).status_code == 200


def test_on_the_loopback_a_foreign_host_name_is_refused(runs: Path) -> None:
    """A page elsewhere cannot reach the board through a name it rebinds to 127.0.0.1."""
    assert get(Board([runs]), "/api/runs", headers={"Host": "evil.example"}).status_code == 400


def test_the_ledger_is_what_site_budget_prints(runs: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('ledger = "ledger.json"\n[projects.sepsis]\nmax_epsilon = 20\n')
    ledger = get(Board([runs], policy_file=policy), "/api/ledger").json()
    printed = privfl("site", "budget", "--json", "--policy", str(policy))
    assert printed.returncode == 0, printed.stderr
    assert {k: ledger[k] for k in ("projects", "runs", "refused")} == {
        k: json.loads(printed.stdout)[k] for k in ("projects", "runs", "refused")
    }
    assert get(Board([runs]), "/api/ledger").json()["error"].startswith("no site policy")


def test_the_command_refuses_in_one_line(runs: Path, tmp_path: Path) -> None:
    open_bind = privfl("board", str(runs), "--bind", "0.0.0.0:0", env={"PRIVFL_BOARD_TOKEN": ""})
    assert open_bind.returncode == 1
    assert open_bind.stderr.strip().count("\n") == 0 and "needs --token" in open_bind.stderr
    bad = privfl("board", str(runs), "--bind", "127.0.0.1")
    assert bad.returncode == 1 and "give HOST:PORT" in bad.stderr
    missing = privfl("board", str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "no run folder at" in missing.stderr
