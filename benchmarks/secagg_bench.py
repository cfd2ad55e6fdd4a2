"""What secure aggregation costs: a plaintext round against a SecAgg+ round, same run.

Both rounds train the same clients (digits' MLP, ``--rows`` rows each, ``--epochs`` local epochs,
batched) from the same global model; the plaintext round then sums their updates, the
secure round quantizes each update, adds its Skellam share (z = 1) and runs SecAgg+ with
``--dropout`` of the clients vanishing after sharing their keys (the costliest place:
their mask keys are rebuilt). Every party runs in this one process, so the CPU seconds
are the sum over all of them. Then a SecAgg+ round of ``--big`` clients on the same
update size times the aggregator's unmasking alone.

    python benchmarks/secagg_bench.py --clients 1000 --big 10000
"""

from __future__ import annotations

import argparse
import time
from types import ModuleType

import numpy as np
import torch

from privfl.config.horizontal import HflConfig
from privfl.learning import fedavg as engine
from privfl.learning import secagg
from privfl.learning.models import get_flat
from privfl.learning.secure_round import client_input
from privfl.mechanisms.noise import private_source


def train(setup: engine.Setup, clients: list[int], weights: torch.Tensor) -> torch.Tensor:
    return engine.train_clients(setup, clients, weights, 1, private_source(exact=False))


def workload(
    clients: int, rows: int, epochs: int, dropout: float
) -> tuple[engine.Setup, torch.Tensor, list[int], set[int]]:
    """The bench's setup (digits' MLP, z = 1, one group), its start, the clients, the dropped."""
    config = HflConfig(
        clients=clients, client_rows=rows, local_epochs=epochs, mechanism="none",
        secure_aggregation=True, secagg_group=0, ddp_noise=1.0,
    )  # fmt: skip
    setup = engine.make_setup(config)
    dropped = set(range(0, clients, round(1 / dropout))) if dropout else set()
    return setup, get_flat(setup.model), list(range(clients)), dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--big", type=int, default=10_000, help="clients of the unmasking run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    setup, weights, clients, dropped = workload(args.clients, args.rows, args.epochs, args.dropout)
    bound = setup.calib.update_clip
    source = private_source(exact=False)

    start = time.process_time()
    updates = train(setup, clients, weights) - weights
    plain = updates[[c for c in clients if c not in dropped]].sum(dim=0)
    plain_cpu = time.process_time() - start

    start = time.process_time()
    updates = train(setup, clients, weights) - weights
    noise_start = time.process_time()
    inputs = {c: client_input(updates[c], bound, 1.0, args.clients, source) for c in clients}
    cpu: dict[str, float] = {"noise": time.process_time() - noise_start}
    total, alive = secagg.run_round(inputs, b"bench", dropped, cpu)
    secure_cpu = time.process_time() - start
    assert np.array_equal(total, sum(inputs[c] for c in alive))  # exact, in the integers
    assert np.isfinite(plain.numpy()).all()

    print(f"update size {setup.dims} weights, {args.clients} clients, {len(dropped)} dropped")
    print(f"plaintext round: {plain_cpu:.2f} CPU s (training and sum)")
    print(
        f"secure round:    {secure_cpu:.2f} CPU s (training, quantizing, noise, SecAgg+: "
        f"quantizing and noise {cpu['noise']:.2f} s, "
        f"clients {cpu['clients_and_routing']:.2f} s, unmasking {cpu['unmasking']:.2f} s)"
    )
    print(f"secure / plaintext CPU: {secure_cpu / plain_cpu:.2f}x")

    if args.big:
        unmasking(args.big, setup.dims, args.dropout)


def unmasking(clients: int, dims: int, dropout: float, rounds: ModuleType = secagg) -> None:
    """A SecAgg+ round of ``clients`` random inputs: the aggregator's unmasking CPU
    (``rounds``: the SecAgg+ module to run, this checkout's by default)."""
    rng = np.random.default_rng(0)
    big = {c: rng.integers(-(2**16), 2**16, dims) for c in range(clients)}
    gone = set(range(0, clients, round(1 / dropout))) if dropout else set()
    cpu = {}
    wall = time.perf_counter()
    rounds.run_round(big, b"bench-big", gone, cpu)
    print(
        f"{clients} clients ({len(gone)} dropped): clients' stages "
        f"{cpu['clients_and_routing']:.1f} CPU s in all, "
        f"aggregator's unmasking {cpu['unmasking']:.2f} CPU s "
        f"(whole run {time.perf_counter() - wall:.0f} s wall)",
        flush=True,
    )


if __name__ == "__main__":
    main()
