"""Paillier obfuscators (``r^n`` or DJN ``h_s^a`` mod n²) computed ahead of time by workers.

An obfuscation is 96 % of an encryption's cost and needs no plaintext, so a party
can compute them on every core, and while it waits for its peers. Workers draw r
from their own CSPRNG (``secrets``); only the resulting integers come back, over
local process pipes (never over the network). A second set of workers splits the
party's ``Xᵀ[[d]]`` by columns, over slices of at most ``MATVEC_ROWS`` rows: the
exponents and ciphertexts of one slice go to them over the same local pipes, and the
slices' partial products per column are multiplied together.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np
import numpy.typing as npt

from privfl import pulse
from privfl.crypto.gmp import mpz
from privfl.crypto.paillier import (
    PrivateKey,
    PublicKey,
    decrypt_with_primes,
    obfuscators,
    obfuscators_crt,
    private_primes,
)

CHUNK = 32  # obfuscators per task: large enough to amortise IPC, small enough to balance
MATVEC_ROWS = 65536
"""Rows of ``Xᵀ[[d]]`` in flight at a time: beyond, the rows are cut into slices and
each worker holds one slice's ciphertexts, never the whole vector's. Large, because the
bucket method pays ``2^w`` bucket products per window and column on top of one
multiplication per row: slices of 4,096 rows cost about 1.5× the multiplications of one
pass over 100,000 (and an epoch 20 % more CPU, measured); 65,536 about 1.02×."""
DECRYPT_CHUNK = 64  # decryptions between two progress ticks when decrypting inline
BACKGROUND_NICE = 5
"""Prefetching obfuscators is background work: the work a peer waits for (``Xᵀ[[d]]``,
the Host's and Server's steps on the same machine) goes first, prefetching fills idle time."""


def _exit_with_parent(parent: int, nice: int = 0) -> None:
    """Worker initializer: end this worker when the party process is gone.

    A party killed with SIGKILL cannot shut its pool down; without this watch its
    workers would wait for work forever. ``nice`` lowers the worker's priority.
    Ctrl-C reaches every process of the terminal's group: the party handles it and
    shuts its pool down, so a worker ignores it rather than die with a traceback
    and leave the pool's semaphores behind.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Spawned with SIGINT blocked (_spawn_pool): a Ctrl-C while this interpreter was
    # still starting is pending, and ignoring it discards it.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if nice:
        os.nice(nice)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def _matvec_block(n: int, x: npt.NDArray[np.int64], c: list[int]) -> list[int]:
    """Worker task: one block of columns of ``Xᵀ[[d]]`` over one slice of rows."""
    return PublicKey(n).matvec_t(x, c)


