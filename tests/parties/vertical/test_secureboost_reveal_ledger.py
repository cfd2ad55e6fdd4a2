"""Hidden-mode SecureBoost across starts: an honest restart gives the uninterrupted model,
each regrown split node answered from the guest's ledger (ledger.py), never decrypted anew."""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import failures, memory_job, read_model, run_in_threads, run_resumable

from privfl.config.vertical import JobConfig, ModelConfig
from privfl.errors import ConfigError, ProtocolError
from privfl.parties.vertical.secureboost import ledger, oblivious, reveal
from privfl.parties.vertical.secureboost.host import RemoteGuest
from privfl.protocol.memory import InMemoryHub
from privfl.runs.outdir import claim

GUEST = "guest-1"
BITS = 512


def hidden_job() -> JobConfig:
    model = ModelConfig(kind="secureboost", trees=4, depth=3, bins=16, instance_space="hidden")
    return replace(memory_job(1, timeout=60.0), model=model)  # stops are aborts: no wait


def trees(out: Path) -> list[Any]:
    return list(read_model(out, "host")["trees"])


def reveals(out: Path) -> dict[str, int]:
    counts: dict[str, int] = json.loads((out / GUEST / "work.json").read_text())["reveals"]
    return counts


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run of :func:`hidden_job`'s settings."""
    out = tmp_path_factory.mktemp("whole")
    assert not failures(run_resumable(hidden_job(), out))
    return out


def stop_at(monkeypatch: pytest.MonkeyPatch, tree: int, level: int) -> None:
    """The Host stops (as a crash would) before its requests of ``tree``'s ``level``."""
    real = RemoteGuest.reveal

    def stopping(guest: RemoteGuest, t: int, nodes: list[int]) -> None:
        if t == tree and any(hidden_level(n) == level for n in nodes):
            raise ProtocolError("the host stops here")
        real(guest, t, nodes)

    monkeypatch.setattr(RemoteGuest, "reveal", stopping)


def hidden_level(node: int) -> int:
    return (node + 1).bit_length() - 1


