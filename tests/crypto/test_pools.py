"""The obfuscator pool: every value is a valid r^n, inline and with worker processes."""

from __future__ import annotations

import os
import signal

import pytest

from privfl.crypto.paillier import PublicKey, generate_keypair, private_primes
from privfl.crypto.pools import CHUNK, NoisePool, _spawn_pool


@pytest.fixture(scope="module")
def keypair() -> tuple[PublicKey, object]:
    return generate_keypair(512)


@pytest.mark.parametrize(("workers", "crt"), [(1, False), (2, False), (1, True), (2, True)])
def test_pool_values_encrypt_correctly_in_any_batch_sizes(keypair, workers: int, crt) -> None:
    public, private = keypair
    pool = NoisePool(public.n, workers, primes=private_primes(private) if crt else None)
    try:
        pool.prefetch(CHUNK + 5)  # a short last chunk: counts must stay exact
        plain = list(range(3 * CHUNK + 7))
        for size in (1, CHUNK + 3, 2 * CHUNK + 3):
            noise = pool.take(size)
            assert len(noise) == size and len(set(noise)) == size
            ciphertexts = public.encrypt_with_noise(plain[:size], noise)
            assert private.decrypt(ciphertexts) == plain[:size]
            pool.prefetch(size)
    finally:
        pool.close()


def test_key_holder_pool_draws_crt_obfuscators_in_djn_jobs_too(monkeypatch) -> None:
    from privfl.crypto import pools

    public, private = generate_keypair(512, "djn")
    p, q = private_primes(private)
    calls: list[int] = []
    crt = pools.obfuscators_crt

    def spy(n: int, p_: int, q_: int, count: int) -> list[int]:
        calls.append(count)
        return crt(n, p_, q_, count)

    pool = NoisePool(public.n, 1, public.h_s, primes=(p, q))
    monkeypatch.setattr(pools, "obfuscators_crt", spy)
    noise = pool.take(3)

    assert calls and sum(calls) >= 3  # the key holder's tables, not the public h_s^a
    assert private.decrypt(public.encrypt_with_noise([1, 2, 3], noise)) == [1, 2, 3]
    # a guest's pool (no primes) keeps the job's DJN obfuscators
    assert NoisePool(public.n, 1, public.h_s).primes is None


def test_rerandomize_with_pool_noise_keeps_plaintexts(keypair) -> None:
    public, private = keypair
    pool = NoisePool(public.n, 1)
    ciphertexts = public.encrypt([7, 11])
    fresh = public.rerandomize(ciphertexts, pool.take(2))
    assert fresh != ciphertexts
    assert private.decrypt(fresh) == [7, 11]


def test_workers_exit_when_their_party_is_killed(tmp_path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import sys, time\n"
        "from privfl.crypto.pools import NoisePool\n"
        "pool = NoisePool(int(sys.argv[1]), 2)\n"
        "pool.take(200)\n"
        "print(' '.join(str(p) for p in pool._executor._processes), flush=True)\n"
        "time.sleep(60)\n"
    )
    party = subprocess.Popen(
        [sys.executable, "-c", script, str(2**511 + 111)], stdout=subprocess.PIPE, text=True
    )
    assert party.stdout is not None
    try:
        workers = [int(p) for p in party.stdout.readline().split()]
    finally:
        party.stdout.close()
        os.kill(party.pid, signal.SIGKILL)
        party.wait()
    assert workers
    deadline = time.monotonic() + 10
    alive = set(workers)
    while alive and time.monotonic() < deadline:
        for pid in list(alive):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                alive.discard(pid)
        time.sleep(0.1)
    assert not alive, f"workers {alive} outlived their party"


def test_a_ctrl_c_while_workers_start_leaves_no_traceback_and_a_working_pool(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # Ctrl-C reaches every process of the terminal's group, workers still importing too.
    pool = _spawn_pool(2, 0)
    try:
        for process in list(pool._processes.values()):
            os.kill(process.pid, signal.SIGINT)
        assert pool.submit(os.getpid).result(timeout=120) > 0
        assert all(p.is_alive() for p in pool._processes.values())
    finally:
        pool.shutdown()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
