"""The vertical protocol end to end: every party in a thread over the in-memory hub.

512-bit keys and a few epochs keep each run around a second. What is checked:
the encrypted protocol equals its plaintext oracle; the Server only ever decrypts
uniformly masked values; the private key never goes on the wire; nothing after
the flip reads the true labels; the flip rate; and that bad peers and divergence
end every party with an error that names the cause, never a hang.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from helpers import (
    decoded_traffic,
    failures,
    host_plan,
    host_start,
    memory_job,
    party_data,
    read_model,
    read_summary,
    run_in_threads,
    with_labels,
)
from scipy import stats

import privfl.crypto.paillier as paillier
import privfl.parties.vertical.handshake as handshake
import privfl.parties.vertical.host_steps as host_steps
import privfl.parties.vertical.server as server_steps
from privfl.config.vertical import JobConfig, with_overrides
from privfl.crypto import packing
from privfl.crypto.encoding import DATA_BITS, VALUE_BITS, decode
from privfl.data.views import PartyData
from privfl.errors import ConfigError, PeerAborted, PeerUnavailable, TrainingDiverged
from privfl.learning import start as starts
from privfl.learning.glm import glm_named, reference_train
from privfl.learning.taylor import sigmoid
from privfl.mechanisms.label_dp import flipback, randomized_response
from privfl.parties.vertical.runner import load_data
from privfl.protocol import fresh
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Batch, Decrypted, DecryptRequest

# One worker makes the twin runs for every test here (--dist loadgroup, tests/conftest.py).
pytestmark = pytest.mark.xdist_group("vertical_protocol")

LOSS_BITS = VALUE_BITS + DATA_BITS
# Fixed-point error budget. Features enter Xᵀ[[4d]] and the loss as 2^-16 integers
# (DATA_BITS), so each product carries a relative error ≤ 2^-17 ≈ 7.6e-6; scores and
# residuals are exact to 2^-32. Over a few epochs the weights drift ~3e-7 from the
# float oracle and the loss ~1e-8; the bounds below leave a margin of 30-100x.
LOGISTIC = glm_named("logistic")
WEIGHT_TOL = 1e-5
LOSS_TOL = 1e-6
# An encoded true value is a small fixed-point number: within 2^80 of 0 or of n.
# A uniform residue lands within n/2^64 of 0 or n with probability 2^-63.
SMALL = 2**80
# Chi-square bound for 10 equal bins (9 degrees of freedom) at a false-alarm rate of 1e-8:
# a uniformity test asserts chi-square and KS, so its two false alarms add to 2e-8.
FALSE_ALARM = 1e-8
CHI2_BOUND = float(stats.chi2.isf(FALSE_ALARM, df=9))


@dataclass
class Run:
    """One in-memory run: its job, hub (with the traffic), outputs and what was captured."""

    job: JobConfig
    hub: InMemoryHub
    out: Path
    results: dict[str, Any]
    masks: dict[tuple[int, ...], list[int]]
    private: paillier.PrivateKey | None


def run_job(job: JobConfig, out: Path, mp: pytest.MonkeyPatch | None = None, **kwargs: Any) -> Run:
    """Run ``job``; with ``mp``, also record every mask and the Server's private key."""
    masks: dict[tuple[int, ...], list[int]] = {}
    keys: list[paillier.PrivateKey] = []
    if mp is not None:
        real_mask = fresh.mask
        real_keypair = server_steps.generate_keypair

        def mask(key: paillier.PublicKey, c: Any, noise: Any = None) -> tuple[Any, list[int]]:
            masked, values = real_mask(key, c, noise)
            masks[masked.values] = values
            return masked, values

        def keypair(bits: int, *args: Any) -> tuple[paillier.PublicKey, paillier.PrivateKey]:
            public, private = real_keypair(bits, *args)
            keys.append(private)
            return public, private

        mp.setattr(fresh, "mask", mask)
        mp.setattr(server_steps, "generate_keypair", keypair)
    hub = InMemoryHub()
    results = run_in_threads(job, hub, out, **kwargs)
    return Run(job, hub, out, results, masks, keys[0] if keys else None)


