"""Time the in-process horizontal simulation: sequential vs batched clients, CPU vs CUDA.

    python benchmarks/hfl_device_bench.py [--clients 20,1000,10000] [--rounds 3]

The same as ``privfl bench hfl`` (:mod:`privfl.tools.bench.hfl`): per clients-per-round,
trainer and device, the seconds per round (wall and this process's CPU seconds, the
warm-up round not counted), the test accuracy, and the speed-up over sequential CPU
measured in the same run. Without a CUDA device it times the CPU only.
"""

from __future__ import annotations

import argparse

from privfl.tools.bench.hfl import HflBench, render_hfl, run_hfl_bench


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", default=",".join(str(c) for c in HflBench.per_round))
    parser.add_argument("--rounds", type=int, default=HflBench.rounds)
    parser.add_argument("--sequential-max", type=int, default=HflBench.sequential_max)
    args = parser.parse_args()
    bench = HflBench(
        per_round=tuple(int(c) for c in args.clients.split(",")),
        rounds=args.rounds,
        sequential_max=args.sequential_max,
    )
    print(render_hfl(run_hfl_bench(bench, lambda line: print(line, flush=True))))


if __name__ == "__main__":
    main()
