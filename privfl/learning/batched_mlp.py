"""The batched trainer's fast path for NbAFL's MLP: forward, backward and step by hand.

The generic trainer (:class:`privfl.learning.batched.BatchedSGD`) writes every
client's gradient out and then steps, three passes over the stacked weights per
step; the digits MLP is small enough that those passes are the whole cost. Here
the backward pass and SGD's step are one ``baddbmm_`` per layer (the gradient is
never stored), the same maths as autograd's for ``Linear → ReLU → Linear`` with the
masked mean cross-entropy and the FedProx term: 1.6 ms instead of 19 ms per step of
128 clients on this project's 2-core machine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from privfl.learning.batched import Orders, epoch_plan, flatten_stacked, stack_weights


def is_mlp(model: nn.Module) -> bool:
    """True for ``Flatten → Linear → ReLU → Linear`` (:func:`privfl.learning.models.mlp`)."""
    kinds = [type(m) for m in model.children()]
    return isinstance(model, nn.Sequential) and kinds == [nn.Flatten, nn.Linear, nn.ReLU, nn.Linear]


class FusedMLPSGD:
    """Plain SGD (FedProx if ``mu`` > 0) of a group of MLP clients, by hand, in lock-step."""

    def __init__(self, model: nn.Module, *, lr: float, batch_size: int, mu: float = 0.0) -> None:
        self.model, self.lr, self.batch_size, self.mu = model, lr, batch_size, mu

    @torch.no_grad()
    def train(
        self,
        start: torch.Tensor,
        rows: Sequence[np.ndarray],
        orders: Orders,
        epochs: int,
        data: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """As :meth:`privfl.learning.batched.BatchedSGD.train`."""
        x_all, y_all = data
        params = stack_weights(self.model, start, len(rows))
        weights = list(params.values())  # W1 [C, H, D], b1 [C, H], W2 [C, K, H], b2 [C, K]
        anchor = [w.clone() for w in weights] if self.mu > 0 else []
        for _ in range(epochs):
            index, mask = epoch_plan(rows, orders, self.batch_size, x_all.device)
            for col in range(0, index.shape[1], self.batch_size):
                idx = index[:, col : col + self.batch_size]
                x = x_all[idx].reshape(idx.shape[0], idx.shape[1], -1)
                self._step(weights, anchor, x, y_all[idx], mask[:, col : col + self.batch_size])
        return flatten_stacked(params)

    def _step(
        self,
        weights: list[torch.Tensor],
        anchor: list[torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        mask: torch.Tensor,
    ) -> None:
        """One SGD step of every client on its batch ``x`` ``[C, B, D]`` (``mask``: real rows)."""
        w1, b1, w2, b2 = weights
        hidden = torch.baddbmm(b1.unsqueeze(1), x, w1.transpose(1, 2))
        act = hidden.clamp(min=0)
        logits = torch.baddbmm(b2.unsqueeze(1), act, w2.transpose(1, 2))
        count = mask.sum(dim=1, keepdim=True)
        # d(mean cross-entropy over the client's real rows)/d(logits)
        share = (mask / count.clamp(min=1)).unsqueeze(-1)
        d_logits = (logits.softmax(-1) - nn.functional.one_hot(y, logits.shape[-1])) * share
        d_hidden = torch.bmm(d_logits, w2).mul_(hidden > 0)
        if self.mu > 0:  # the prox gradient μ(w − w_g), from the weights before this step
            live = (count > 0).to(x.dtype).view(-1)
            for w, a in zip(weights, anchor, strict=True):
                shape = (-1,) + (1,) * (w.dim() - 1)
                w.sub_((w - a).mul_(live.view(shape)), alpha=self.lr * self.mu)
        w2.baddbmm_(d_logits.transpose(1, 2), act, alpha=-self.lr)
        b2.sub_(d_logits.sum(dim=1), alpha=self.lr)
        w1.baddbmm_(d_hidden.transpose(1, 2), x, alpha=-self.lr)
        b1.sub_(d_hidden.sum(dim=1), alpha=self.lr)
