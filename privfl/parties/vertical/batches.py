"""The mini-batch leakage guard (FATE issue 3691), on every batch the Host actually sends.

A guest with ``f`` features receives ``[[4d]]`` for a batch of ``b`` rows and learns
``X_gᵀ·4d`` (its gradient). With ``b ≤ f`` that is ``f`` equations in ``b`` unknowns:
it can solve for the residuals, and from them the labels. So every batch — the
full batch, a ``batch_size`` at or above the row count, and the last batch of an
epoch — must have more rows than any guest has features, unless the job says
``training.allow_small_batches = true``. A too-small last batch is folded into the
one before it (:func:`privfl.learning.taylor.batch_sizes`) rather than refused.
"""

from __future__ import annotations

from privfl.config.vertical import JobConfig
from privfl.errors import ConfigError


def least_batch(job: JobConfig, rows: int, features: dict[str, int]) -> int:
    """The fewest rows a batch may have; refuses a job whose batches cannot all reach it.

    ``features``: each guest's feature count. Returns 1 with ``allow_small_batches``.
    """
    if job.training.allow_small_batches or not features:
        return 1
    guest = max(features, key=lambda name: features[name])
    most = features[guest]
    size = job.training.batch_size
    if 0 < size < rows and size <= most:
        raise ConfigError(
            f"batch size {size} is not larger than {guest}'s {most} features: it could "
            f"solve for the residuals and so the labels; raise training.batch_size above {most} "
            "or set training.allow_small_batches = true"
        )
    if rows <= most:
        raise ConfigError(
            f"the {rows} training rows are not more than {guest}'s {most} features: even the "
            "full batch lets it solve for the residuals and so the labels; train on more rows "
            "than any guest has features, or set training.allow_small_batches = true"
        )
    return most + 1


def check_batch(size: int, least: int) -> None:
    """The guard at the moment of sending: refuse a batch under the least size."""
    if size < least:
        raise ConfigError(
            f"a batch of {size} rows is not larger than a guest's {least - 1} features: it "
            "could solve for the residuals and so the labels; raise training.batch_size or "
            "set training.allow_small_batches = true"
        )


def job_least_batch(job: JobConfig, rows: int) -> int:
    """:func:`least_batch` from the guests' feature counts the job declares.

    The one rule the Host (to cut its batches) and the Server (to know each batch's
    rows before any arrives) both apply, so their batch plans agree, folding included.
    The Server refuses a Hello whose feature count differs from the job's.
    """
    return least_batch(job, rows, {name: job.party(name).declared_features for name in job.guests})