def modulus(run: Run) -> int:
    """The Paillier modulus of the run's (recorded) key."""
    assert run.private is not None
    return run.private.public_key.n


def succeeded(run: Run) -> Run:
    """The run, after checking every party finished without error."""
    assert not failures(run.results), failures(run.results)
    return run


def reference(
    job: JobConfig,
    data: dict[str, PartyData],
    start: np.ndarray,
    out: Path,
    epochs: int | None = None,
) -> tuple[list[np.ndarray], list[float]]:
    """The plaintext oracle from the Host's private start (``start``, read from the Host's
    model.json), on the run's batch plan, in the Host's order.

    The batch plan comes from the joint seed the Host's model.json in ``out`` records; its
    label flips come from the OS CSPRNG, so the oracle runs at ε = ∞ (no flips).
    ``epochs`` stops early (0: the initial weights).
    """
    host = data[job.host]
    assert host.y_train is not None
    assert job.label_dp.epsilon == math.inf, "the oracle cannot know the Host's private flips"
    rng = np.random.default_rng(job.seed)
    labels = host.y_train
    x_host = np.hstack([host.x_train, np.ones((host.x_train.shape[0], 1))])
    parts = [x_host] + [data[g].x_train for g in job.guests]
    penalised = [np.r_[np.ones(host.x_train.shape[1]), 0.0]]
    penalised += [np.ones(data[g].x_train.shape[1]) for g in job.guests]
    training = job.training if epochs is None else replace(job.training, epochs=epochs)
    plan = host_plan(out, job, x_host)
    thetas, losses = reference_train(
        parts, labels, training, rng, LOGISTIC, penalised=penalised, start=start, plan=plan
    )
    return [t.ravel() for t in thetas], losses


def saved_weights(run: Run, data: dict[str, PartyData]) -> list[np.ndarray]:
    """Each party's model.json weights looked up by feature name; the Host's bias last."""
    host = read_model(run.out, run.job.host)
    parts = [
        np.array([*(host["weights"][f] for f in data[run.job.host].feature_names), host["bias"]])
    ]
    for guest in run.job.guests:
        weights = read_model(run.out, guest)["weights"]
        parts.append(np.array([weights[f] for f in data[guest].feature_names]))
    return parts


# ---------------------------------------------------------------- 1. plaintext oracle


# Every pair of settings (guests 1 or 2, full or mini batches, standard or DJN
# obfuscation) is in some run: two guests in full batches run with DJN, two guests
# with standard obfuscation in mini-batches, one guest in full and mini-batches.
@pytest.mark.parametrize(
    ("guests", "batch_size", "obfuscation"),
    [
        (1, 0, "standard"),
        (1, 100, "standard"),
        (2, 150, "standard"),
        (2, 0, "djn"),
    ],
    ids=[
        "1-guest-full-batch",
        "1-guest-batch-100",
        "2-guests-batch-150",
        "2-guests-djn",
    ],
)
def test_encrypted_training_equals_the_plaintext_oracle(
    tmp_path: Path, guests: int, batch_size: int, obfuscation: str
) -> None:
    # Prepare: ε = ∞ (no flips), default lr 0.3 with decay 0.02 and λ = 0.1. Two epochs:
    # the second starts from the first's weights at the decayed rate.
    job = memory_job(guests, epochs=2, batch_size=batch_size)
    job = replace(job, obfuscation=obfuscation)
    data = party_data(job)

    # Act
    run = succeeded(run_job(job, tmp_path))
    expected_weights, expected_losses = reference(job, data, host_start(run.out), run.out)

    # Assert: every party's saved weights and the Host's loss history match the oracle.
    for got, want in zip(saved_weights(run, data), expected_weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=WEIGHT_TOL)
    summary = read_summary(run.out)
    np.testing.assert_allclose(summary["loss_history"], expected_losses, rtol=0, atol=LOSS_TOL)
    rows = data[job.host].x_train.shape[0]
    traffic = decoded_traffic(run.hub)
    opened = [b for _, to, _, b in traffic if to == "guest-1" and isinstance(b, Batch)]
    assert len(opened) == job.training.epochs * (math.ceil(rows / batch_size) if batch_size else 1)


