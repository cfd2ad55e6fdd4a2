"""Attack (governance): edit, delete, reorder, cut or swap a party's audit log after a run.

A party's ``audit.jsonl`` records every message it sent and received. Someone with
write access to the file (the party's operator, wishing to hide a message) edits it.
Each line is hash-chained to the one before and the logs of one session are matched
message by message through the ``link`` digest both ends record, so ``privfl audit
verify`` flags every such edit. The leaky arm: a party that rewrites its whole chain
consistently passes the chain check alone (``--chains-only``); only the cross-check
against its peers' logs catches it.

Logs from two real runs (three processes each, 512-bit test keys), made once per session.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from processes import privfl_here

from privfl.parties.audit import FILE_NAME, GENESIS, line_hash
from privfl.tools.audit.verify import verify

Tamper = Callable[[list[str]], list[str]]


@pytest.fixture
def runs(vertical_runs: tuple[Path, Path]) -> tuple[Path, Path]:
    """Two finished sessions (tests/attacks/conftest.py): a to tamper with, b to swap in."""
    return vertical_runs


def copy_of(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / run.name
    shutil.copytree(run, target, ignore=shutil.ignore_patterns("kit", "checkpoints"))
    return target


def rewrite(log: Path, tamper: Tamper) -> None:
    log.write_text("".join(line + "\n" for line in tamper(log.read_text().splitlines())))


def middle_message(lines: list[str]) -> int:
    """The index of a sent line in the middle of the log (not opened, not closed)."""
    sent = [i for i, line in enumerate(lines) if json.loads(line)["direction"] == "sent"]
    return sent[len(sent) // 2]


def edit(lines: list[str]) -> list[str]:
    i = middle_message(lines)
    record = json.loads(lines[i])
    lines[i] = json.dumps(record | {"size": record["size"] + 1})
    return lines


def delete(lines: list[str]) -> list[str]:
    del lines[middle_message(lines)]
    return lines


def swap(lines: list[str]) -> list[str]:
    i = middle_message(lines)
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return lines


def truncate(lines: list[str]) -> list[str]:
    return lines[:-3]


def test_an_untouched_session_passes(runs: tuple[Path, Path]) -> None:
    run, _ = runs

    report = verify([run])

    assert report.ok, report.findings
    assert len(report.chains) == 3  # server, host, guest-1


@pytest.mark.parametrize(
    ("tamper", "expected", "peers_disagree"),
    [
        (edit, "does not chain to line", True),
        (delete, "expected", True),
        (swap, "does not chain to line", False),
        (truncate, "has no closed line", True),
    ],
    ids=["edited-line", "deleted-line", "swapped-lines", "truncated"],
)
@pytest.mark.parametrize("which", [0, 1], ids=["default-workers", "one-worker"])
def test_each_tampering_is_flagged(
    runs: tuple[Path, Path],
    tmp_path: Path,
    tamper: Tamper,
    expected: str,
    peers_disagree: bool,
    which: int,
) -> None:
    # Prepare: either run (the second's parties stop sooner after training)
    run = copy_of(runs[which], tmp_path)
    log = run / "host" / FILE_NAME
    rewrite(log, tamper)

    # Act
    report = verify([run])

    # Assert: the chain breaks where the host's log was changed; where a line is gone,
    # the guest's or the Server's log also disagrees with it (the last 3 lines too: they
    # are the closing exchange's last heads, which each peer records, and the closed line).
    assert not report.ok
    assert any(f.startswith(f"{log}:") and expected in f for f in report.findings), report.findings
    disagree = [f for f in report.findings if "which the peer's log does not record" in f]
    assert bool(disagree) is peers_disagree, report.findings


def test_a_log_cut_mid_line_is_flagged(runs: tuple[Path, Path], tmp_path: Path) -> None:
    run = copy_of(runs[0], tmp_path)
    log = run / "guest-1" / FILE_NAME
    log.write_text(log.read_text()[:-40])

    findings = verify([run]).findings

    assert any("the last line is cut short" in f for f in findings), findings


def test_a_log_replaced_by_another_sessions_is_flagged(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    # Prepare: guest-1's log of session a is replaced by its (intact) log of session b.
    run = copy_of(runs[0], tmp_path)
    shutil.copyfile(runs[1] / "guest-1" / FILE_NAME, run / "guest-1" / FILE_NAME)

    # Act
    report = verify([run])

    # Assert: each chain is intact, yet the Host and the Server talked to a guest-1
    # whose log of their session is missing, and the guest's peers of its session too.
    assert all(not chain.findings for chain in report.chains)
    missing = [f for f in report.findings if "no log of guest-1 for that session" in f]
    assert {f.split(":")[0] for f in missing} == {
        str(run / "host" / FILE_NAME),
        str(run / "server" / FILE_NAME),
    }
    assert any("no log of host for that session" in f for f in report.findings)


def rechain(lines: list[str]) -> list[str]:
    """A deviating party's rewrite: hide a message, then recompute every seq and prev."""
    records = [json.loads(line) for line in delete(lines)]
    out: list[str] = []
    prev = GENESIS
    for seq, record in enumerate(records):
        out.append(json.dumps(record | {"seq": seq, "prev": prev}))
        prev = line_hash(out[-1])
    return out


