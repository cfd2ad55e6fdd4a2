"""Attack: a deviating party packs its own decryption requests tighter than the protocol does.

The Server decrypts a request of the length the job fixes (``server_rules``), and sees
each plaintext under a uniform mask: it cannot tell how the requester packed it. The
protocol packs ``slots(n)`` values of ``SLOT_BITS`` = 95 bits per plaintext (5 at 512
bits, 21 at 2048); a fixed-point score or residual needs about 42 bits. So whoever
builds a request can fit more under the same count:

* a **Host with two guests**, asked for no more than ``Σ_g z_g``, puts in each slot the
  sum at the bottom and one guest's score ``2^48`` above it (both shifted to be
  non-negative by a public constant): it reads the sum it needs *and* that guest's score
  on every row — in a prediction session (so the predictions it writes are right) and
  at every epoch's test scores (so its metrics are right), and at flipback, where it
  packs its own cache of the training rows' sums and one guest's ``forward`` beside
  them: the substitution costs it nothing, and the other guest's scores are the
  difference;
* a **guest**, whose gradient request holds ``⌈F_g/slots⌉`` plaintexts, packs its
  residual ciphertexts 40 bits apart: ``⌊(bits − 1)/40⌋`` per plaintext (12 at 512 bits,
  51 at 2048) instead of ``slots``, more than the least batch — every residual of every
  batch, at the price of its training; a **Poisson guest** that also sends ``[[1]]`` for
  ``exp(z_G)`` gets ``a − y'·2^32`` back, the Host's multiplier and the count apart.

No party can check a masked request's packing without proofs of correct computation,
which the protocol does not have (docs/security.md, *Server decryptions*). Against the
Host the guests mask instead: every plaintext a guest sends it (``forward``, ``scores``,
a prediction's scores) carries a mask uniform mod n that cancels in the sum over guests
(crypto/guest_masks.py, protocol v7), so one guest's vector decrypts to noise however
the Host packs it. The Host's tests run both arms: masked (the defence: the Host reads
no guest's score, 0 rows within 10^-6) and masks off (the leaky arm: it reads every
row). The guest's tests measure what the deviations read, the numbers docs/security.md
states.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import (
    failures,
    host_start,
    memory_job,
    party_data,
    run_in_threads,
    run_parties,
)
from scipy.stats import binom

from privfl.config.vertical import DataConfig, JobConfig, ModelConfig, PartySpec, kind_default
from privfl.crypto import guest_masks, packing
from privfl.crypto.encoding import VALUE_BITS, encode
from privfl.crypto.paillier import PublicKey, unmask
from privfl.data.tables import IdTable
from privfl.learning import start as starts
from privfl.learning.kinds.base import EXP_BITS
from privfl.learning.kinds.poisson import Poisson
from privfl.learning.taylor import sigmoid
from privfl.parties.vertical import guest as guest_party
from privfl.parties.vertical import host_steps
from privfl.parties.vertical import predict as predict_party
from privfl.parties.vertical.batches import job_least_batch
from privfl.protocol import fresh
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Decrypted, DecryptRequest, Residual, Scores

LOW = 48  # bits of a slot that carry the sum; one guest's score sits above them
BIAS = 1 << 41  # makes every |v| < 2^41 (a score under 512 at 2^32) non-negative
WIDTH = 40  # bits per residual in the guest's own packing (|r| < 128 at 2^32)


# --- the Host's packing: the sum below, one guest's score above -------------------------


@pytest.fixture(params=["masked", "masks off"])
def masked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether the guests mask what they send the Host; the leaky arm adds zero masks."""
    if request.param == "masks off":
        monkeypatch.setattr(guest_masks.GuestMasks, "masks", lambda _s, _n, _w, count: [0] * count)
    return bool(request.param == "masked")


def hits(read: np.ndarray, truth: np.ndarray) -> int:
    """Rows whose read value is the true score to 10^-6. Under the masks a read slot is
    uniform over ~2^47 steps of 2^-32: P(one row within 10^-6) < 2^-34."""
    return int(np.count_nonzero(np.abs(np.asarray(read) - np.asarray(truth)) < 1e-6))


