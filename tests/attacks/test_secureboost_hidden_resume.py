"""Attack: a hidden-mode Host that restarts the job to have each split node decrypted again.

In the hidden instance space a guest decrypts one masked ``boost_reveal`` per split
node: the won candidate's left set plus a mask, or a dummy. A deviating Host may put
any candidate of its choice in a dummy's place and read that set (one set per split
node is what one session reveals, docs/security.md). This Host goes further: it stops
the run and has it started again (its checkpoints gone, so every tree is grown again;
or the ``--overwrite`` a refused resume points the operators to) and at each regrown
split node asks for *another* candidate.

Defended: the guest keeps its key, its pads and every answer per job
(``reveal-ledger.jsonl``, ledger.py) and refuses a regrown node's request that does not
decrypt to its earlier answer; the Host reads one set per split node however often the
job starts. Leaky arm: the ledger kept for one session only (as before): every start
decrypts every regrown node again, one more candidate set per split node and start.
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import failures, memory_job, party_data, run_in_threads

from privfl.config.vertical import JobConfig, LabelDPConfig, ModelConfig, switch_kind
from privfl.crypto.paillier import generate_keypair
from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost import guest as guest_module
from privfl.parties.vertical.secureboost import oblivious
from privfl.parties.vertical.secureboost.host import RemoteGuest
from privfl.parties.vertical.secureboost.ledger import Ledger, unkept
from privfl.parties.vertical.secureboost.reveal import HostSets
from privfl.protocol.memory import InMemoryHub
from privfl.runs.outdir import claim

GUEST = "guest-1"
STARTS = 3


def small_job() -> JobConfig:
    model = ModelConfig(kind="secureboost", trees=4, depth=3, bins=8, instance_space="hidden")
    return replace(memory_job(1, timeout=60.0), model=model)  # no label DP: no draw to refuse


def default_job() -> JobConfig:
    """The job `privfl init vfl --model secureboost` writes (ε = 2), on the in-memory hub."""
    return switch_kind(memory_job(1, timeout=120.0, epsilon=LabelDPConfig().epsilon), "secureboost")


class CuriousHost:
    """The Host's code, but at every dummy it asks for the next candidate it has not read."""

    def __init__(self) -> None:
        self.next = 0
        self.pending: dict[tuple[int, int], int] = {}  # (tree, node) -> candidate asked
        self.read: dict[tuple[int, int], dict[int, np.ndarray]] = {}  # node -> its reads

    def watch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        reveal, learn = RemoteGuest.reveal, RemoteGuest.learn

        def curious_reveal(guest: RemoteGuest, tree: int, nodes: list[int]) -> None:
            for node in nodes:
                if node not in guest.picks:  # a dummy's place: a candidate of our choice
                    guest.picks[node] = self.pending[(tree, node)] = self.next
                    self.next += 1
            reveal(guest, tree, nodes)

        def curious_learn(guest: RemoteGuest, tree: int, node: int, left: np.ndarray) -> None:
            if guest.sets is None or (tree, node) not in self.pending:
                learn(guest, tree, node, left)
                return
            got = guest.revealed(tree, node)
            self.read.setdefault((tree, node), {})[self.pending.pop((tree, node))] = got

        monkeypatch.setattr(RemoteGuest, "reveal", curious_reveal)
        monkeypatch.setattr(RemoteGuest, "learn", curious_learn)


def true_sets(job: JobConfig) -> np.ndarray:
    """The guest's candidate sets over its training then held-out rows (the attack's oracle)."""
    data = party_data(job)[GUEST]
    edges = sb.quantile_edges(data.x_train, job.model.bins)
    rows = np.vstack([sb.bin_columns(data.x_train, edges), sb.bin_columns(data.x_test, edges)])
    return oblivious.candidate_sets(rows, job.model.bins)


