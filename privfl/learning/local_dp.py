"""Private local training for horizontal clients: DP-SGD or FSDP epochs on one client's rows."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from privfl.mechanisms.accountants import rdp_gaussian_epsilon
from privfl.mechanisms.dpsgd import dpsgd_gradient, fsdp_gradient, per_sample_grads


def local_steps(rows: int, batch_size: int, epochs: int) -> tuple[float, int]:
    """Poisson sampling rate q = batch/rows and the number of steps for ``epochs``."""
    q = min(1.0, batch_size / max(rows, 1))
    return q, epochs * max(1, round(1 / q))


def private_local_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    method: str,
    epochs: int,
    batch_size: int,
    lr: float,
    noise_multiplier: float,
    clip: float,
    rank: int,
    rng: np.random.Generator,
) -> None:
    """Train ``model`` in place: Poisson-sampled steps with DP-SGD's or FSDP's noisy gradient.

    ``rng`` draws both the Poisson sample and the noise: the client's CSPRNG generator.
    """
    n = len(x)
    q, steps = local_steps(n, batch_size, epochs)
    optimiser = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        mask = torch.from_numpy(rng.random(n) < q).to(x.device)
        if not bool(mask.any()):
            continue
        grads = per_sample_grads(model, x[mask], y[mask])
        if method == "dpsgd":
            noisy = dpsgd_gradient(grads, clip, noise_multiplier, q * n, rng)
        else:
            noisy = fsdp_gradient(model, grads, noise_multiplier, q * n, rng, rank=rank, clip=clip)
        for name, p in model.named_parameters():
            p.grad = noisy[name].detach().clone()
        optimiser.step()


def local_epsilon(
    rows: int, batch_size: int, epochs: int, rounds: int, noise_multiplier: float, delta: float
) -> float:
    """Sample-level ε of a client's rows after ``rounds`` participations (RDP accountant)."""
    if rounds == 0:
        return 0.0
    q, steps = local_steps(rows, batch_size, epochs)
    return rdp_gaussian_epsilon(q, noise_multiplier, steps * rounds, delta)
