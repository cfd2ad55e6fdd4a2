"""The seeds' models: NbAFL's MLP (one hidden layer of 256) and seed 000's small CNNs."""

from __future__ import annotations

import torch
from torch import nn


def mlp(inputs: int, classes: int, hidden: int = 256) -> nn.Module:
    """NbAFL's MLP: flatten, one hidden ReLU layer of 256, linear output."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, classes)
    )


def cnn2(channels: int, side: int, classes: int) -> nn.Module:
    """Seed 000's MNIST CNN: two conv layers and two fully connected layers."""
    flat = 64 * (side // 4) ** 2
    return nn.Sequential(
        nn.Conv2d(channels, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(flat, 512), nn.ReLU(), nn.Linear(512, classes),
    )  # fmt: skip


def cnn3(channels: int, side: int, classes: int) -> nn.Module:
    """Seed 000's Fashion-MNIST/CIFAR-10 CNN: three conv layers and two fully connected layers."""
    flat = 128 * (side // 8) ** 2
    return nn.Sequential(
        nn.Conv2d(channels, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(flat, 256), nn.ReLU(), nn.Linear(256, classes),
    )  # fmt: skip


def build_model(dataset: str, input_shape: tuple[int, ...], classes: int) -> nn.Module:
    """The model the seeds pair with each dataset."""
    if dataset == "digits" or len(input_shape) == 1:
        return mlp(int(torch.tensor(input_shape).prod()), classes)
    channels, side = input_shape[0], input_shape[-1]
    return cnn2(channels, side, classes) if dataset == "mnist" else cnn3(channels, side, classes)


def layer_slices(model: nn.Module) -> list[tuple[str, slice]]:
    """Where each parameter tensor sits in the flat weight vector."""
    out, start = [], 0
    for name, param in model.named_parameters():
        out.append((name, slice(start, start + param.numel())))
        start += param.numel()
    return out


def get_flat(model: nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()


def set_flat(model: nn.Module, flat: torch.Tensor) -> None:
    """Copy ``flat`` into the parameters.

    Not vector_to_parameters: it makes the parameters views of ``flat``, so training
    would overwrite the caller's tensor (the global model).
    """
    with torch.no_grad():
        offset = 0
        for param in model.parameters():
            size = param.numel()
            param.copy_(flat[offset : offset + size].view_as(param))
            offset += size


def pick_device(choice: str) -> torch.device:
    """auto: CUDA when present; asking for cuda without one is an error."""
    from privfl.errors import ConfigError

    if choice == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda but no CUDA device is visible; use --device auto or cpu")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)