def restart(job: JobConfig, out: Path, how: str) -> dict[str, object]:
    """Every party starts again, and every tree is grown again: ``resume``, the Host's
    checkpoints gone (no tree is common); ``overwrite``, what a ``--resume`` refused for
    that reason tells the operators to do (label_draws.check_agreement)."""
    if how == "overwrite":
        for name in job.parties:
            claim(out / name, overwrite=True)
        return run_in_threads(job, InMemoryHub(), out)
    shutil.rmtree(out / job.host / "checkpoints", ignore_errors=True)
    resume = {name: {"resume": True} for name in job.parties}
    return run_in_threads(job, InMemoryHub(), out, options=resume)


def per_session(out: Path, fingerprint: str, bits: int, obfuscation: str, **_: object) -> Ledger:
    """The leaky construction: a fresh key, pads and count at every start."""
    return unkept(bits, obfuscation)


@pytest.mark.parametrize("kept", [True, False])
@pytest.mark.parametrize(("setting", "how"), [("small", "resume"), ("defaults", "overwrite")])
def test_a_restarted_host_reads_another_candidate_set_per_split_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str, how: str, kept: bool
) -> None:
    # Prepare: the curious Host, the guest's true candidate sets to score its reads.
    job = small_job() if setting == "small" else default_job()
    host = CuriousHost()
    host.watch(monkeypatch)
    if not kept:
        monkeypatch.setattr(guest_module, "open_ledger", per_session)
    sets = true_sets(job)

    # Act: the first start, then STARTS − 1 restarts.
    results = run_in_threads(job, InMemoryHub(), tmp_path)
    assert not failures(results), failures(results)
    refused = []
    for _ in range(STARTS - 1):
        refused.append(failures(restart(job, tmp_path, how)).get(GUEST))

    # Assert: every read is a true candidate set; how many each split node gave.
    for reads in host.read.values():
        for candidate, got in reads.items():
            assert np.array_equal(got, sets[candidate])
    per_node = sorted({len(reads) for reads in host.read.values()})
    distinct = {c for reads in host.read.values() for c in reads}
    print(
        f"\n{'kept' if kept else 'per session'}: {len(host.read)} split nodes read {per_node} "
        f"candidate sets each over {STARTS} starts: {len(distinct)} of {len(sets)} sets"
    )
    if not kept:
        assert refused == [None] * (STARTS - 1)
        assert per_node == [STARTS]
        return
    assert per_node == [1]
    for error in refused:
        message = str(error)
        assert message.startswith("the host deviated from the protocol: it asked again for")
        assert "\n" not in message


# --- a deviating guest, when an honest Host's pick at a node changes between starts -----


@pytest.mark.parametrize("keyed", [True, False])
def test_a_guest_cannot_subtract_a_nodes_requests_under_two_picks(
    monkeypatch: pytest.MonkeyPatch, keyed: bool
) -> None:
    # Prepare: a guest's candidate sets under its key; the Host's per-job mask seed. New
    # labels move node 0's winner from the guest's candidate 3 to another party (a dummy).
    public, private = generate_keypair(512)
    binned = np.random.default_rng(1).integers(0, 8, size=(40, 5))
    plain = oblivious.pack(oblivious.candidate_sets(binned, 8), public.bits, bytes(32))
    held = HostSets(public, 40, 1, tuple(public.encrypt(plain)), secrets.token_bytes(32))
    if not keyed:  # the leaky construction: one mask per node, whatever it holds
        real = oblivious.masks
        monkeypatch.setattr(oblivious, "masks", lambda s, n, t, v, _, c: real(s, n, t, v, None, c))

    # Act: the deviating guest decrypts both starts' requests for node 0 and subtracts.
    first, _ = held.request(0, 0, 3)
    second, _ = held.request(0, 0, None)
    n = public.n
    diff = (private.decrypt(first.values.values)[0] - private.decrypt(second.values.values)[0]) % n
    known = {None: 0, **dict(enumerate(plain))}  # a dummy holds no candidate
    named = [(a, b) for a, x in known.items() for b, y in known.items() if (x - y) % n == diff]

    # Assert: keyed by the pick, the two decryptions are independent uniform values
    print(f"\n{'keyed' if keyed else 'one mask per node'}: picks named {named}")
    assert named == ([] if keyed else [(3, None)])