# ------------------------------------------------- 2./3. what the Server sees; the key


@dataclass(frozen=True)
class Decryption:
    """One DecryptRequest answered: what the Server saw and the value behind the mask."""

    party: str
    epoch: int
    batch: int
    purpose: str
    seen: list[int]
    packed: list[int]  # what the mask hid: several values per residue (crypto.packing)
    true: list[int]


@pytest.fixture(scope="module")
def twin_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Run]]:
    """The same job (same seed, same session) run twice, masks and private key recorded."""
    job = memory_job(1, epochs=3)
    runs = []
    for i in range(2):
        with pytest.MonkeyPatch.context() as mp:
            runs.append(succeeded(run_job(job, tmp_path_factory.mktemp(f"twin{i}"), mp)))
    yield runs


def values_in(run: Run, party: str, purpose: str) -> int:
    """How many values a decryption packs: a party's gradient length, or the test rows."""
    data = party_data(run.job)[party if purpose == "gradient" else run.job.host]
    if purpose == "scores":
        return int(data.x_test.shape[0])
    return int(data.x_train.shape[1]) + (1 if party == run.job.host else 0)


def decryptions(run: Run) -> list[Decryption]:
    """Pair each DecryptRequest with its reply, unmask it with the recorded mask, unpack it."""
    n = modulus(run)
    pending: dict[str, deque[DecryptRequest]] = defaultdict(deque)
    out = []
    for sender, receiver, _, body in decoded_traffic(run.hub):
        if isinstance(body, DecryptRequest):
            pending[sender].append(body)
        elif isinstance(body, Decrypted):
            request = pending[receiver].popleft()  # one request in flight per party
            assert (request.epoch, request.batch, request.purpose) == (
                body.epoch,
                body.batch,
                body.purpose,
            )
            # A request that was never masked unmasks with zeros (and fails the tests).
            masks = run.masks.get(request.values.values, [0] * len(request.values))
            packed = [(v - r) % n for v, r in zip(body.values.values, masks, strict=True)]
            true = packing.unpack(packed, values_in(run, receiver, body.purpose), n)
            seen = list(body.values.values)
            slot = (receiver, body.epoch, body.batch, body.purpose)
            out.append(Decryption(*slot, seen, packed, true))
    assert not any(pending.values()), "a decrypt request was never answered"
    return out


def decile(v: int, n: int) -> int:
    """Which tenth of [0, n) the residue ``v`` lies in (exact integer arithmetic)."""
    return 10 * v // n


def chi_square(bins: list[int]) -> float:
    """Pearson's statistic of bin indices 0..9 against 10 equally likely bins."""
    counts = np.bincount(bins, minlength=10)
    expected = len(bins) / 10
    return float(((counts - expected) ** 2 / expected).sum())


def near_zero(v: int, n: int) -> int:
    """Distance of a residue from 0 mod n (small for every encoded real)."""
    return min(v, n - v)


def test_the_server_decrypts_only_masked_values(twin_runs: list[Run]) -> None:
    # Prepare: the true gradients and test scores, from the oracle at each epoch.
    run = twin_runs[0]
    job, n = run.job, modulus(run)
    data = party_data(job)
    guest = data["guest-1"]
    y = data["host"].y_train
    assert y is not None
    x_host = np.hstack([data["host"].x_train, np.ones((len(y), 1))])

    # Act
    seen = decryptions(run)
    begun = host_start(run.out)

    # Assert (a): nothing the Server decrypted is a true value, nor even near one …
    purposes = {d.purpose for d in seen}
    assert purposes == {"gradient", "scores"}
    for d in seen:
        assert all(s != t for s, t in zip(d.seen, d.packed, strict=True))
        assert all(near_zero(t, n) < SMALL for t in d.true), "the unmasked values are encoded reals"
        assert all(near_zero(s, n) > n >> 64 for s in d.seen), "a decrypted value looks unmasked"
    # … while the unmasked values are the true gradients and scores (so the test is not vacuous).
    for d in seen:
        start, _ = reference(job, data, begun, run.out, epochs=d.epoch)  # as the epoch began
        after, _ = reference(job, data, begun, run.out, epochs=d.epoch + 1)
        if d.purpose == "gradient":
            four_d = x_host @ start[0] + guest.x_train @ start[1] - 4.0 * y + 2.0
            x = x_host if d.party == "host" else guest.x_train
            np.testing.assert_allclose(
                decode(d.true, LOSS_BITS, n), x.T @ four_d, rtol=1e-4, atol=1e-3
            )
        else:
            np.testing.assert_allclose(
                decode(d.true, VALUE_BITS, n), guest.x_test @ after[1], atol=1e-4
            )


