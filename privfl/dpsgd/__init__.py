"""Private local training: plain DP-SGD (the verified baseline) and FSDP (seed 002)."""

from privfl.dpsgd.core import (
    clip_per_sample,
    dpsgd_gradient,
    fsdp_gradient,
    funk_svd,
    noise_multiplier_for,
    per_sample_grads,
)
from privfl.dpsgd.train import PrivateTrainConfig, train_private

__all__ = [
    "PrivateTrainConfig",
    "clip_per_sample",
    "dpsgd_gradient",
    "fsdp_gradient",
    "funk_svd",
    "noise_multiplier_for",
    "per_sample_grads",
    "train_private",
]
