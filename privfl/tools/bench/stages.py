"""One epoch (docs/protocol.md 6.2) stage by stage, in one process: naive phe, privfl, fate_utils.

Every variant computes the same quantities (encrypted scores, the residual, both parties'
``Xᵀ[[d]]``, masked decryption of the gradients, encrypted test scores for evaluation),
so per-stage times compare like with like. The naive variant is what the seed does:
phe's float ``EncodedNumber`` encodings, the Host encrypting its part of the residual
too (2n encryptions), one ``EncryptedNumber`` operation at a time in one process.
"""

from __future__ import annotations

import functools
import itertools
import math
import secrets
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import numpy as np

from privfl.crypto import packing
from privfl.crypto.encoding import DATA_BITS, VALUE_BITS, decode, encode, to_exponents
from privfl.crypto.paillier import PrivateKey, PublicKey, generate_keypair, obfuscators, unmask
from privfl.crypto.pools import CHUNK, NoisePool
from privfl.tools.bench.workload import Workload

STAGES = ("encrypt", "residual", "gradient", "decrypt", "evaluate")


@dataclass
class EpochTimes:
    """Seconds per stage of one epoch; ``extrapolated`` when measured on a row subsample."""

    variant: str
    stages: dict[str, float] = field(default_factory=dict)
    rows_measured: int = 0
    extrapolated: bool = False
    note: str = ""

    @property
    def epoch(self) -> float:
        return sum(self.stages.values())

    @contextmanager
    def stage(self, name: str, scale: float = 1.0) -> Iterator[None]:
        """Time one stage; ``scale`` extrapolates a subsample linearly to every row."""
        start = time.perf_counter()
        yield
        self.stages[name] = self.stages.get(name, 0.0) + (time.perf_counter() - start) * scale


def _weights(workload: Workload) -> tuple[np.ndarray, np.ndarray]:
    """Fixed small weights, so that scores and residuals are not all zero."""
    rng = np.random.default_rng(1)
    host = np.asarray(rng.normal(scale=0.1, size=workload.host.x_train.shape[1] + 1))
    guest = np.asarray(rng.normal(scale=0.1, size=workload.guest.x_train.shape[1]))
    return host, guest


def _with_bias(x: np.ndarray) -> np.ndarray:
    return np.hstack([x, np.ones((x.shape[0], 1))])


@dataclass(frozen=True)
class _Subsample:
    """At most ``max_rows`` training rows (and as many test rows in proportion), scaled up."""

    rows: int
    test: int
    scale: float
    test_scale: float
    theta_h: np.ndarray
    theta_g: np.ndarray
    x_h: np.ndarray
    x_g: np.ndarray
    y: np.ndarray


def _subsample(workload: Workload, max_rows: int) -> _Subsample:
    rows = min(workload.rows, max_rows)
    test = min(workload.test_rows, max(1, math.ceil(max_rows * workload.test_rows / workload.rows)))
    theta_h, theta_g = _weights(workload)
    assert workload.host.y_train is not None
    return _Subsample(
        rows=rows,
        test=test,
        scale=workload.rows / rows,
        test_scale=workload.test_rows / test,
        theta_h=theta_h,
        theta_g=theta_g,
        x_h=_with_bias(workload.host.x_train[:rows]),
        x_g=workload.guest.x_train[:rows],
        y=workload.host.y_train[:rows],
    )


def naive_epoch(workload: Workload, bits: int, max_rows: int) -> EpochTimes:
    """The seed's epoch with phe floats in one process, on at most ``max_rows`` rows.

    Every stage is linear in the rows, so a subsample is scaled up to the full table.
    """
    import phe

    public, private = phe.generate_paillier_keypair(n_length=bits)
    sub = _subsample(workload, max_rows)
    rows, test, scale, test_scale = sub.rows, sub.test, sub.scale, sub.test_scale
    theta_h, theta_g, x_h, x_g, y = sub.theta_h, sub.theta_g, sub.x_h, sub.x_g, sub.y
    out = EpochTimes("naive phe", rows_measured=rows, extrapolated=rows < workload.rows)
    with out.stage("encrypt", scale):
        enc_g = [public.encrypt(0.25 * float(v)) for v in x_g @ theta_g]
        enc_h = [public.encrypt(float(v)) for v in 0.25 * (x_h @ theta_h) - y + 0.5]
    with out.stage("residual", scale):
        d = [a + b for a, b in zip(enc_g, enc_h, strict=True)]
    with out.stage("gradient", scale):
        grads = [
            [
                sum((d[i] * float(x[i, j]) for i in range(rows)), public.encrypt(0.0, r_value=1))
                for j in range(x.shape[1])
            ]
            for x in (x_h, x_g)
        ]
    with out.stage("decrypt"):
        for grad in grads:
            masks = [secrets.randbelow(2**32) / 2**16 for _ in grad]
            _ = [private.decrypt(g + m) - m for g, m in zip(grad, masks, strict=True)]
    with out.stage("evaluate", test_scale):
        scores = [public.encrypt(float(v)) for v in workload.guest.x_test[:test] @ theta_g]
        _ = [private.decrypt(s) for s in scores]
    return out


