"""What every prediction script shares: the party's own inputs, and the prediction Hello.

A prediction session (docs/protocol.md §6.6, §6.9 *Prediction*) scores new rows with a
trained model. The kit computes its known answers from the files the party under test
scores with, when it is given them: ``--model`` (privfl's ``model.json`` format, §6.8;
an implementation with a format of its own can write one of the same weights) and
``--data`` (the new rows' CSV); for a Host also ``--predictions`` (the CSV it writes).
Without them it still checks what needs no model: counts, freshness, order, ending.
Rows are aligned by position (the kit plays no PSI stage).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.data.alignment import positions, row_commitment
from privfl.data.tables import IdTable, standardise_with
from privfl.parties.vertical.predict import Model, load_model, prediction_rows
from privfl.protocol.channel import body_as
from privfl.protocol.messages import Hello, Kind
from privfl.tools.conformance.peer import Peer, Report, expect


@dataclass(frozen=True, slots=True)
class PredictInputs:
    """The files the party under test predicts with (each optional: fewer known answers)."""

    model: Path | None = None
    data: Path | None = None
    predictions: Path | None = None  # a Host's output CSV


NO_FILES = PredictInputs()


@dataclass(frozen=True, slots=True)
class Scored:
    """The party's model applied by the kit: its new rows, standardised as in training."""

    table: IdTable
    x: np.ndarray


def glm_rows(job: JobConfig, party: str, inputs: PredictInputs) -> tuple[Model, Scored] | None:
    """The party's GLM model and its new rows standardised, or None without both files."""
    if inputs.model is None or inputs.data is None:
        return None
    model = load_model(inputs.model, party)
    table, _ = prediction_rows(job, party, model, inputs.data, None)
    return model, Scored(table, standardise_with(table, model.mean, model.scale))


def commitment(job: JobConfig, rows: int) -> str:
    """The row commitment of ``rows`` new rows aligned by position (§2.3: ids 0, 1, …)."""
    return row_commitment(job.session, positions(range(rows)), ())


def prediction_hello(
    report: Report, peer: Peer, party: str, role: str, job: JobConfig, rows: int | None
) -> Hello | None:
    """The party's Hello to ``peer``: the job, its role, ``features = 0``, the rows it
    scores (``rows`` when the kit read them) and their row commitment by position."""
    env = expect(report, peer, Kind.HELLO, party, f"Hello from {party} to {peer.name}")
    if env is None:
        return None
    hello = body_as(env.body, Hello)
    report.check(
        f"Hello to {peer.name}: the job's fingerprint, role {role}, features = 0",
        (hello.job_fingerprint, hello.role, hello.features) == (job.fingerprint(), role, 0),
        f"{hello.role}, features {hello.features}, fingerprint {hello.job_fingerprint[:16]}",
    )
    if rows is not None:
        report.check(
            f"Hello to {peer.name} announces the {rows} rows of --data",
            hello.rows == rows,
            f"{hello.rows} rows",
        )
    report.check(
        f"Hello to {peer.name} commits to its rows by position (§2.3)",
        hello.rows_digest == commitment(job, hello.rows),
        f"got {hello.rows_digest[:16] or 'none'}",
    )
    return hello
