"""The secure round's extra CPU under another commit's code and this checkout's, same updates.

Trains the clients (as ``secagg_bench.py``: digits' MLP, batched, one thread), times that
plaintext round, then feeds its updates, in turn, to
``--against``'s ``privfl/learning/secagg.py``, ``privfl/mechanisms/skellam.py``,
``privfl/mechanisms/skellam_table.py`` and ``privfl/crypto/shamir.py`` (read with
``git show``, loaded beside this checkout's) and to this checkout's secure round:
quantizing, Skellam share (z = 1), SecAgg+ with ``--dropout`` of the clients vanishing
after sharing their keys; ``--repeats`` times, each with its own plaintext round, and
the ratios' median and range at the end. Every unmasked sum is checked exact. With
``--big N``, then ``secagg_bench.py``'s unmasking round of N random-input clients under
each code, alternating. On a loaded machine only the figures of one run compare.

    python benchmarks/secagg_against.py --against main --clients 1000 --rows 256 --epochs 5
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from secagg_bench import unmasking, workload  # this folder is the script's first import path

from privfl.learning import fedavg as engine
from privfl.learning import secagg
from privfl.learning.secure_round import client_input
from privfl.mechanisms.noise import NoiseSource, private_source

Share = Callable[[torch.Tensor, float, float, int, NoiseSource], np.ndarray]


def load_at(commit: str, path: str, name: str, folder: Path, imports: dict[str, str]) -> ModuleType:
    """``path`` as it is at ``commit``, imported as module ``name``; each import line in
    ``imports`` is replaced by its value (to use the other modules loaded from ``commit``)."""
    text = subprocess.run(
        ["git", "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
    ).stdout
    for line, replacement in imports.items():
        text = text.replace(line, replacement)
    file = folder / f"{name}.py"
    file.write_text(text)
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def load_round(commit: str, folder: Path) -> tuple[ModuleType, ModuleType]:
    """``commit``'s Skellam share and SecAgg+ modules, over its own Shamir and table."""
    # registered in sys.modules by these names, which the two below import
    load_at(commit, "privfl/crypto/shamir.py", "old_shamir", folder, {})
    load_at(commit, "privfl/mechanisms/skellam_table.py", "old_table", folder, {})
    skellam = load_at(
        commit, "privfl/mechanisms/skellam.py", "old_skellam", folder,
        {"from privfl.mechanisms import skellam_table": "import old_table as skellam_table"},
    )  # fmt: skip
    rounds = load_at(
        commit, "privfl/learning/secagg.py", "old_secagg", folder,
        {"from privfl.crypto import shamir": "import old_shamir as shamir"},
    )  # fmt: skip
    return skellam, rounds


def old_share(skellam: ModuleType) -> Share:
    """The other commit's ``secure_round.client_input``: its ``client_share`` where it has
    one, else quantizing then the Skellam share (the code before the table)."""

    def share(
        update: torch.Tensor, bound: float, z: float, group: int, source: NoiseSource
    ) -> np.ndarray:
        values = update.double().cpu().numpy()
        variance = skellam.client_variance(z, values.size, group)
        if hasattr(skellam, "client_share"):
            shared: np.ndarray = skellam.client_share(values, bound, variance, source)
            return shared
        draws = skellam.stream(source)
        noisy: np.ndarray = skellam.quantize(values, bound, draws)
        noisy += skellam.skellam(values.size, variance, draws)
        return noisy

    return share


def extra_cpu(
    share: Share, rounds: ModuleType, updates: torch.Tensor, bound: float, dropped: set[int]
) -> dict[str, float]:
    """CPU seconds of the secure round's work beyond training, by stage."""
    clients = range(len(updates))
    source = private_source(exact=False)
    start = time.process_time()
    inputs = {c: share(updates[c], bound, 1.0, len(updates), source) for c in clients}
    cpu = {"noise": time.process_time() - start}
    total, alive = rounds.run_round(inputs, b"bench", dropped, cpu)
    cpu["extra"] = time.process_time() - start
    assert np.array_equal(total, sum(inputs[c] for c in alive))  # exact, in the integers
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="main", help="the commit to compare with")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--big", type=int, default=0, help="then the bench's unmasking round of this many clients"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        skellam, rounds = load_round(args.against, Path(folder))
    setup, weights, clients, dropped = workload(args.clients, args.rows, args.epochs, args.dropout)
    variants: dict[str, tuple[Share, ModuleType]] = {
        args.against: (old_share(skellam), rounds),
        "this checkout": (client_input, secagg),
    }
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):  # the plaintext round again each time: the load moves
        start = time.process_time()
        trained = engine.train_clients(setup, clients, weights, 1, private_source(exact=False))
        updates = trained - weights
        updates[[c for c in clients if c not in dropped]].sum(dim=0)
        plain = time.process_time() - start
        print(f"plaintext round {plain:.2f} CPU s (training and sum)", flush=True)
        for name, (share, module) in variants.items():
            cpu = extra_cpu(share, module, updates, setup.calib.update_clip, dropped)
            ratios[name].append((plain + cpu["extra"]) / plain)
            print(
                f"{name}: quantizing and noise {cpu['noise']:.2f}, SecAgg+ clients "
                f"{cpu['clients_and_routing']:.2f}, unmasking {cpu['unmasking']:.2f}, extra "
                f"{cpu['extra']:.2f} CPU s: {ratios[name][-1]:.2f}x",
                flush=True,
            )
    for name, values in ratios.items():
        print(
            f"{name}: (plaintext + extra) / plaintext, median {np.median(values):.2f}x, "
            f"range {min(values):.2f}x to {max(values):.2f}x over {len(values)} repeats"
        )
    # each code twice, the other's runs around this checkout's (the first run of a
    # process also pays for its fresh memory)
    for name in (args.against, "this checkout", "this checkout", args.against)[
        : 4 * (args.big > 0)
    ]:
        print(f"{name}: ", end="")
        unmasking(args.big, setup.dims, args.dropout, variants[name][1])


if __name__ == "__main__":
    main()
