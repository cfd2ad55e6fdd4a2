"""Pure privacy mechanisms: numpy in, numbers out; imports nothing else of privfl."""

from privfl.mechanisms.label_dp import (
    flip_probability,
    flipback,
    keep_probability,
    randomized_response,
)

__all__ = ["flip_probability", "flipback", "keep_probability", "randomized_response"]