@pytest.mark.parametrize("purpose", ["gradient", "scores"])
def test_masked_values_are_uniform_over_z_n(twin_runs: list[Run], purpose: str) -> None:
    # Prepare: every residue the Server produced for this purpose, over both runs.
    seen: list[tuple[int, int]] = []  # (value, n)
    for run in twin_runs:
        n = modulus(run)
        seen += [(v, n) for d in decryptions(run) if d.purpose == purpose for v in d.seen]
    true = [(t, n) for d in decryptions(twin_runs[-1]) if d.purpose == purpose for t in d.packed]

    # Act
    statistic = chi_square([decile(v, n) for v, n in seen])
    ks = stats.kstest([v / n for v, n in seen], "uniform")

    # Assert: 10 bins pass chi-square and KS at a 1e-8 false-alarm rate each; the
    # unmasked packed values (the negative control) fail the same test. Packing puts
    # 5 values in each residue of a 512-bit key, so there are fewer residues to test.
    assert len(seen) >= 40
    assert statistic < CHI2_BOUND
    assert ks.pvalue > FALSE_ALARM
    assert chi_square([decile(t, n) for t, n in true]) > CHI2_BOUND


def test_masks_and_start_are_fresh_per_run_while_training_is_deterministic(
    twin_runs: list[Run],
) -> None:
    # Prepare
    first, second = (decryptions(run) for run in twin_runs)
    data = party_data(twin_runs[0].job)

    # Act: the same decryption slots (party, epoch, batch, purpose, order) of both runs.
    # Parties' requests interleave differently from run to run, so pair them by slot;
    # the stable sort keeps each party's own order within a slot.
    def slot(d: Decryption) -> tuple[str, int, int, str]:
        return (d.party, d.epoch, d.batch, d.purpose)

    pairs = list(zip(sorted(first, key=slot), sorted(second, key=slot), strict=True))

    # Assert: every masked value and the Host's private start differ; given its start,
    # each run's weights and losses are its plaintext twin's.
    for a, b in pairs:
        assert (a.party, a.epoch, a.batch, a.purpose) == (b.party, b.epoch, b.batch, b.purpose)
        assert all(x != y for x, y in zip(a.seen, b.seen, strict=True))
    begun = [host_start(run.out) for run in twin_runs]
    assert np.abs(begun[0] - begun[1]).min() > 1e-9  # no coefficient repeated
    for run, start in zip(twin_runs, begun, strict=True):
        expected, losses = reference(run.job, data, start, run.out)
        for got, want in zip(saved_weights(run, data), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=WEIGHT_TOL)
        np.testing.assert_allclose(
            read_summary(run.out)["loss_history"], losses, rtol=0, atol=LOSS_TOL
        )


def encodings(value: int) -> list[bytes]:
    """Ways an integer could be written into a frame: big/little-endian bytes, decimal."""
    size = (value.bit_length() + 7) // 8
    return [value.to_bytes(size, "big"), value.to_bytes(size, "little"), str(value).encode()]


def test_the_private_key_never_appears_in_any_message(twin_runs: list[Run]) -> None:
    for run in twin_runs:
        # Prepare: the Server's secrets, read from its phe key.
        assert run.private is not None
        p, q = int(run.private._key.p), int(run.private._key.q)
        secrets = {"p": p, "q": q, "λ": math.lcm(p - 1, q - 1), "φ": (p - 1) * (q - 1)}
        n = run.private.public_key.n

        # Act
        frames = [frame for sent in run.hub.sent for frame in sent.frames]

        # Assert: no encoding of any secret in any frame; the public n is found (control).
        assert len(frames) > 50
        for name, value in secrets.items():
            for needle in encodings(value):
                assert not any(needle in frame for frame in frames), f"{name} went on the wire"
        assert any(encodings(n)[0] in frame for frame in frames)