def shifted(per_slot: int, used: int) -> int:
    """The plaintext adding ``per_slot`` (mod n) to each of ``used`` slots."""
    return sum(per_slot << (packing.SLOT_BITS * i) for i in range(used))


def two_in_one(
    key: PublicKey, vectors: list[tuple[int, ...]], values: int
) -> tuple[list[int], list[int]]:
    """Per packed ciphertext: ``(Σ_g v_g + BIAS) + 2^LOW·(v_1 + BIAS)`` in every used slot;
    returns it and the honest sum (whose length it keeps)."""
    per, offset = packing.slots(key.n), 1 << packing.BOUND_BITS
    total = list(vectors[0])
    for vector in vectors[1:]:
        total = key.add(total, vector)
    out = []
    for j, (s, a) in enumerate(zip(total, vectors[0], strict=True)):
        used = min(per, values - j * per)
        low = key.add_plain([s], [shifted(BIAS - len(vectors) * offset, used) % key.n])
        high = key.add_plain([a], [shifted(BIAS - offset, used) % key.n])
        out += key.add(low, key.scalar_mul(high, [1 << LOW]))
    return out, total


def read_two(plain: list[int], values: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The sum and the first guest's scores behind :func:`two_in_one`'s plaintexts."""
    per, slot = packing.slots(n), (1 << packing.SLOT_BITS) - 1
    sums, firsts = [], []
    for j, p in enumerate(plain):
        for i in range(min(per, values - j * per)):
            s = (p >> (packing.SLOT_BITS * i)) & slot
            sums.append((s & ((1 << LOW) - 1)) - BIAS)
            firsts.append((s >> LOW) - BIAS)
    return np.array(sums) / 2**VALUE_BITS, np.array(firsts) / 2**VALUE_BITS


@dataclass
class TwoInOneHost:
    """A Host that gets the sum it needs and, in the same request, guest-1's scores."""

    firsts: list[np.ndarray] = field(default_factory=list)
    sums: list[np.ndarray] = field(default_factory=list)


def deviate_in_training(monkeypatch: pytest.MonkeyPatch, host: TwoInOneHost) -> None:
    """The Host's evaluation steps (``host_steps.sum_scores``/``unmask_scores``), deviated."""
    honest_sum, honest_unmask = host_steps.sum_scores, host_steps.unmask_scores

    def sum_scores(state: Any, replies: dict[str, Scores], rows: int) -> list[int]:
        honest_sum(state, replies, rows)  # the length checks, as before
        vectors = [replies[g].scores.values for g in state.guests]
        return two_in_one(state.key, vectors, rows)[0]

    def unmask_scores(
        state: Any, reply: Decrypted, masks: list[int], rows: int, terms: int = 1
    ) -> np.ndarray:
        if terms == 1:  # the Host's own packing of cached sums (flipback): not ours
            return honest_unmask(state, reply, masks, rows, terms)
        plain = unmask(reply.values.values, masks, state.key.n)
        sums, firsts = read_two(plain, rows, state.key.n)
        host.sums.append(sums)
        host.firsts.append(firsts)
        return sums

    monkeypatch.setattr(host_steps, "sum_scores", sum_scores)
    monkeypatch.setattr(host_steps, "unmask_scores", unmask_scores)


def test_a_host_reads_one_guests_test_scores_each_epoch_only_without_masks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, masked: bool
) -> None:
    # Prepare: two guests, breast cancer, the demo's full batch; the Host deviates.
    host = TwoInOneHost()
    deviate_in_training(monkeypatch, host)
    job = memory_job(2, epochs=2)

    # Act
    results = run_in_threads(job, InMemoryHub(), tmp_path)

    # Assert: every epoch's request was accepted (same length). Masks off, the last one
    # gave the Host the exact sum (its metrics) and guest-1's own score on every test
    # row; masked, guest-1's vector is uniform mod n: no row's score, and no sum either.
    assert not failures(results), failures(results)
    data = party_data(job)
    weights = {g: np.asarray(results[g]["weights"]) for g in job.guests}
    scores = {g: data[g].x_test @ weights[g] for g in job.guests}
    assert len(host.firsts) == job.training.epochs
    assert float(np.std(scores["guest-1"])) > 1e-3  # real scores, not the zero start
    total = scores["guest-1"] + scores["guest-2"]
    if masked:
        assert hits(host.firsts[-1], scores["guest-1"]) == 0
        assert hits(host.sums[-1], total) == 0
        return
    assert hits(host.firsts[-1], scores["guest-1"]) == len(total) == 143
    np.testing.assert_allclose(host.sums[-1], total, atol=1e-6)


