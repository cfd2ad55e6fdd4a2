"""Many clients' local SGD as one stacked computation (``torch.func``'s ``vmap``).

Each client keeps its own parameters (one slice of a stacked tensor), its own rows,
its own batch order (the same per-client generator as the sequential trainer), its
own FedProx anchor. Clients with fewer rows are padded: a padded position carries
no loss, and a step where a client has no real rows left does not move it, so every
client takes exactly the steps it takes when trained alone. The results equal the
sequential trainer's up to float rounding (the masked mean sums in another order);
``tests/learning/test_batched.py`` states the tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap

Orders = Callable[[int, int], torch.Tensor]  # (client position, rows) -> a permutation


def stack_weights(model: nn.Module, flat: torch.Tensor, copies: int) -> dict[str, torch.Tensor]:
    """``copies`` copies of the flat weight vector as stacked named parameters."""
    out, offset = {}, 0
    for name, param in model.named_parameters():
        size = param.numel()
        layer = flat[offset : offset + size].view_as(param)
        out[name] = layer.unsqueeze(0).repeat(copies, *[1] * param.dim()).contiguous()
        offset += size
    return out


def flatten_stacked(params: dict[str, torch.Tensor]) -> torch.Tensor:
    """Stacked named parameters as one ``[clients, dims]`` matrix (model order)."""
    return torch.cat([p.reshape(p.shape[0], -1) for p in params.values()], dim=1)


def epoch_plan(
    rows: Sequence[np.ndarray], orders: Orders, batch_size: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """One epoch's row indices ``[clients, steps·batch]`` (padded with 0) and their mask."""
    longest = max(len(r) for r in rows)
    # columns: every step's batch_size positions; a single short step only as wide as needed
    width = -(-longest // batch_size) * batch_size if longest > batch_size else longest
    index = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=bool)
    for i, own in enumerate(rows):  # numpy per client: torch's per-call overhead adds up
        index[i, : len(own)] = own[orders(i, len(own)).numpy()]
        mask[i, : len(own)] = True
    return torch.from_numpy(index).to(device), torch.from_numpy(mask).to(device)


class BatchedSGD:
    """Plain SGD (FedProx term if ``mu`` > 0) of a group of clients in lock-step."""

    def __init__(self, model: nn.Module, *, lr: float, batch_size: int, mu: float = 0.0) -> None:
        self.model, self.lr, self.batch_size, self.mu = model, lr, batch_size, mu
        self.loss_fn = nn.CrossEntropyLoss(reduction="none")

    def _client_loss(
        self,
        params: dict[str, torch.Tensor],
        anchor: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """One client's batch loss: the mean over its real rows, plus the prox term."""
        losses = self.loss_fn(functional_call(self.model, params, (x,)), y)
        count = mask.sum()
        loss: torch.Tensor = (losses * mask).sum() / count.clamp(min=1)
        if self.mu > 0:
            prox = sum(((params[n] - anchor[n]) ** 2).sum() for n in params)
            # a client with no rows in this step takes no step, prox term included
            loss = loss + (count > 0) * (self.mu / 2) * prox
        return loss

    def train(
        self,
        start: torch.Tensor,
        rows: Sequence[np.ndarray],
        orders: Orders,
        epochs: int,
        data: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """Train ``len(rows)`` clients from ``start``; return their weights ``[clients, dims]``.

        ``data`` is the shared training set on the device; ``rows`` index into it.
        ``orders(i, n)`` gives client ``i``'s permutation of its ``n`` rows for the next
        epoch (called once per client per epoch, in that order, as the sequential loop does).
        """
        x_all, y_all = data
        params = stack_weights(self.model, start, len(rows))
        anchor = {n: p.clone() for n, p in params.items()}
        leaves = [p.requires_grad_(True) for p in params.values()]
        batch_loss = vmap(self._client_loss)
        for _ in range(epochs):
            index, mask = epoch_plan(rows, orders, self.batch_size, x_all.device)
            for col in range(0, index.shape[1], self.batch_size):
                idx = index[:, col : col + self.batch_size]
                total = batch_loss(
                    params, anchor, x_all[idx], y_all[idx], mask[:, col : col + self.batch_size]
                ).sum()
                grads = torch.autograd.grad(total, leaves)
                with torch.no_grad():  # SGD's step, in place (the stacked weights are large)
                    torch._foreach_add_(leaves, grads, alpha=-self.lr)
        return flatten_stacked(params).detach()