# ------------------------------------------------------------------ 4./5. label DP


@pytest.fixture(scope="module")
def public_key() -> paillier.PublicKey:
    """A 512-bit key for Host states built outside a run (flip and flipback use no crypto)."""
    return paillier.generate_keypair(512)[0]


def host_state(
    epsilon: float, public_key: paillier.PublicKey
) -> tuple[host_steps.HostState, PartyData]:
    """The Host's state right after the flip, and the rows (with true labels) it came from."""
    job = memory_job(1, epsilon=epsilon)
    data = party_data(job)[job.host]
    state = host_steps.init_state(data, public_key, job.guests, job, np.random.default_rng(7))
    assert state.seeded_noise
    return state, data


def test_init_state_keeps_only_the_flipped_labels(public_key: paillier.PublicKey) -> None:
    # Act
    state, data = host_state(1.0, public_key)

    # Assert: the true training labels are gone; the noisy ones differ in exactly
    # the reported number of rows; no field of the state holds the true labels.
    assert data.y_train is not None
    assert state.data.y_train is None
    assert np.array_equal(state.data.y_test, data.y_test)
    assert int((state.labels != data.y_train).sum()) == state.flip.flipped > 0
    for f in fields(state):
        value = getattr(state, f.name)
        if isinstance(value, np.ndarray) and value.shape == data.y_train.shape:
            assert not np.array_equal(value, data.y_train), f"HostState.{f.name} = true labels"


def test_flipback_reads_only_noisy_labels_and_the_model(public_key: paillier.PublicKey) -> None:
    # Prepare: a state after the flip and a model's joint scores.
    state, _ = host_state(1.0, public_key)
    rng = np.random.default_rng(1)
    state.zh_cache = state.x_train @ rng.normal(size=state.x_train.shape[1])
    guest_scores = rng.normal(size=len(state.labels))
    noisy = state.labels.copy()
    budget = round(state.flip.probability * len(noisy))
    expected = flipback(noisy, sigmoid(state.zh_cache + guest_scores), 0.05, max_flips=budget)

    # Act
    changed = host_steps.apply_flipback(state, guest_scores, 0.05)

    # Assert: exactly the pure function of (noisy labels, model scores).
    assert np.array_equal(state.labels, expected)
    assert changed == int((expected != noisy).sum()) == state.flipped_back > 0


def test_flipback_changes_no_more_labels_than_randomized_response_flipped(
    public_key: paillier.PublicKey,
) -> None:
    # Prepare: a model that disagrees with every label of the draw (σ at 0 or 1, far
    # from each), and flipback allowed every row (fraction 1): only the cap holds it.
    state, _ = host_state(1.0, public_key)
    drawn = state.labels.copy()
    cap = round(state.flip.probability * len(drawn))  # the flips expected of the draw
    state.zh_cache = np.where(drawn == 1, -20.0, 20.0)

    # Act: three flipback epochs in a row
    changed = [host_steps.apply_flipback(state, np.zeros(len(drawn)), 1.0) for _ in range(3)]

    # Assert: the first takes the whole cap; the later ones nothing more. At no point do
    # more labels differ from the draw than randomized response is expected to have
    # flipped (a cap per epoch alone would let three epochs change 3 × cap).
    assert changed == [cap, 0, 0] and cap > 0
    assert int((state.labels != drawn).sum()) == cap == state.flipped_back


