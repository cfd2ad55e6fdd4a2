"""The mini-batch leakage guard (FATE issue 3691), on every batch the Host actually sends.

A guest with ``f`` features receives ``[[4d]]`` for a batch of ``b`` rows and learns
``X_gᵀ·4d`` (its gradient). With ``b ≤ f`` that is ``f`` equations in ``b`` unknowns:
it can solve for the residuals, and from them the labels. The Host, in turn, reads its
own plaintext gradient ``X_Hᵀ·4d``: ``f_H + 1`` equations (its bias column included) in
the ``b`` guests' scores ``Σ_g z_g`` it does not know, since it knows ``z_H`` and the
labels. So every batch — the full batch, a ``batch_size`` at or above the row count,
and the last batch of an epoch — must have more rows than any guest has features and
more than the Host has gradient entries, unless the job says
``training.allow_small_batches = true``. A too-small last batch is folded into the one
before it (:func:`privfl.learning.taylor.batch_sizes`) rather than refused.
"""

from __future__ import annotations

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto.encoding import DATA_BITS, to_exponents
from privfl.errors import ConfigError
from privfl.parties.vertical.joint_plan import Plan, host_plan


def least_batch(job: JobConfig, rows: int, entries: dict[str, int]) -> int:
    """The fewest rows a batch may have; refuses a job whose batches cannot all reach it.

    ``entries``: the gradient entries each data party reads per batch (:func:`gradient_entries`).
    Returns 1 with ``allow_small_batches``.
    """
    if job.training.allow_small_batches or not entries:
        return 1
    party = max(entries, key=lambda name: (entries[name], name == job.host))
    most = entries[party]
    size = job.training.batch_size
    if 0 < size < rows and size <= most:
        raise ConfigError(
            f"batch size {size} is not larger than {what_it_reads(job, party, most)}: "
            f"{what_it_solves(job, party)}; raise training.batch_size above {most} or set "
            "training.allow_small_batches = true"
        )
    if rows <= most:
        raise ConfigError(
            f"the {rows} training rows are not more than {what_it_reads(job, party, most)}: "
            f"even with the full batch {what_it_solves(job, party)}; train on more rows, or "
            "set training.allow_small_batches = true"
        )
    return most + 1


def what_it_reads(job: JobConfig, party: str, count: int) -> str:
    """``guest-1's 20 features`` or ``host's 21 gradient entries (20 features and the bias)``."""
    if party == job.host:
        return f"{party}'s {count} gradient entries ({count - 1} features and the bias)"
    return f"{party}'s {count} features"


def what_it_solves(job: JobConfig, party: str) -> str:
    """Why a batch that small is refused, said of the party that could exploit it."""
    if party == job.host:
        return "it could solve for the guests' scores"
    return "it could solve for the residuals and so the labels"


def check_batch(size: int, least: int) -> None:
    """The guard at the moment of sending or receiving: refuse a batch under the least size."""
    if size < least:
        raise ConfigError(
            f"a batch of {size} rows is not larger than {least - 1}, the most gradient entries "
            "a party reads: it could solve for the residuals (and so the labels) or for the "
            "guests' scores; raise training.batch_size or set training.allow_small_batches = true"
        )


def gradient_entries(job: JobConfig) -> dict[str, int]:
    """Per data party, how many gradient entries it reads per batch, from the job's declared
    feature counts: a guest's features; the Host's features and its bias."""
    entries = {name: job.party(name).declared_features for name in job.guests}
    entries[job.host] = job.party(job.host).declared_features + 1
    return entries


def job_least_batch(job: JobConfig, rows: int) -> int:
    """:func:`least_batch` from the feature counts the job declares.

    The one rule the Host (to cut its batches), the Server (to know each batch's rows
    before any arrives) and each guest (to check every Batch it is sent) apply, so their
    batch plans agree, folding included. The Server refuses a Hello whose feature count
    differs from the job's.
    """
    return least_batch(job, rows, gradient_entries(job))


def job_plan(job: JobConfig, x_host: np.ndarray, least: int, seed: bytes) -> Plan:
    """The Host's row sets, the same every epoch, from the joint seed; refuses a plan that
    still pins a row.

    ``x_host``: its training columns with the bias; ``seed``: the batch plan's joint seed
    (``joint_plan.py``: drawn by commit and reveal, so the Host does not choose it). The
    first of the seed's attempts whose rows the Host can swap between batches until its own
    columns pin no guest score (``learning/pinning.py``), moving few enough rows for every
    guest to accept it: equations from later epochs then fall on the same row sets and
    add no direction.
    """
    unpin = not job.training.allow_small_batches
    # the columns as the Host's gradient sees them: fixed point with DATA_BITS fractional
    # bits. A weight just above PIN in floats can fall under it once rounded.
    seen = to_exponents(x_host, DATA_BITS) / float(1 << DATA_BITS)
    return host_plan(seed, seen, job.training.batch_size, least, unpin)
