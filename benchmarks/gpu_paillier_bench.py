"""Paillier on the torch engine (``--engine cuda``) against gmpy2: throughput and bit-equality.

One prepared run for a GPU machine's short loan, printing, for one fresh key:

* standard encryptions/s, each with a fresh ``r^n mod n²`` (r from the OS CSPRNG), DJN
  encryptions/s (``h_s^a``, fresh ``a``) and CRT decryptions/s, on the device, each as a
  share of the issue's done-when target;
* the same operations with gmpy2 on one CPU core and on every core (process pool), measured
  in the same run;
* bit-equality of every device result against gmpy2 (``--samples``, 10,000 by default,
  checked on all CPU cores);
* optionally (``--lr-rows``) one LR epoch with ``privfl bench vfl`` on the GPU against the
  CPU pool (2 epochs each, 100 features).

    python benchmarks/gpu_paillier_bench.py                 # the GPU run (device: cuda)
    python benchmarks/gpu_paillier_bench.py --quick         # CPU torch, under a minute idle
    python benchmarks/gpu_paillier_bench.py --with-tests --lr-rows 100000   # everything
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from privfl.crypto import djn
from privfl.crypto.gmp import mpz
from privfl.crypto.gpu_pool import DeviceKey, load_torch
from privfl.crypto.paillier import generate_keypair, obfuscators, private_primes

TARGETS = {"standard": 60_000, "djn": 800_000, "decrypt": 250_000}
"""Issue 34's done-when on one H100/H200 (operations per second, 2048-bit keys)."""


CPU_SECONDS: list[float] = [0.0]
"""This process's CPU seconds in the last :func:`timed` call (CPU torch: its work)."""


def timed(func: Callable[[], Any]) -> tuple[Any, float]:
    """``func()`` and its wall seconds (the device work is synchronous: results come back)."""
    start, cpu = time.perf_counter(), time.process_time()
    out = func()
    CPU_SECONDS[0] = time.process_time() - cpu
    return out, time.perf_counter() - start


def _std_chunk(n: int, rs: Sequence[int]) -> list[int]:
    nn = mpz(n) * n
    return [int(pow(mpz(r), n, nn)) for r in rs]


def _djn_chunk(n: int, h_s: int, exps: Sequence[int]) -> list[int]:
    return [int(djn.fixed_base_pow(n, h_s, a)) for a in exps]


