"""Pure privacy mechanisms: numpy in, numbers out; imports nothing else of privfl."""

from privfl.mechanisms.accountants import (
    advanced_composition,
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    gaussian_delta,
    nbafl_sigmas,
    rdp_gaussian_epsilon,
    shuffle_amplification,
    subsampling_amplification,
)
from privfl.mechanisms.label_dp import (
    flip_probability,
    flipback,
    keep_probability,
    randomized_response,
)
from privfl.mechanisms.ldp import (
    clip_norm,
    duchi,
    from_unit,
    gaussian,
    laplace,
    piecewise,
    pnpm,
    to_unit,
    topk_indices,
)

__all__ = [
    "advanced_composition",
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "clip_norm",
    "duchi",
    "flip_probability",
    "flipback",
    "from_unit",
    "gaussian",
    "gaussian_delta",
    "keep_probability",
    "laplace",
    "nbafl_sigmas",
    "piecewise",
    "pnpm",
    "randomized_response",
    "rdp_gaussian_epsilon",
    "shuffle_amplification",
    "subsampling_amplification",
    "to_unit",
    "topk_indices",
]