def cut(job: JobConfig, out: Path, tree: int, level: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        stop_at(patch, tree, level)
        failed = failures(run_resumable(job, out))
    assert "the host stops here" in str(failed[job.host])


def test_a_host_stopped_within_a_tree_resumes_to_the_same_model(
    whole: Path, tmp_path: Path
) -> None:
    # Prepare: the Host stops in the third tree, its root answered, before level 1's requests.
    job = hidden_job()
    cut(job, tmp_path, 2, 1)
    answered = reveals_in(tmp_path)
    completed = min(held(tmp_path, name) for name in (job.host, GUEST))

    # Act
    resumed = run_resumable(job, tmp_path, resume=True)

    # Assert: the uninterrupted trees; what was answered of a regrown tree, replayed.
    assert not failures(resumed), failures(resumed)
    assert trees(tmp_path) == trees(whole)
    regrown = [k for k in answered if k[0] >= completed]
    assert (2, 0) in regrown and reveals(tmp_path)["replayed"] == len(regrown)


def test_a_host_that_kept_fewer_trees_than_the_guest_resumes_to_the_same_model(
    whole: Path, tmp_path: Path
) -> None:
    # Prepare: stopped in the fourth tree; the Host's newest checkpoint (3 trees) lost.
    job = hidden_job()
    cut(job, tmp_path, 3, 0)
    assert held(tmp_path, GUEST) == held(tmp_path, job.host) == 3
    (tmp_path / job.host / "checkpoints" / "epoch-00003.json").unlink()

    # Act
    resumed = run_resumable(job, tmp_path, resume=True)

    # Assert: tree 2 grown again, every one of its split nodes answered as before
    assert not failures(resumed), failures(resumed)
    assert trees(tmp_path) == trees(whole)
    again = sum(1 for t, _ in reveals_in(tmp_path) if t == 2)
    assert reveals(tmp_path)["replayed"] == again > 0


def test_an_overwrite_start_of_the_same_job_replays_every_answer(
    whole: Path, tmp_path: Path
) -> None:
    job = hidden_job()
    assert not failures(run_resumable(job, tmp_path))
    before = reveals_in(tmp_path)
    for name in job.parties:
        claim(tmp_path / name, overwrite=True)

    again = run_resumable(job, tmp_path)

    assert not failures(again), failures(again)
    assert trees(tmp_path) == trees(whole)
    assert reveals(tmp_path) == {"answered": len(before), "replayed": len(before), "forgotten": 0}
    assert reveals_in(tmp_path) == before


def reveals_in(out: Path) -> dict[tuple[int, int], list[str]]:
    _, answers = ledger.read(out / GUEST / ledger.FILE_NAME)
    return {(a["tree"], a["node"]): a["values"] for a in answers}


def held(out: Path, name: str) -> int:
    files = sorted((out / name / "checkpoints").glob("epoch-*.json"))
    return int(files[-1].stem.split("-")[1]) if files else 0


# --- the files: what they hold, who may read them --------------------------------------


def test_the_ledger_is_private_and_kept_per_job(tmp_path: Path) -> None:
    first = ledger.open_ledger(tmp_path, "a" * 64, BITS, "standard", resume=False)
    first.answer(0, 0, [5, 6])
    mode = stat.S_IMODE((tmp_path / ledger.FILE_NAME).stat().st_mode)
    assert mode == 0o600

    again = ledger.open_ledger(tmp_path, "a" * 64, BITS, "standard", resume=True)

    assert again.key.public_key == first.key.public_key and again.seed == first.seed
    assert again.answer(0, 0, [5, 6]) == (5, 6) and again.replayed == 1
    with pytest.raises(Exception, match="asked again for tree 0 node 0"):
        again.answer(0, 0, [5, 7])  # another request for a node answered before


def test_another_jobs_ledger_is_refused_on_resume_and_replaced_otherwise(tmp_path: Path) -> None:
    ledger.open_ledger(tmp_path, "a" * 64, BITS, "standard", resume=False).answer(0, 0, [1])
    with pytest.raises(ConfigError, match="of another job"):
        ledger.open_ledger(tmp_path, "b" * 64, BITS, "standard", resume=True)

    other = ledger.open_ledger(tmp_path, "b" * 64, BITS, "standard", resume=False)

    assert other.answers == {}


def test_forgetting_is_booked_and_a_damaged_ledger_refused(tmp_path: Path) -> None:
    first = ledger.open_ledger(tmp_path, "a" * 64, BITS, "standard", resume=False)
    first.answer(1, 2, [3])
    again = ledger.open_ledger(tmp_path, "a" * 64, BITS, "standard", resume=False, forget=True)
    assert again.answers == {} and again.forgotten == 1
    assert again.key.public_key != first.key.public_key
    kept = ledger.open_ledger(tmp_path, "a" * 64, BITS, "standard", resume=True)
    assert kept.forgotten == 1

    path = tmp_path / ledger.FILE_NAME
    kept.answer(1, 3, [4])
    path.write_text(path.read_text() + '\n{"tree": 1, "node": 4, "val')  # torn: never sent
    torn = ledger.open_ledger(tmp_path, "a" * 64, BITS, "standard", resume=True)
    torn.answer(1, 5, [6])  # appended after the dropped line
    assert set(ledger.open_ledger(tmp_path, "a" * 64, BITS, "standard", resume=True).answers) == {
        (1, 3),
        (1, 5),
    }
    lines = path.read_text().split("\n")
    path.write_text("\n".join([lines[0], "{", lines[1]]))  # damaged within
    with pytest.raises(ConfigError, match="unreadable") as caught:
        ledger.open_ledger(tmp_path, "a" * 64, BITS, "standard", resume=True)
    assert "\n" not in str(caught.value)


def test_every_start_sends_the_same_plaintexts_in_fresh_ciphertexts(tmp_path: Path) -> None:
    # The guest's pads and the Host's masks are the job's; the ciphertexts are new.
    left = np.arange(40)[None, :] % 3 == 0
    seed = bytes(32)
    assert oblivious.pack(left, BITS, seed) == oblivious.pack(left, BITS, seed)
    assert oblivious.pack(left, BITS) != oblivious.pack(left, BITS)
    host = reveal.host_seed(tmp_path, "a" * 64)
    assert reveal.host_seed(tmp_path, "a" * 64) == host
    assert stat.S_IMODE((tmp_path / reveal.MASKS_FILE).stat().st_mode) == 0o600
    kept = ledger.open_ledger(tmp_path, "a" * 64, BITS, "standard", resume=False)
    public = kept.key.public_key
    values = tuple(public.encrypt(oblivious.pack(left, BITS, kept.seed)))
    sets = reveal.HostSets(public, 40, 1, values, host)
    one, masks = sets.request(0, 3, 0)
    two, again = sets.request(0, 3, 0)
    assert masks == again and one.values.values != two.values.values
    assert kept.key.decrypt(one.values.values) == kept.key.decrypt(two.values.values)
    assert sets.request(0, 4, 0)[1] != masks  # another node: other masks


def test_new_labels_need_the_guests_forget_reveals_which_is_booked(tmp_path: Path) -> None:
    # Prepare: a finished run at label ε = 1 (seeded flips: tests only).
    job = replace(hidden_job(), label_dp=memory_job(1, epsilon=1.0).label_dp)
    assert not failures(run_resumable(job, tmp_path, label_seed=5))
    for name in job.parties:
        claim(tmp_path / name, overwrite=True)
    redraw = {job.host: {"redraw_labels": True, "label_rng": np.random.default_rng(6)}}

    # Act: new labels grow other trees; the guest holds the Host to its earlier answers.
    refused = failures(run_in_threads(job, InMemoryHub(), tmp_path, options=redraw))
    forget = {**redraw, GUEST: {"forget_reveals": True}}
    again = run_in_threads(job, InMemoryHub(), tmp_path, options=forget)

    # Assert
    message = str(refused[GUEST])
    assert "asked again for tree" in message and "--forget-reveals" in message
    assert not failures(again), failures(again)
    assert reveals(tmp_path)["forgotten"] == 1 and reveals(tmp_path)["replayed"] == 0


@pytest.mark.parametrize(
    ("role", "flags", "says"),
    [
        ("host", [], "is for a guest"),
        ("guest", ["--resume"], "drop --resume"),
    ],
)
def test_forget_reveals_is_a_guests_start_over(
    tmp_path: Path, role: str, flags: list[str], says: str
) -> None:
    from click.testing import CliRunner

    from privfl.cli import main
    from privfl.runs.kits import demo_job, write_kit

    write_kit(demo_job(key_bits=BITS, allow_weak_keys=True), tmp_path / "kit")
    party = "host" if role == "host" else GUEST
    args = ["vfl", role, "--job", str(tmp_path / "kit" / "job.toml"), "--party", party]
    result = CliRunner().invoke(main, [*args, "--forget-reveals", *flags])
    assert result.exit_code == 2 and says in result.output, result.output