def on_cores(
    func: Callable[..., list[int]], head: Sequence[Any], items: Sequence[Any]
) -> list[int]:
    """``func(*head, chunk)`` over every CPU core, results in order."""
    cores = os.cpu_count() or 1
    size = -(-len(items) // (4 * cores))
    chunks = [items[i : i + size] for i in range(0, len(items), size)]
    with ProcessPoolExecutor(cores) as pool:
        parts = pool.map(func, *([h] * len(chunks) for h in head), chunks)
        return [v for part in parts for v in part]


def device_name(device: str, torch: Any) -> str:
    """The device in words."""
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(0)
        return f"{name} (torch {torch.__version__}, CUDA {torch.version.cuda})"
    return f"CPU torch {torch.__version__}, {torch.get_num_threads()} thread(s)"


def bench_device(args: argparse.Namespace, torch: Any) -> None:
    """Throughput and bit-equality of the three kinds on the device."""
    public, private = generate_keypair(args.bits, "djn")
    n, count = public.n, args.samples
    key = DeviceKey(n, args.device, h_s=public.h_s, primes=private_primes(private))
    plain_key = DeviceKey(n, args.device)  # a public-key holder: r^n mod n²
    warm = max(2, min(count, 64))
    plain_key.noise_standard([secrets.randbelow(n - 1) + 1 for _ in range(warm)])
    key.noise_djn([secrets.randbits(djn.exponent_bits(n)) for _ in range(warm)])

    plain = [secrets.randbelow(n) for _ in range(count)]
    rs = [secrets.randbelow(n - 1) + 1 for _ in range(count)]

    def encrypt(noise: Callable[[], list[int]]) -> tuple[list[int], list[int]]:
        values = noise()
        return values, public.encrypt_with_noise(plain, values)

    (noise, cipher), t_std = timed(lambda: encrypt(lambda: plain_key.noise_standard(rs)))
    report("standard encryption (fresh r^n)", count, t_std, "standard")
    exps = [secrets.randbits(djn.exponent_bits(n)) for _ in range(count)]
    (djn_noise, djn_cipher), t_djn = timed(lambda: encrypt(lambda: key.noise_djn(exps)))
    report("DJN encryption (fresh h_s^a)", count, t_djn, "djn")
    decrypted, t_dec = timed(lambda: key.decrypt(cipher))
    report("CRT decryption", count, t_dec, "decrypt")

    print(f"bit-equality against gmpy2 on {count} values each (all CPU cores):")
    equal_std = noise == on_cores(_std_chunk, (n,), rs)
    equal_djn = djn_noise == on_cores(_djn_chunk, (n, public.h_s), exps)
    print(f"  r^n mod n²: {'equal' if equal_std else 'DIFFERENT'}")
    print(f"  h_s^a mod n²: {'equal' if equal_djn else 'DIFFERENT'}")
    print(f"  decryptions: {'equal' if decrypted == plain else 'DIFFERENT'} (to the plaintexts)")
    sample = min(count, 64)
    print(f"  private-key decryption of {sample} DJN ciphertexts: ", end="")
    print("equal" if private.decrypt(djn_cipher[:sample]) == plain[:sample] else "DIFFERENT")
    bench_cpu(public, private, min(count, 64))


def report(label: str, count: int, seconds: float, kind: str) -> None:
    """One throughput line with its share of the target."""
    rate, cpu = count / seconds, CPU_SECONDS[0]
    share = 100 * rate / TARGETS[kind]
    print(
        f"  {label}: {rate:,.2f}/s ({count} in {seconds:.2f} s wall, {cpu:.2f} s CPU of this "
        f"process; {share:.4f} % of the target {TARGETS[kind]:,}/s)"
    )


def bench_cpu(public: Any, private: Any, count: int) -> None:
    """gmpy2 on one core and on all cores, in this run (the CPU reference)."""
    n, cores = public.n, os.cpu_count() or 1
    rs = [secrets.randbelow(n - 1) + 1 for _ in range(count)]
    _, t1 = timed(lambda: _std_chunk(n, rs))
    _, tall = timed(lambda: on_cores(_std_chunk, (n,), rs * cores))
    _, tdjn = timed(lambda: obfuscators(n, count, public.h_s))
    cipher = public.encrypt_with_noise([1] * count, obfuscators(n, count, public.h_s))
    _, tdec = timed(lambda: private.decrypt(cipher))
    print(f"gmpy2 in the same run, {count} values ({cores} cores, process pool for 'all'):")
    print(f"  r^n mod n²: {count / t1:,.0f}/s one core, {count * cores / tall:,.0f}/s all cores")
    print(
        f"  h_s^a: {count / tdjn:,.0f}/s one core; CRT decryption: {count / tdec:,.0f}/s one core"
    )


def bench_lr(rows: int) -> None:
    """One LR epoch (``privfl bench vfl``, 2 epochs, the first not counted) per engine."""
    for engine in ("cuda", "pool"):
        command = [sys.executable, "-m", "privfl", "bench", "vfl", "--runs-only"]
        command += ["--dataset", "synthetic", "--rows", str(rows), "--features", "100"]
        command += ["--epochs", "2", "--obfuscation", "standard", "--engine", engine]
        print(f"$ {' '.join(command[1:])}", flush=True)
        subprocess.run(command, check=False)


def main() -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CPU torch, 32 values, 2048 bits")
    parser.add_argument("--device", default=None, help="torch device (default: cuda, or cpu)")
    parser.add_argument("--bits", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--lr-rows", type=int, default=0, help="also the LR epoch (0: skip)")
    parser.add_argument(
        "--with-tests", action="store_true", help="first the cuda-marked tests (pytest -m cuda)"
    )
    args = parser.parse_args()
    if args.with_tests:
        tests = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "tests/crypto", "-rs"]
        print(f"$ {' '.join(tests[1:])}", flush=True)
        subprocess.run(tests, check=False)
    if args.quick:
        args.device, args.samples = args.device or "cpu", min(args.samples, 32)
    args.device = args.device or "cuda"
    torch = load_torch(args.device)
    if args.device == "cpu":
        torch.set_num_threads(1)
    print(f"device: {device_name(args.device, torch)}; {args.bits}-bit key, {args.samples} values")
    bench_device(args, torch)
    if args.lr_rows:
        bench_lr(args.lr_rows)


if __name__ == "__main__":
    main()