def privfl_epoch(
    workload: Workload, public: PublicKey, private: PrivateKey, pool: NoisePool
) -> EpochTimes:
    """privfl's engine on every stage, its obfuscators computed now by ``pool`` (no prefetch)."""
    n = public.n
    theta_h, theta_g = _weights(workload)
    x_h = _with_bias(workload.host.x_train)
    assert workload.host.y_train is not None
    out = EpochTimes(f"privfl {public.obfuscation}", rows_measured=workload.rows)
    exp_h, exp_g = to_exponents(x_h, DATA_BITS), to_exponents(workload.guest.x_train, DATA_BITS)
    with out.stage("encrypt"):
        z_g = workload.guest.x_train @ theta_g
        scores = public.encrypt_with_noise(encode(z_g, VALUE_BITS, n), pool.take(len(z_g)))
    with out.stage("residual"):
        offset = x_h @ theta_h - 4.0 * workload.host.y_train + 2.0
        residual = public.add_plain(scores, encode(offset, VALUE_BITS, n))
        # What the Host sends the guest: its own fresh re-randomisation (crypto.fresh).
        residual = public.rerandomize(residual, pool.take(len(residual)))
    with out.stage("gradient"):
        grad_g = pool.matvec_t(public, exp_g, residual)
        grad_h = public.matvec_t(exp_h, residual)  # the Host computes its own inline
    with out.stage("decrypt"):
        for grad in (grad_g, grad_h):
            packed = packing.pack(public, grad)
            masked, masks = public.mask(packed)
            masked = public.rerandomize(masked, pool.take(len(masked)))  # re-randomised last
            plain = packing.unpack(unmask(private.decrypt(masked), masks, n), len(grad), n)
            decode(plain, VALUE_BITS + DATA_BITS, n)
    with out.stage("evaluate"):
        z_test = workload.guest.x_test @ theta_g
        plain = packing.pack_plain(encode(z_test, VALUE_BITS, n), n)
        encrypted = public.encrypt_with_noise(plain, pool.take(len(plain)))
        masked, masks = public.mask(encrypted)
        masked = public.rerandomize(masked, pool.take(len(masked)))  # the Host's, last
        values = packing.unpack(unmask(private.decrypt(masked), masks, n), len(z_test), n)
        decode(values, VALUE_BITS, n)
    return out


def fate_epoch(workload: Workload, bits: int, max_rows: int) -> EpochTimes | None:
    """The same stages with FATE 2.x's Rust library ``fate_utils``; None if not installed."""
    try:
        from fate_utils import paillier as fate
    except ImportError:
        return None
    secret, public, coder = fate.keygen(bits)
    sub = _subsample(workload, max_rows)
    rows, test, scale, test_scale = sub.rows, sub.test, sub.scale, sub.test_scale
    theta_h, theta_g, x_h, x_g, y = sub.theta_h, sub.theta_g, sub.x_h, sub.x_g, sub.y
    out = EpochTimes("fate_utils", rows_measured=rows, extrapolated=rows < workload.rows)
    with out.stage("encrypt", scale):
        enc = public.encrypt_encoded(coder.encode_f64_vec(x_g @ theta_g), True)
    with out.stage("residual", scale):
        offset = coder.encode_f64_vec(x_h @ theta_h - 4.0 * y + 2.0)
        residual = enc.add(public, public.encrypt_encoded(offset, False))
    grads: list[Any] = []
    with out.stage("gradient", scale):
        for x in (x_h, x_g):
            flat = coder.encode_f64_vec(np.ascontiguousarray(x).flatten())
            grads.append(residual.matmul(public, flat, [1, rows], [rows, x.shape[1]]))
    with out.stage("decrypt"):
        for grad in grads:
            coder.decode_f64_vec(secret.decrypt_to_encoded(grad))
    with out.stage("evaluate", test_scale):
        scores = public.encrypt_encoded(
            coder.encode_f64_vec(workload.guest.x_test[:test] @ theta_g), True
        )
        coder.decode_f64_vec(secret.decrypt_to_encoded(scores))
    out.note = "single-threaded Rust (GIL held); same protocol shape as privfl"
    return out