def prediction_job() -> tuple[JobConfig, dict[str, predict_party.Model], dict[str, IdTable]]:
    """Server, Host and two guests, 40 new rows by position, weak test keys."""
    rng = np.random.default_rng(3)
    names = ["server", "host", "guest-1", "guest-2"]
    parties = {n: PartySpec(n, n.split("-")[0], f"mem://{n}") for n in names}
    job = JobConfig(
        session=uuid.uuid4().hex,
        parties=parties,
        key_bits=512,
        allow_weak_keys=True,
        timeout_seconds=20,
        data=DataConfig(),
    )
    models, tables = {}, {}
    for name, width in (("host", 3), ("guest-1", 2), ("guest-2", 4)):
        columns = tuple(f"{name}-{j}" for j in range(width))
        models[name] = predict_party.Model(
            columns, rng.normal(size=width), np.zeros(width), np.ones(width), 0.0
        )
        ids = tuple(str(i) for i in range(40))
        tables[name] = IdTable(ids=ids, x=rng.normal(size=(40, width)), feature_names=columns)
    return job, models, tables


def test_a_host_reads_a_guests_prediction_scores_only_without_masks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, masked: bool
) -> None:
    # Prepare: the Host's prediction step, deviated in the two calls it makes.
    host = TwoInOneHost()
    honest_add = predict_party.add_all

    def add_all(key: PublicKey, vectors: list[Any]) -> list[int]:
        honest_add(key, vectors)
        return two_in_one(key, [tuple(v) for v in vectors], 40)[0]

    def unpack(unmasked: list[int], count: int, n: int, terms: int = 1) -> list[int]:
        sums, firsts = read_two(unmasked, count, n)
        host.firsts.append(firsts)
        return [int(v) % n for v in np.rint(sums * 2**VALUE_BITS).astype(object)]

    monkeypatch.setattr(predict_party, "add_all", add_all)
    monkeypatch.setattr(predict_party.packing, "unpack", unpack)
    job, models, tables = prediction_job()
    out = tmp_path / "host" / "predictions.csv"
    hub = InMemoryHub()
    transports = {n: hub.transport(n) for n in job.parties}

    # Act
    results = run_parties(
        job.parties,
        lambda name: predict_party.predict_party(
            job, name, out if name == "host" else tmp_path / name / "p.csv",
            model=models.get(name), table=tables.get(name), by_id=False,
            transport=transports[name],
        ),
        join=60,
    )  # fmt: skip

    # Assert: the session ended normally. Masks off, the predictions are right and the
    # Host holds guest-1's score of every row (guest-2's is the sum's rest); masked, it
    # holds no row's score (and its predictions are noise: the deviation costs it them).
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    z = {n: tables[n].x @ models[n].weights for n in models}
    got = np.loadtxt(out, delimiter=",", skiprows=1, usecols=1)
    honest = sigmoid(z["host"] + z["guest-1"] + z["guest-2"])
    (firsts,) = host.firsts
    if masked:
        assert hits(firsts, z["guest-1"]) == 0
        assert hits(got, honest) < len(got)
        return
    assert hits(firsts, z["guest-1"]) == 40
    np.testing.assert_allclose(got, honest, atol=1e-6)


# --- the guest's packing: its residual ciphertexts 40 bits apart -------------------------


def dense_capacity(n: int) -> int:
    """Residuals one plaintext holds at WIDTH bits each (below n: one bit spare)."""
    return (n.bit_length() - 1) // WIDTH