def row_blocks(rows: int, most: int = MATVEC_ROWS) -> list[slice]:
    """Contiguous row ranges of nearly equal size, none over ``most`` rows."""
    count = max(-(-rows // most), 1)
    bounds = np.linspace(0, rows, count + 1).astype(int).tolist()
    return [slice(a, b) for a, b in itertools.pairwise(bounds)]


def combine_columns(partials: Sequence[Sequence[int]], n2: int) -> list[int]:
    """Per column, the product mod ``n2`` of every block's partial product.

    ``Π_i c_i^{x_ij} mod n²`` is exact modular arithmetic, so splitting the rows and
    multiplying the blocks' products gives the same integers as one pass over every row.
    """
    totals = [mpz(1)] * len(partials[0])
    for block in partials:
        totals = [t * v % n2 for t, v in zip(totals, block, strict=True)]
    return [int(t) for t in totals]


def bulk_chunk(count: int, workers: int, chunk: int = CHUNK) -> int:
    """Obfuscators per task of a bulk prefetch (:meth:`NoisePool.prefetch`): four tasks
    per worker, none under ``chunk``. The SecureBoost bench prices the key holder's
    obfuscators in tasks of this size: per obfuscator they cost less than in ``CHUNK``s,
    as each fixed-base table row serves more exponents while it is in cache."""
    return max(chunk, -(-count // (4 * workers)))


def _spawn_pool(workers: int, nice: int) -> ProcessPoolExecutor:
    """Worker processes that exit with their party; spawned, since the party runs ZeroMQ
    threads that must not be forked. All of them start now, in the background, so the
    first real task does not pay for starting an interpreter. They start with SIGINT
    blocked, so a Ctrl-C that reaches them while they import (before their initializer
    ignores it) stays pending instead of printing a traceback; the party still gets it."""
    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_exit_with_parent,
        initargs=(os.getpid(), nice),
    )
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        for _ in range(workers):
            pool.submit(os.getpid)  # the executor starts one more process per pending task
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return pool


class NoisePool:
    """A queue of obfuscators filled by ``workers`` processes (inline when workers <= 1).

    The same workers also split a party's ``Xᵀ[[d]]`` by columns (:meth:`matvec_t`).
    """

    chunk = CHUNK  # obfuscators per background task
    matvec_rows = MATVEC_ROWS  # rows of Xᵀ[[d]] in flight at a time

    def __init__(
        self,
        n: int,
        workers: int = 0,
        h_s: int = 0,
        nice: int = BACKGROUND_NICE,
        primes: tuple[int, int] | None = None,
        *,
        noise: bool = True,
    ) -> None:
        """``noise`` False: compute workers only (the GLM Server decrypts, never encrypts)."""
        self.n = n
        self.h_s = h_s  # non-zero: DJN short-exponent obfuscators (see crypto.djn)
        # The key holder's own pool: standard obfuscators by CRT whatever the job's
        # obfuscation (obfuscators_crt: the distribution of r^n, cheaper than DJN's h_s^a).
        self.primes = primes
        self.workers = workers or os.cpu_count() or 1
        self._ready: deque[int] = deque()
        self._pending: deque[Future[list[int]]] = deque()
        self._pending_count = 0
        self._executor: ProcessPoolExecutor | None = None
        self._compute: ProcessPoolExecutor | None = None  # Xᵀ[[d]], never queued behind noise
        if self.workers > 1:
            self._executor = _spawn_pool(self.workers, nice) if noise else None
            self._compute = _spawn_pool(self.workers, 0)

    @property
    def parallel(self) -> bool:
        """Whether work goes to workers (False: computed inline, in this process)."""
        return self._compute is not None

    def _submit_noise(self, size: int) -> Future[list[int]]:
        """One task of ``size`` obfuscators on the (niced) noise workers."""
        assert self._executor is not None
        if self.primes is not None:
            return self._executor.submit(obfuscators_crt, self.n, *self.primes, size)
        return self._executor.submit(obfuscators, self.n, size, self.h_s)

    def _run_blocks(
        self, func: Callable[..., list[int]], blocks: Sequence[tuple[object, ...]]
    ) -> list[int]:
        """``func(*block)`` for every block on the compute workers, concatenated in order."""
        assert self._compute is not None
        futures = [self._compute.submit(func, *block) for block in blocks]
        out: list[int] = []
        for done, future in enumerate(futures, start=1):
            out += future.result()
            pulse.tick(done, len(futures))  # busy is not dead: the peers hear how far
        return out

    def prefetch(self, count: int, *, bulk: bool = False) -> None:
        """Start computing ``count`` more obfuscators in the background.

        In tasks of ``chunk`` (``CHUNK`` here); ``bulk``, for a batch that is taken whole later (a
        SecureBoost tree's gradients), in four tasks per worker: the 235 submissions of
        7,500 obfuscators cost the submitting process about 20 ms.
        """
        if not self.parallel:
            return
        chunk = bulk_chunk(count, self.workers, self.chunk) if bulk else self.chunk
        for start in range(0, count, chunk):
            size = min(chunk, count - start)
            self._pending.append(self._submit_noise(size))
            self._pending_count += size

    def take(self, count: int) -> list[int]:
        """``count`` obfuscators: prefetched ones first, the rest computed now in parallel."""
        missing = count - len(self._ready) - self._pending_count
        if missing > 0 and not self.parallel:
            # In chunks, so that a long encryption reports its progress (privfl/pulse.py).
            for start in range(0, missing, self.chunk):
                size = min(self.chunk, missing - start)
                if self.primes is not None:
                    self._ready.extend(obfuscators_crt(self.n, *self.primes, size))
                else:
                    self._ready.extend(obfuscators(self.n, size, self.h_s))
                pulse.tick(min(len(self._ready), count), count)
        elif missing > 0:
            self.prefetch(missing)
        return self._collect(count)

    def _collect(self, count: int) -> list[int]:
        """``count`` ready obfuscators, waiting for pending tasks in order as needed."""
        while len(self._ready) < count:
            chunk = self._pending.popleft().result()
            self._pending_count -= len(chunk)
            self._ready.extend(chunk)
            pulse.tick(min(len(self._ready), count), count)
        return [self._ready.popleft() for _ in range(count)]

    def matvec_t(self, key: PublicKey, x: npt.NDArray[np.int64], c: Sequence[int]) -> list[int]:
        """``key.matvec_t(x, c)`` with its columns split over the workers (inline with one).

        Slice by slice of at most ``matvec_rows`` rows (one slice's ciphertexts in flight):
        each worker gets the slice's ciphertexts and a block of columns; the blocks come
        back in order, and the slices' partial products per column multiply to the same
        list :meth:`PublicKey.matvec_t` returns (:func:`combine_columns`).
        """
        columns = x.shape[1] if x.ndim == 2 else 0
        if not self.parallel or columns < 2 or x.shape[0] != len(c):
            return key.matvec_t(x, c)  # (a shape mismatch raises there)
        groups = [g for g in np.array_split(np.arange(columns), min(self.workers, columns))]
        partials = []
        for rows in row_blocks(len(c), self.matvec_rows):
            ciphertexts = [int(v) for v in c[rows]]
            blocks = [(key.n, np.ascontiguousarray(x[rows][:, g]), ciphertexts) for g in groups]
            partials.append(self._run_blocks(_matvec_block, blocks))
        return combine_columns(partials, key.n * key.n)

    def run_split(
        self,
        func: Callable[..., list[int]],
        blocks: Sequence[tuple[object, ...]],
        *,
        private: bool = False,
    ) -> list[int]:
        """``func(*block)`` for every block, on the compute workers (inline with one), in order.

        ``func`` must be a module-level function (the workers import it by name).
        ``private``: the blocks carry the private key (the key holder's decryptions). This
        pool's workers are the party's own processes on its own machine, so they run
        them; an engine whose workers may be other machines keeps them local
        (:class:`privfl.crypto.ray_pool.RayPool`).
        """
        if not self.parallel or len(blocks) < 2:
            return [value for block in blocks for value in func(*block)]
        return self._run_blocks(func, blocks)

    def decrypt(self, key: PrivateKey, values: Sequence[int]) -> list[int]:
        """The key holder's decryptions split over these workers (inline without them), in order.

        A pool's workers are the key holder's processes on its machine: the primes reach them
        over local pipes (docs/security.md); an engine whose workers may be other machines
        keeps these blocks on this machine unless its operator opts in (``--ray-private-key``).
        """
        parts = min(self.workers, len(values) // 4)
        if parts < 2:
            return _decrypt_inline(key, values)
        n, (p, q) = key.public_key.n, private_primes(key)
        blocks = [(n, p, q, [int(v) for v in b]) for b in np.array_split(list(values), parts)]
        return self.run_split(decrypt_with_primes, blocks, private=True)

    def close(self) -> None:
        """Stop the workers (pending work is dropped)."""
        for pool in (self._executor, self._compute):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self._executor = self._compute = None


def decrypt_split(key: PrivateKey, pool: NoisePool | None, values: Sequence[int]) -> list[int]:
    """Decrypt over the key holder's own workers (inline without them), in order."""
    if pool is None:
        return _decrypt_inline(key, values)
    return pool.decrypt(key, values)


def _decrypt_inline(key: PrivateKey, values: Sequence[int]) -> list[int]:
    """Decrypt in this process, with a progress tick every ``DECRYPT_CHUNK`` (busy is not dead)."""
    items, out = list(values), []
    for start in range(0, len(items), DECRYPT_CHUNK):
        out += key.decrypt(items[start : start + DECRYPT_CHUNK])
        pulse.tick(len(out), len(items))
    return out