def test_nothing_after_the_flip_reads_the_true_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: randomized response returns the same noisy vector whatever it is given;
    # two runs whose true training labels differ everywhere.
    job = memory_job(1, epochs=3, epsilon=2.0, flipback_every=1)
    data = party_data(job)
    true = data["host"].y_train
    assert true is not None
    fixed = randomized_response(true, 2.0, np.random.default_rng(11))
    calls = []

    def fake(
        labels: np.ndarray, epsilon: float, rng: np.random.Generator, num_classes: int = 2
    ) -> np.ndarray:
        calls.append(epsilon)
        return fixed.copy()

    monkeypatch.setattr(host_steps, "randomized_response", fake)
    # The Host's private start is another fresh draw per run: the same one for both here.
    start = starts.draw(LOGISTIC, data["host"].x_train.shape[1] + 1, np.random.default_rng(3))
    monkeypatch.setattr(starts, "host_start", lambda *_, **__: start.copy())
    hosts = {"a": data["host"], "b": with_labels(data["host"], 1 - true)}

    # Act
    runs = {
        k: succeeded(run_job(job, tmp_path / k, data={"host": host})) for k, host in hosts.items()
    }

    # Assert: identical models, losses, flipbacks and metrics.
    assert calls == [2.0, 2.0]
    a, b = (read_summary(runs[k].out) for k in "ab")
    assert a["flipback"]["flipped_back"] == b["flipback"]["flipped_back"] > 0
    for key in ("loss_history", "accuracy", "auc"):
        assert a[key] == b[key]
    for name in job.parties:
        if name != "server":
            assert (
                read_model(runs["a"].out, name)["weights"]
                == read_model(runs["b"].out, name)["weights"]
            )
    assert read_model(runs["a"].out, "host")["bias"] == read_model(runs["b"].out, "host")["bias"]


def test_flip_count_matches_randomized_response(tmp_path: Path) -> None:
    # Prepare: ε = 1 on the 426 training labels, flip probability 1/(1 + e).
    job = memory_job(1, epochs=1, epsilon=1.0, seed=3)
    y = party_data(job)["host"].y_train
    assert y is not None
    rows, p = len(y), 1.0 / (1.0 + math.e)

    # Act
    run = succeeded(run_job(job, tmp_path))
    flip = read_summary(run.out)["flip"]

    # Assert: within a 5-sigma binomial band; drawn from the OS CSPRNG (tests/attacks
    # checks that the job's seed does not reproduce them).
    assert flip["rows"] == rows == 426
    assert flip["probability"] == pytest.approx(p, rel=1e-12)
    assert abs(flip["count"] - rows * p) <= 5 * math.sqrt(rows * p * (1 - p))
    assert "OS CSPRNG" in flip["noise"] and "not private" not in flip["noise"]


# ------------------------------------------------------- 6./7. bad peers, divergence


@pytest.mark.parametrize("guests", [1, 2])
def test_a_guest_that_never_starts_is_named_within_the_timeout(tmp_path: Path, guests: int) -> None:
    # Prepare: the last guest has an inbox but never runs.
    job = memory_job(guests, timeout=1.5)
    missing = job.guests[-1]

    # Act
    began = time.monotonic()
    run = run_job(job, tmp_path, silent={missing}, join_timeout=15)
    took = time.monotonic() - began

    # Assert: the Host and the Server each time out naming the guest, or one does
    # and the other hears its Abort (which names the guest too).
    results = run.results
    ends = [results["host"], results["server"]]
    assert all(isinstance(e, PeerUnavailable | PeerAborted) for e in ends), ends
    assert any(isinstance(e, PeerUnavailable) for e in ends)
    assert all(f"no hello from {missing}" in str(e) for e in ends)
    for other in job.guests[:-1]:  # waits for the key longer than the Server for Hellos
        assert isinstance(results[other], PeerAborted) and missing in str(results[other])
    assert missing not in results
    # the timeout ended it, not the 15 s join: 5 s of slack for start-up and the Abort on a
    # machine whose other worker runs a test beside this one (measured 1.5-1.6 s alone)
    assert took < job.timeout_seconds + 5


def test_a_guest_with_another_job_file_is_refused(tmp_path: Path) -> None:
    # Prepare: the guest's job differs in one hyper-parameter.
    job = memory_job(1, timeout=60)
    other = with_overrides(job, learning_rate=0.5)
    assert other.fingerprint() != job.fingerprint()

    # Act
    began = time.monotonic()
    run = run_job(job, tmp_path, jobs={"guest-1": other}, join_timeout=90)
    took = time.monotonic() - began

    # Assert: refused as a config error by the Server and the Host (one of them may
    # hear the other's Abort first); every party ended, by abort, not by timeout.
    assert_refused_by_server_and_host(run.results, "guest-1 runs a different job file")
    assert isinstance(run.results["guest-1"], PeerAborted)
    assert took < job.timeout_seconds  # nobody waited out a timeout
    # The refusal names the differing table, not two 64-digit fingerprints.
    refusal = str(run.results["server"])
    assert "it differs in [training];" in refusal and job.fingerprint() not in refusal, refusal


