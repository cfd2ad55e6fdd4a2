"""Time the in-process horizontal simulation on CPU and on CUDA, side by side.

    python benchmarks/hfl_device_bench.py [--clients 20,200,1000] [--rounds 3]

Prints, per client count and device, the seconds per round (wall and this
process's CPU seconds), the test accuracy, and CUDA's speed-up over CPU measured
in the same run. Without a CUDA device it times the CPU only. This measures the
clients as privfl trains them today (one after another); it is the baseline for
batched clients.
"""

from __future__ import annotations

import argparse
import time

import torch

from privfl.config.horizontal import HflConfig
from privfl.runs.simulate import run_experiment


def _time(config: HflConfig) -> tuple[float, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    summary = run_experiment(config)
    rounds = len(summary["accuracy_history"]) or 1  # rounds run (a budget may stop early)
    return (
        (time.perf_counter() - wall) / rounds,
        (time.process_time() - cpu) / rounds,
        float(summary["accuracy"]),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="20,200,1000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mechanisms", default="none,pnpm")
    args = parser.parse_args()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if "cuda" in devices:
        print(f"CUDA device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    print("mechanism clients device  s/round  cpu-s/round  accuracy  cuda÷cpu")
    for mechanism in args.mechanisms.split(","):
        for clients in (int(c) for c in args.clients.split(",")):
            base = None
            for device in devices:
                config = HflConfig(
                    clients=clients, rounds=args.rounds, device=device,
                    mechanism=mechanism, epsilon=2.0, seed=0,
                )
                per_round, cpu, accuracy = _time(config)
                base = per_round if device == "cpu" else base
                ratio = "" if device == "cpu" or base is None else f"{per_round / base:.2f}"
                print(
                    f"{mechanism:<9} {clients:>7} {device:<6} {per_round:8.3f} {cpu:12.3f}"
                    f"  {accuracy:8.4f}  {ratio}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