def per_call(
    func: Callable[[], object],
    count: int,
    clock: Callable[[], float] = time.perf_counter,
    repeats: int = 5,
) -> float:
    """Seconds of one call by ``clock`` (wall time by default): the median over ``repeats``
    rounds of the mean over ``count // repeats`` calls each (a round that a neighbour's
    burst slowed does not set the price)."""
    return float(statistics.median(round_means(func, max(1, count // repeats), repeats, clock)))


R = TypeVar("R")
SAMPLE_GAP = 0.5
"""Seconds between two in-run price samples (:class:`PriceSampler`): one operation's
sample at a time, a few ms to 80 ms of one core at 2048 bits, so a few % of one core
(0.4 s for one task of the SecureBoost key holder's obfuscators at 7,500 rows)."""
MIN_SAMPLES = 3
"""In-run samples per operation below which a run is priced around it instead."""


def sample_once(func: Callable[[], object], calls: int, per: int = 1, warm: bool = True) -> float:
    """CPU seconds of one operation, the mean of ``calls`` calls of ``func`` (``per``
    operations each) on this thread's clock, after one untimed call: a worker computes its
    operations back to back, so a sample taken after a pause must not count the caches it
    finds cold. ``warm`` False: no untimed call, for a call that is a worker's whole task
    (its data does not fit a cache, so a warm start changes nothing and would double the
    sample's cost)."""
    if warm:
        func()
    return round_means(func, calls, 1, time.thread_time)[0] / per


class PriceSampler:
    """Prices operations while a run goes on, from this (bench) process's own thread.

    Every ``gap`` seconds one operation's sample, round robin (``ops``: name → a callable
    returning CPU seconds per operation). On the thread's own CPU clock, so the bench's
    watch threads polling /proc are not counted. A price taken just before and just after a
    run misjudges it when the machine's load moves during it (a neighbour's job that starts
    as the run ends prices every operation of the run at the busy machine's cost).
    """

    def __init__(self, ops: dict[str, Callable[[], float]], gap: float | None = None) -> None:
        self.ops, self.gap = ops, SAMPLE_GAP if gap is None else gap
        self.samples: dict[str, list[float]] = {name: [] for name in ops}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for name in itertools.cycle(self.ops):
            if self._stop.wait(self.gap):
                return
            self.samples[name].append(self.ops[name]())

    def stop(self) -> dict[str, list[float]]:
        """Stop sampling; every sample taken, per operation."""
        self._stop.set()
        self._thread.join()
        return self.samples


@dataclass
class Pricing:
    """What a run's floor is priced at: measurements just before and after it, and the
    samples taken while it ran (:class:`PriceSampler`)."""

    before: dict[str, float]
    after: dict[str, float]
    samples: dict[str, list[float]] = field(default_factory=dict)

    @property
    def around(self) -> dict[str, float]:
        """The mean of the prices just before and just after the run."""
        return {k: (self.before[k] + self.after[k]) / 2 for k in self.before}

    @property
    def judged(self) -> dict[str, float]:
        """Per operation the median of its in-run samples, where there are ``MIN_SAMPLES``
        (the run's own load set them); else the price around the run (a short run)."""
        around = self.around
        return {
            k: float(statistics.median(self.samples[k]))
            if len(self.samples.get(k, ())) >= MIN_SAMPLES
            else around[k]
            for k in around
        }

    def as_dict(self) -> dict[str, Any]:
        """The prices before, after, around and judged; the samples' count per operation."""
        counts = {k: len(v) for k, v in self.samples.items()}
        return {**asdict(self), "around": self.around, "judged": self.judged, "samples": counts}


def priced_around(
    measure: Callable[[], dict[str, float]],
    run: Callable[[], R],
    sample: dict[str, Callable[[], float]] | None = None,
) -> tuple[R, Pricing]:
    """``run()`` and the prices it is judged at: ``measure()`` just before and just after
    it, and each of ``sample``'s operations sampled while it runs (prices move with the
    machine's load; the run's own load sets them)."""
    before = measure()
    sampler = PriceSampler(sample or {})
    try:
        result = run()
    finally:
        samples = sampler.stop()
    return result, Pricing(before, measure(), samples)


def round_means(
    func: Callable[[], object], calls: int, repeats: int, clock: Callable[[], float]
) -> list[float]:
    """Seconds of one call by ``clock`` in each of ``repeats`` rounds of ``calls`` calls."""
    means = []
    for _ in range(repeats):
        start = clock()
        for _ in range(calls):
            func()
        means.append((clock() - start) / calls)
    return means


def _primitive_ops(
    public: PublicKey, private: PrivateKey, djn_key: PublicKey
) -> dict[str, tuple[Callable[[], object], int]]:
    """Per primitive: one call, and how many calls price it (about 0.1 s at 1024 bits)."""
    [c] = public.encrypt([1])
    djn_key.fresh_noise(1)  # build the fixed-base table outside the timing
    a, b, n2 = two_ciphertexts(public)
    return {
        "powmod_r_n": (lambda: obfuscators(public.n, 1), 40),
        "djn_obfuscation": (lambda: djn_key.fresh_noise(1), 200),
        "decrypt": (lambda: private.decrypt([c]), 100),
        # the unit of the floor's Xᵀ[[d]] term (matvec_mulmods): its price moves with the load
        "mulmod": (lambda: a * b % n2, 20_000),
    }


def two_ciphertexts(public: PublicKey) -> tuple[Any, Any, Any]:
    """Two full-size ciphertexts and ``n²`` as GMP integers (a mulmod's operands)."""
    from privfl.crypto.gmp import mpz

    a, b = public.encrypt([3, 5])
    return mpz(a), mpz(b), mpz(public.nsquare)


def primitives(
    public: PublicKey,
    private: PrivateKey,
    djn_key: PublicKey,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Seconds per primitive: the standard obfuscation powmod, a DJN one, a decryption.

    ``time.process_time`` as the ``clock`` gives CPU seconds, which a busy machine does
    not inflate: the floor of the load-proof CPU ratios. About 0.1 s of work per
    primitive at 1024 bits (0.25–0.4 s at 2048) in five rounds, priced at the median round
    (:func:`per_call`), so that one slow call or round does not set the price.
    """
    ops = _primitive_ops(public, private, djn_key)
    return {name: per_call(func, count, clock) for name, (func, count) in ops.items()}


def primitive_samples(
    public: PublicKey, private: PrivateKey, djn_key: PublicKey
) -> dict[str, Callable[[], float]]:
    """One in-run sample per primitive (:class:`PriceSampler`): a fortieth of the calls
    :func:`primitives` makes, at least one (at 2048 bits 10–20 ms of CPU each)."""
    ops = _primitive_ops(public, private, djn_key)
    return {
        name: functools.partial(sample_once, func, max(1, count // 40))
        for name, (func, count) in ops.items()
    }


def matvec_cpu(workload: Workload, public: PublicKey) -> float:
    """CPU seconds of one epoch's multi-exponentiations and packing, inline on one core.

    Arithmetic every epoch of the protocol needs, like the obfuscations and decryptions:
    ``Xᵀ[[d]]`` (the Host's columns and bias, the guest's), the Host's loss term
    ``Σ_i w_i·[[Z_i]]`` (one more multi-exponentiation over the rows, learning/kinds) and
    the Horner packing of both gradients (crypto.packing) — the floor's third term,
    measured on fresh ciphertexts of the workload's row count.
    """
    x_h = _with_bias(workload.host.x_train)
    exp_h, exp_g = to_exponents(x_h, DATA_BITS), to_exponents(workload.guest.x_train, DATA_BITS)
    theta_h, _ = _weights(workload)
    assert workload.host.y_train is not None
    z_host = x_h @ theta_h
    signed = 2.0 * workload.host.y_train - 1.0
    loss_weights = to_exponents(2.0 * z_host - 4.0 * signed, DATA_BITS).tolist()
    # Distinct full-size ciphertexts; the multiplications cost the same whatever they encrypt.
    residual = public.encrypt_with_noise(list(range(len(x_h))), obfuscators(public.n, 1) * len(x_h))
    start = time.process_time()
    for exps in (exp_h, exp_g):
        packing.pack(public, public.matvec_t(exps, residual))
    public.dot(residual, loss_weights)
    return time.process_time() - start


def matvec_mulmods(workload: Workload, public: PublicKey) -> float:
    """The floor's third term (:func:`matvec_cpu`) in mulmods n²: its CPU seconds over the
    median price of one mulmod measured just before and just after it.

    It is measured once per workload, at that moment's load; each run prices it at its
    own mulmod price (:class:`PriceSampler`), as it prices obfuscations and decryptions,
    so that the term moves with the load as the operations it counts do (a
    multi-exponentiation is nearly all mulmods n²).
    """
    a, b, n2 = two_ciphertexts(public)
    before = per_call(lambda: a * b % n2, 20_000, time.process_time)
    seconds = matvec_cpu(workload, public)
    after = per_call(lambda: a * b % n2, 20_000, time.process_time)
    return seconds / ((before + after) / 2)


def throughput(public: PublicKey, workers: int, count: int) -> float:
    """Obfuscations per second with ``workers`` processes (pool started before timing)."""
    pool = NoisePool(public.n, workers, public.h_s, nice=0)
    try:
        pool.take(max(1, workers) * CHUNK)  # every worker started, outside the timing
        start = time.perf_counter()
        pool.take(count)
        return count / (time.perf_counter() - start)
    finally:
        pool.close()


def keys(bits: int) -> tuple[PublicKey, PrivateKey, PublicKey]:
    """A standard key pair and the same modulus with a DJN generator added."""
    public, private = generate_keypair(bits)
    from privfl.crypto.djn import make_generator

    return public, private, PublicKey(public.n, make_generator(public.n))