def test_a_peer_without_section_digests_is_refused_by_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: Hellos as an older peer sends them, without job_sections.
    monkeypatch.setattr(handshake, "encode_sections", lambda _digests: "")
    job = memory_job(1, timeout=10)
    other = with_overrides(job, learning_rate=0.5)

    # Act
    run = run_job(job, tmp_path, jobs={"guest-1": other}, join_timeout=20)

    # Assert: still refused, naming both fingerprints as before.
    assert_refused_by_server_and_host(run.results, "guest-1 runs a different job file")
    refusal = str(run.results["server"])
    assert job.fingerprint() in refusal and other.fingerprint() in refusal, refusal


def assert_refused_by_server_and_host(results: dict[str, Any], reason: str) -> None:
    """Every party failed; the Server and the Host with ``reason`` (one may hear it by Abort)."""
    assert set(failures(results)) == {"server", "host", "guest-1"}
    ends = [results["server"], results["host"]]
    assert all(isinstance(e, ConfigError | PeerAborted) for e in ends), ends
    assert any(isinstance(e, ConfigError) for e in ends)
    assert all(reason in str(e) for e in ends)


def test_a_guest_whose_rows_do_not_line_up_is_refused(tmp_path: Path) -> None:
    # Prepare: the guest's training rows in another order (a wrong split, say) but with
    # the same row counts: without the row commitment this would train to the end.
    job = memory_job(1, timeout=60)
    rows = load_data(job, "guest-1", None, None)
    order = np.roll(np.arange(len(rows.train_ids)), 1)
    shifted = replace(
        rows,
        x_train=rows.x_train[order],
        train_ids=tuple(rows.train_ids[i] for i in order),
    )

    # Act
    began = time.monotonic()
    run = run_job(job, tmp_path, data={"guest-1": shifted}, join_timeout=90)
    took = time.monotonic() - began

    # Assert: the Host and the Server name the guest before any batch; all stop.
    assert_refused_by_server_and_host(run.results, "guest-1's rows do not line up with the host's")
    assert not any(isinstance(body, Batch) for *_, body in decoded_traffic(run.hub))
    assert took < job.timeout_seconds  # nobody waited out a timeout


def test_divergence_stops_every_party(tmp_path: Path) -> None:
    # Prepare: a step far outside where the Taylor approximation holds.
    job = memory_job(1, epochs=10, learning_rate=5.0, timeout=60)

    # Act
    began = time.monotonic()
    run = run_job(job, tmp_path, join_timeout=90)
    took = time.monotonic() - began

    # Assert: the Host says what to change; the others are told, not left waiting.
    results = run.results
    assert isinstance(results["host"], TrainingDiverged)
    assert "learning_rate" in str(results["host"])
    assert isinstance(results["server"], PeerAborted)
    assert isinstance(results["guest-1"], PeerAborted)
    assert "diverged" in str(results["guest-1"])
    assert took < job.timeout_seconds  # told at once, nobody waited out a timeout


@pytest.mark.parametrize(
    ("losses", "reason"),
    [
        ([-0.0188], "max_epochs"),  # a negative first Poisson loss is not a divergence
        ([-0.5, -0.2], ""),
        ([-0.5, 0.6], "diverged"),  # grown by more than |first|
        ([0.4, 0.9], "diverged"),  # as before for a positive loss: above 2 × first
        ([0.4, 0.7], ""),
        ([0.4, float("nan")], "diverged"),
    ],
)
def test_the_servers_divergence_verdict_reads_the_losses_growth(
    losses: list[float], reason: str
) -> None:
    state = SimpleNamespace(
        losses=losses,
        divergence_factor=2.0,
        tolerance=1e-6,
        allow=SimpleNamespace(max_epochs=1 if len(losses) == 1 else 5),
    )
    assert server_steps.verdict(state)[1] == reason  # type: ignore[arg-type]
