"""What every prediction script shares: the party's inputs, the played parties, the
prediction Hellos and the session's endings.

A prediction session (docs/protocol.md §6.6, §6.9 *Prediction*) scores new rows with a
trained model. The kit computes its known answers from the files the party under test
scores with, when it is given them: ``--model`` (privfl's ``model.json`` format, §6.8;
an implementation with a format of its own can write one of the same weights) and
``--data`` (the new rows' CSV); for a Host also ``--predictions`` (the CSV it writes).
Without them it still checks what needs no model: counts, freshness, order, ending.
Rows are aligned by position (the kit plays no PSI stage).
"""

from __future__ import annotations

import csv
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.data.alignment import positions, row_commitment
from privfl.data.tables import IdTable, standardise_with
from privfl.parties.vertical.predict import Model, load_model, prediction_rows
from privfl.protocol.channel import body_as
from privfl.protocol.messages import Finish, Hello, Kind
from privfl.tools.conformance.guest import check_randomness
from privfl.tools.conformance.peer import (
    Peer,
    Report,
    acknowledged,
    exits_nonzero,
    expect,
    expect_abort,
    finished_cleanly,
)
from privfl.tools.conformance.randomness import Freshness
from privfl.tools.conformance.target import PredictInputs

PREDICTED = Finish(epochs=0, reason="predicted")


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


@contextmanager
def played(job: JobConfig, *names: str) -> Iterator[list[Peer]]:
    """The parties the kit plays, bound at their endpoints in this order; closed at the end."""
    peers = [Peer(job, name, job.timeout_seconds) for name in names]
    try:
        yield peers
    finally:
        for peer in peers:
            peer.close()


def guest_hellos(
    report: Report, server: Peer, host: Peer, party: str, job: JobConfig, rows: int | None
) -> Hello | None:
    """A guest's Hellos to the Server and the Host, both checked; the Server's, or None."""
    hellos = [prediction_hello(report, p, party, "guest", job, rows) for p in (server, host)]
    return None if None in hellos else hellos[0]


def host_hellos(
    report: Report,
    server: Peer,
    guests: dict[str, Peer],
    party: str,
    job: JobConfig,
    rows: int | None,
) -> Hello | None:
    """The Host's Hello to the Server, checked; then every played guest's, the same rows."""
    hello = prediction_hello(report, server, party, "host", job, rows)
    if hello is None:
        return None
    digest = commitment(job, hello.rows)
    for peer in guests.values():
        peer.channel.send(party, Hello("guest", job.fingerprint(), hello.rows, 0, digest))
    return hello


def end_predicted(
    report: Report,
    host: Peer,
    peers: list[Peer],
    party: str,
    job: JobConfig,
    process: subprocess.Popen[bytes] | None,
) -> None:
    """The played Host's ``finish`` (predicted), then a clean end of the party."""
    host.channel.send(party, PREDICTED)
    finished_cleanly(report, peers, party, job.party(party).endpoint, process)


def guest_ends(
    report: Report,
    server: Peer,
    host: Peer,
    party: str,
    job: JobConfig,
    process: subprocess.Popen[bytes] | None,
    fresh: Freshness | None = None,
) -> None:
    """A guest's ending: all it got ACKed, its ciphertexts fresh (given ``fresh``), finish."""
    acknowledged(report, [host, server], party)
    if fresh is not None:
        check_randomness(report, fresh)
    end_predicted(report, host, [host, server], party, job, process)


def host_ends(
    report: Report,
    peers: list[Peer],
    party: str,
    job: JobConfig,
    process: subprocess.Popen[bytes] | None,
    fresh: Freshness | None = None,
) -> None:
    """A Host's ending: its ``finish`` (epochs 0) to every played party, its ciphertexts
    fresh (given ``fresh``), then a clean end."""
    for peer in peers:
        got = expect(report, peer, Kind.FINISH, party, f"finish (predicted) to {peer.name}")
        if got is not None:
            body = body_as(got.body, Finish)
            report.check(f"finish to {peer.name} says epochs 0", body.epochs == 0, str(body))
    if fresh is not None:
        check_randomness(report, fresh)
    finished_cleanly(report, peers, party, job.party(party).endpoint, process)


def aborts(
    report: Report, peer: Peer, party: str, what: str, process: subprocess.Popen[bytes] | None
) -> None:
    """The violation's ending: an Abort to ``peer``, and (if the kit started it) exit ≠ 0."""
    exits_nonzero(report, party, process, expect_abort(report, peer, party, what))


def read_predictions(report: Report, inputs: PredictInputs) -> list[list[str]] | None:
    """The rows of the Host's ``--predictions`` CSV; a failed check if it cannot be read."""
    try:
        with open(inputs.predictions, newline="") as handle:  # type: ignore[arg-type]
            return list(csv.reader(handle))
    except OSError as exc:
        report.check("the host writes its predictions to --predictions", False, str(exc))
        return None
