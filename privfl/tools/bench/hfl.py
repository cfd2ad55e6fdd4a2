"""``privfl bench hfl``: seconds per horizontal round, sequential vs batched, CPU vs CUDA.

Each row is one in-process run (:func:`privfl.runs.simulate.run_experiment`) of the
digits MLP, non-private. Its first round warms up and is not counted: seconds per
round are wall and this process's CPU seconds between the first and the last round.
Up to the digits' training rows, the clients of a round are the whole partitioned
population; beyond, a population of ``population`` clients holding ``client_rows``
rows each, drawn with replacement (:mod:`privfl.data.population`), is sampled.
The peak memory column is the process's peak so far (it only grows down the table).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from privfl.config.horizontal import HflConfig

DIGITS_TRAIN_ROWS = 1347  # the partition holds at most one client per row


@dataclass(frozen=True)  # no slots: the CLI reads the defaults off the class
class HflBench:
    """What to run: clients per round, rounds, trainers and devices."""

    per_round: tuple[int, ...] = (20, 1_000, 10_000)
    rounds: int = 3  # the first is a warm-up
    trainers: tuple[str, ...] = ("sequential", "batched")
    devices: tuple[str, ...] = ("cpu", "cuda")
    population: int = 1_000_000
    client_rows: int = 8
    sequential_max: int = 10_000  # above this many clients per round, batched only


def bench_config(bench: HflBench, clients: int, trainer: str, device: str) -> HflConfig:
    """The run of one row: a partition up to the rows, else a sampled population."""
    base = HflConfig(rounds=bench.rounds, device=device, batched=trainer == "batched", seed=0)
    if clients <= DIGITS_TRAIN_ROWS:
        return replace(base, clients=clients)
    return replace(
        base,
        clients=bench.population,
        fraction=clients / bench.population,
        client_rows=bench.client_rows,
    )


def time_run(config: HflConfig) -> dict[str, Any]:
    """Seconds per round (wall, CPU) after the warm-up round, accuracy, peak memory."""
    from privfl.runs.simulate import run_experiment  # torch: the horizontal extra

    marks: list[tuple[float, float]] = []
    summary = run_experiment(
        config, on_round=lambda _: marks.append((time.perf_counter(), time.process_time()))
    )
    counted = max(len(marks) - 1, 1)
    wall = (marks[-1][0] - marks[0][0]) / counted if len(marks) > 1 else float("nan")
    cpu = (marks[-1][1] - marks[0][1]) / counted if len(marks) > 1 else float("nan")
    return {
        "seconds_per_round": wall,
        "cpu_seconds_per_round": cpu,
        "accuracy": float(summary["accuracy"]),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_hfl_bench(bench: HflBench, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every (clients per round, trainer, device) row, measured in this one run."""
    import torch  # the horizontal extra; `privfl bench vfl` runs without it

    devices = [d for d in bench.devices if d == "cpu" or torch.cuda.is_available()]
    rows = []
    for clients in bench.per_round:
        for trainer in bench.trainers:
            if trainer == "sequential" and clients > bench.sequential_max:
                continue
            for device in devices:
                log(f"{clients} clients/round, {trainer}, {device}")
                result = time_run(bench_config(bench, clients, trainer, device))
                rows.append({"clients": clients, "trainer": trainer, "device": device, **result})
    return rows


def render_hfl(rows: list[dict[str, Any]]) -> str:
    """A table with each row's speed-up over sequential CPU at the same clients per round."""
    head = "clients/round  trainer     device  s/round  cpu-s/round  accuracy  ×seq-cpu"
    lines = [head + "  peak-MiB-so-far"]
    for row in rows:
        base = next(
            (
                r["seconds_per_round"]
                for r in rows
                if r["clients"] == row["clients"]
                and r["trainer"] == "sequential"
                and r["device"] == "cpu"
            ),
            None,
        )
        ratio = f"{base / row['seconds_per_round']:8.1f}" if base else "       -"
        lines.append(
            f"{row['clients']:>13}  {row['trainer']:<10}  {row['device']:<6}"
            f" {row['seconds_per_round']:8.3f} {row['cpu_seconds_per_round']:12.3f}"
            f"  {row['accuracy']:8.4f}  {ratio}  {row['peak_rss_mib']:8.0f}"
        )
    return "\n".join(lines)
