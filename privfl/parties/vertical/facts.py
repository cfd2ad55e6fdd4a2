"""The run facts every vertical Host's summary.json states, whatever the model."""

from __future__ import annotations

from typing import Any

from privfl.config.vertical import JobConfig


def run_facts(
    job: JobConfig, *, wall: float, reason: str, train_rows: int, test_rows: int
) -> dict[str, Any]:
    """Keys, guests, split, row counts, stop reason, wall time and session of a finished run.

    ``wall`` is in seconds; ``reason`` is why training stopped; the row counts are the
    Host's training and held-out rows after alignment.
    """
    return {
        "key_bits": job.key_bits,
        "obfuscation": job.obfuscation,
        "stop_reason": reason,
        "guests": len(job.guests),
        "guest_names": job.guests,
        "wall_seconds": wall,
        "split_seed": job.data.split_seed,
        "test_size": job.data.test_size,
        "train_rows": train_rows,
        "test_rows": test_rows,
        "session": job.session,
    }