@pytest.mark.parametrize("cross", [True, False], ids=["cross-checked", "leaky-chain-only"])
def test_a_consistent_rewrite_is_caught_only_by_the_peers_logs(
    runs: tuple[Path, Path], tmp_path: Path, cross: bool
) -> None:
    # Prepare: the Host rewrites its whole chain, consistently.
    run = copy_of(runs[0], tmp_path)
    rewrite(run / "host" / FILE_NAME, rechain)

    # Act
    report = verify([run], cross=cross)

    # Assert: the chain alone cannot tell; the receiver's log still holds the hidden message.
    assert report.ok is not cross, report.findings
    if cross:
        hidden = [f for f in report.findings if "which the peer's log does not record" in f]
        (finding,) = hidden
        assert "from host, which the peer's log does not record as sent" in finding
    else:
        assert any("cannot be told" in n for n in report.notes), report.notes


def rewrite_everything(lines: list[str]) -> list[str]:
    """A party's whole-chain rewrite that keeps every message: each ``hmac_sha256`` and
    ``time`` replaced (another payload claimed, another hour), every seq and prev redone."""
    out: list[str] = []
    prev = GENESIS
    for seq, line in enumerate(lines):
        record = json.loads(line) | {"time": "2026-01-01T00:00:00.000000+00:00"}
        if "hmac_sha256" in record:
            record["hmac_sha256"] = line_hash(line)  # any 64 hex digits
        out.append(json.dumps(record | {"seq": seq, "prev": prev}))
        prev = line_hash(out[-1])
    return out


@pytest.mark.parametrize("peer", ["guest-1", "server"])
def test_a_whole_chain_rewrite_is_caught_with_any_one_peers_log(
    runs: tuple[Path, Path], tmp_path: Path, peer: str
) -> None:
    # Prepare: the Host rewrites every line; only its log and one peer's are given.
    run = copy_of(runs[0], tmp_path)
    rewrite(run / "host" / FILE_NAME, rewrite_everything)

    # Act
    report = verify([run / "host", run / peer])

    # Assert: the heads the Host sent that peer no longer match its log.
    heads = [f for f in report.findings if "do not end in the head" in f]
    assert heads and all(f.startswith(str(run / "host" / FILE_NAME)) for f in heads)
    assert all(f"that {peer} recorded from host" in f for f in heads), heads


def test_leaky_arm_without_the_heads_a_whole_chain_rewrite_passes(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    run = copy_of(runs[0], tmp_path)
    rewrite(run / "host" / FILE_NAME, rewrite_everything)

    report = verify([run], anchors=False)  # every peer's log present, heads not checked

    assert report.ok, report.findings


def test_every_party_anchors_its_chain_in_each_peers_log(runs: tuple[Path, Path]) -> None:
    """The heads are really sent and recorded: each party's log holds heads of each peer."""
    run, _ = runs
    for party in ("server", "host", "guest-1"):
        lines = [json.loads(x) for x in (run / party / FILE_NAME).read_text().splitlines()]
        anchored = {r["peer"] for r in lines if "anchor" in r and r["direction"] == "received"}
        peers = {r["peer"] for r in lines if r["direction"] == "received"} - {None}
        assert anchored == peers, (party, anchored, peers)


def test_the_command_line_flags_exports_and_rechecks(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    run = copy_of(runs[0], tmp_path)
    rewrite(run / "server" / FILE_NAME, delete)
    export = tmp_path / "review.json"

    checked = privfl_here("audit", "verify", *(str(p) for p in sorted(run.iterdir()) if p.is_dir()))
    exported = privfl_here("audit", "export", str(run), "--out", str(export))
    rechecked = privfl_here("audit", "verify", str(export))

    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    findings = checked.stdout.splitlines()[:-1]
    assert findings and all(f.startswith(str(run)) for f in findings), checked.stdout
    summary = checked.stdout.splitlines()[-1]
    assert summary.startswith(f"audit: {len(findings)} finding") and summary.endswith(" in 3 logs")
    assert exported.returncode == 1 and rechecked.returncode == 1
    data = json.loads(export.read_text())
    assert data["verification"]["findings"] == findings and not data["verification"]["ok"]
    assert rechecked.stdout == checked.stdout
    assert '"key"' not in export.read_text()  # the audit keys stay with each party