@dataclass
class DensePackingGuest:
    """A guest that spends each gradient request on its batch's residuals."""

    width: int = WIDTH  # 95 (packing.SLOT_BITS): the protocol's own slots
    read: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    rows: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)
    masks: list[int] = field(default_factory=list)

    def deviate(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def backward(state: guest_party.GuestState, msg: Residual) -> tuple[Any, None]:
            key, count = state.key, packing.packed_length(state.theta.size, state.key.n)
            per = (key.n.bit_length() - 1) // self.width
            values = list(msg.residual.values)[: count * per]
            bias = 1 << (self.width - 1)
            plain = []
            for start in range(0, len(values), per):  # Horner's rule under encryption
                acc = [1]
                for c in reversed(values[start : start + per]):
                    acc = key.add(
                        key.scalar_mul(acc, [1 << self.width]), key.add_plain([c], [bias])
                    )
                plain += acc
            plain += key.encrypt([0] * (count - len(plain)))
            masked, self.masks = fresh.mask(key, plain, guest_party.take(state, count))
            rows = np.arange(len(state.x_exp))[state.rows()]
            self.rows[(msg.epoch, msg.batch)] = rows[: len(values)]
            state.stage = guest_party.Stage.AWAIT_GRADIENT
            return DecryptRequest(msg.epoch, msg.batch, "gradient", masked), None

        def apply_gradient(state: guest_party.GuestState, msg: Decrypted, lr: float) -> None:
            n, bias = state.key.n, 1 << (self.width - 1)
            per = (n.bit_length() - 1) // self.width
            where = (msg.epoch, msg.batch)
            out = []
            for p in unmask(msg.values.values, self.masks, n):
                out += [
                    ((p >> (self.width * i)) & ((1 << self.width) - 1)) - bias for i in range(per)
                ]
            self.read[where] = np.array(out[: len(self.rows[where])]) / 2**VALUE_BITS
            state.stage = guest_party.Stage.IDLE  # no step: its weights stay at 0

        monkeypatch.setattr(guest_party, "backward", backward)
        monkeypatch.setattr(guest_party, "apply_gradient", apply_gradient)


@pytest.mark.parametrize("width", [WIDTH, packing.SLOT_BITS], ids=["dense", "slots"])
def test_at_the_least_batch_a_guest_reads_every_residual_of_every_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    # Prepare: breast cancer, one guest (F_g = 20, Host 10 + bias), batches of the least
    # size the job allows; no label noise, so what it reads are the labels' residuals.
    job = memory_job(1, epochs=1)
    data = party_data(job)
    least = job_least_batch(job, len(data[job.host].x_train))
    job = memory_job(1, epochs=1, batch_size=least)
    guest = DensePackingGuest(width)
    guest.deviate(monkeypatch)
    # The Host keeps its start, so the test knows every batch's residual (the guest's read
    # does not depend on it: it reads whatever the Host sends).
    monkeypatch.setattr(host_steps, "apply_gradient", lambda *_: None)

    # Act
    results = run_in_threads(job, InMemoryHub(), tmp_path)

    # Assert: every value read is the batch's residual z_H − 4y + 2 (the guest at 0).
    assert not failures(results), failures(results)
    host, y = data[job.host], data[job.host].y_train
    assert y is not None
    z_host = np.hstack([host.x_train, np.ones((len(y), 1))]) @ host_start(tmp_path)[:, 0]
    read = np.concatenate(list(guest.read.values()))
    rows = np.concatenate([guest.rows[w] for w in guest.read])
    np.testing.assert_allclose(read, (z_host + 2.0 - 4.0 * y)[rows], atol=1e-6)
    per_batch = {w: len(v) for w, v in guest.read.items()}
    features = data[job.guests[0]].x_train.shape[1]
    n_bits = 512
    if width == WIDTH:
        # 4 plaintexts of 12 residuals: 48 ≥ the least batch of 21 (and of any remainder).
        assert math.ceil(features / 5) * ((n_bits - 1) // WIDTH) >= least
        assert len(set(rows)) == len(y)  # every training row, in one epoch
        assert all(v == len(guest.rows[w]) for w, v in per_batch.items())
    else:
        # The protocol's own slots: ⌈F_g/5⌉·5 = 20 of each batch's 21 rows.
        assert max(per_batch.values()) == math.ceil(features / 5) * 5 < least


# --- Poisson: a crafted forward separates the Host's multiplier from the count -----------


def crafted_exp_block(self: Any, z: np.ndarray, n: int) -> list[int]:
    """A deviating guest's forward: ``[[1]]`` (2^-16) for the ``exp(z_G)`` of the rows it
    will read (the first 12 of the batch: one plaintext of 40-bit values at 512 bits), the
    honest ``exp(z_G)`` elsewhere (so the Host's loss stays plausible), then ``z``."""
    read = (n.bit_length() - 1) // WIDTH
    exps = encode(np.exp(np.asarray(z)), EXP_BITS, n)
    return [1] * read + exps[read:] + encode(np.asarray(z), VALUE_BITS, n)


POISSON_EPSILONS = {  # label ε of each arm; 0 = the kind's default once bounds are given
    "no label DP": math.inf,
    "Laplace": 1.0,
    "Laplace at the default ε": 0.0,
}


@pytest.mark.parametrize("arm", list(POISSON_EPSILONS))
def test_a_poisson_guest_with_a_crafted_forward_reads_counts_and_the_hosts_multiplier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arm: str
) -> None:
    """With ``[[1]]`` in place of ``[[exp z_G]]`` the residual is ``a − y'·2^32``, ``a`` the
    Host's multiplier ``exp(z_H + log exposure)`` at 2^16 (below 2^22): with integer
    counts (no label DP: a job must say ε = inf, or give bounds) the two separate, and a
    guest that spends its gradient requests on the residual reads both exactly. Laplace
    noise makes ``y'`` real: it then reads only ``y'`` to 2^-10, the noised count."""
    # Prepare: counts table, one guest (F_g = 4), batches of 60, one epoch.
    epsilon = POISSON_EPSILONS[arm] or kind_default("poisson", "label_dp.epsilon")
    label_dp = math.isfinite(epsilon)
    bounds = {"label_low": 0.0, "label_high": 15.0} if label_dp else {}
    model = ModelConfig(kind="poisson", exposure="exposure", **bounds)
    job = memory_job(1, epochs=1, dataset="counts", model=model, batch_size=60, epsilon=epsilon)
    monkeypatch.setattr(Poisson, "forward_plain", crafted_exp_block)
    guest = DensePackingGuest()
    guest.deviate(monkeypatch)
    monkeypatch.setattr(host_steps, "apply_gradient", lambda *_: None)  # as above
    started: list[np.ndarray] = []
    honest_start = starts.host_start

    def recorded_start(*args: Any, **kwargs: Any) -> np.ndarray:
        started.append(honest_start(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(starts, "host_start", recorded_start)

    # Act
    results = run_in_threads(job, InMemoryHub(), tmp_path)

    # Assert: the run ends normally; the guest read 12 rows a batch, 300 of 1,500.
    assert not failures(results), failures(results)
    host = party_data(job)[job.host]
    y, offset = host.y_train, host.offset_train
    assert y is not None and offset is not None
    read = np.concatenate(list(guest.read.values()))
    rows = np.concatenate([guest.rows[w] for w in guest.read])
    assert len(rows) == 25 * 12
    counts = -np.floor(read)  # a/2^32 < 2^-10: the integer part is −y
    multiplier = (read + counts) * 2.0**16
    z_host = np.hstack([host.x_train, np.ones((len(y), 1))]) @ started[0][:, 0]
    if not label_dp:
        np.testing.assert_array_equal(counts, y[rows])
        np.testing.assert_allclose(multiplier, np.exp(z_host + offset)[rows], atol=2**-15)
        return
    if epsilon == 1.0:
        # Laplace scale 15: a read within ±0.5 of the true count has P = 1 − e^(−0.5/15) ≈ 0.033.
        assert float(np.mean(counts == y[rows])) < 0.12
        return
    # The way out's default ε (8: scale 15/8): the guest's best single guess, y' rounded,
    # is the count when the noise is within ±0.5 (P = 1 − e^(−0.5·ε/15) ≈ 0.234; less for
    # a count clipped at 15). Pass line: P(Binomial(300, p) > line) < 1e-7.
    noised = np.round(-read)
    p = 1.0 - math.exp(-0.5 * epsilon / 15.0)
    line = int(binom.isf(1e-7, len(rows), p))
    assert int(np.sum(noised == y[rows])) <= line < len(rows) // 2


# --- flipback: the Host packs its own cache, and one guest's forward beside it -----------


def pack_rows(key: PublicKey, values: list[int]) -> list[int]:
    """Per-row ciphertexts into ``slots(n)`` per plaintext, SLOT_BITS apart (Horner)."""
    per, out = packing.slots(key.n), []
    for start in range(0, len(values), per):
        acc = [1]
        for c in reversed(values[start : start + per]):
            acc = key.add(key.scalar_mul(acc, [1 << packing.SLOT_BITS]), [c])
        out += acc
    return out


def test_at_flipback_a_host_reads_one_guests_training_scores_only_without_masks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, masked: bool
) -> None:
    # Prepare: two guests, label ε = 2 with flipback after every epoch; the Host keeps
    # guest-1's forward ciphertexts and, at flipback, packs each row's cached sum and
    # guest-1's score into one slot; guest-1's true scores recorded for the verdict.
    host = TwoInOneHost()
    firsts: dict[int, int] = {}
    truths: list[np.ndarray] = []
    honest_combine, honest_unmask = host_steps.combine, host_steps.unmask_scores
    honest_request = host_steps.masked_request
    honest_forward = guest_party.forward

    def combine(state: Any, rows: Any, forwards: dict[str, Any]) -> Any:
        for i, row in enumerate(np.arange(len(state.labels))[rows]):
            firsts[int(row)] = forwards["guest-1"].scores.values[i]
        return honest_combine(state, rows, forwards)

    def masked_request(state: Any, cache: list[int], epoch: int, packed: bool = False) -> Any:
        if packed:  # the guests' packed test scores: as before
            return honest_request(state, cache, epoch, packed)
        key = state.key
        low = key.add_plain(cache, [BIAS] * len(cache))
        high = key.add_plain([firsts[i] for i in range(len(cache))], [BIAS] * len(cache))
        both = key.add(low, key.scalar_mul(high, [1 << LOW] * len(cache)))
        masked, masks = fresh.mask(key, pack_rows(key, both))
        return DecryptRequest(epoch, 0, "scores", masked), masks

    def unmask_scores(
        state: Any, reply: Decrypted, masks: list[int], rows: int, terms: int = 1
    ) -> np.ndarray:
        if terms != 1:  # the test split: as the guests packed it
            return honest_unmask(state, reply, masks, rows, terms)
        plain = unmask(reply.values.values, masks, state.key.n)
        per, slot = packing.slots(state.key.n), (1 << packing.SLOT_BITS) - 1
        sums, ones = [], []
        for j, p in enumerate(plain):
            for i in range(min(per, rows - j * per)):
                s = (p >> (packing.SLOT_BITS * i)) & slot
                sums.append((s & ((1 << LOW) - 1)) - BIAS)
                ones.append((s >> LOW) - BIAS)
        host.sums.append(np.array(sums) / 2**VALUE_BITS)
        host.firsts.append(np.array(ones) / 2**VALUE_BITS)
        return host.sums[-1]

    def forward(state: guest_party.GuestState, msg: Any) -> Any:
        if state.data.feature_names == names_of_guest_1:
            truths.append(state.data.x_train @ state.theta[:, 0])
        return honest_forward(state, msg)

    job = memory_job(2, epochs=3, epsilon=2.0, flipback_every=1)
    names_of_guest_1 = party_data(job)["guest-1"].feature_names
    monkeypatch.setattr(host_steps, "combine", combine)
    monkeypatch.setattr(host_steps, "masked_request", masked_request)
    monkeypatch.setattr(host_steps, "unmask_scores", unmask_scores)
    monkeypatch.setattr(guest_party, "forward", forward)

    # Act
    results = run_in_threads(job, InMemoryHub(), tmp_path)

    # Assert: two flipbacks (after epochs 1 and 2, not the last), each accepted by the
    # Server. Masks off, each gives the sums the flipback needs and guest-1's score of
    # all 426 training rows as it sent them that epoch; masked, guest-1's forward
    # ciphertexts are uniform mod n (its cached sums still right): no row's score.
    assert not failures(results), failures(results)
    assert len(host.firsts) == 2 and len(truths) == 3
    assert float(np.max(np.abs(truths[1]))) > 1e-3  # trained scores, not the zero start
    for read, truth in zip(host.firsts, truths, strict=False):
        assert len(read) == 426
        assert hits(read, truth) == (0 if masked else 426)
