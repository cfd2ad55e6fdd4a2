"""One label draw per job: the noised training labels, kept on disk and reused on every start.

Label DP spends ε each time the Host draws noise for its labels and lets the
guests see training driven by them. A guest that could make the Host draw again
(by offering no checkpoint, so a resumed run starts over) would see several
independent noisings of the same labels and could majority-vote them. So the Host
draws once, saves the noised labels *before its first message of the job* in
``OUT/label-draw.json`` (mode 0600, written atomically and durably, bound to the
job fingerprint and row count), and every later start of that job — fresh or
``--resume`` — loads them instead of drawing.

A new draw happens only when the operator asks for it (``--redraw-labels``); then
the file lists every draw's ε and the run books their sum (sequential composition).
A ``--resume`` start that finds no checkpoint common to all parties while a draw
exists is refused (:func:`check_agreement`): starting over is the operator's call.

The file is the Host's own, so it cannot be the record of what was spent: deleted, a
resume would draw anew (one more noising seen by the guests, booked nowhere); edited,
its ``epsilons`` would change the reported ε. So where the site keeps a ledger (a
policy), each draw's digest is booked there (:class:`DrawBook`, runs/site_ledger.py)
against the run's admission, and a start whose file is missing, or does not match the
draws booked (another digest, other ε), is **refused**, not re-booked: the run was
admitted once for one draw, and a new draw must be the operator's ``--redraw-labels``,
which the ledger admits and books anew. The ε reported is the sum of the booked ε.
Without a ledger, a resume that finds checkpoints but no draw is refused.

Any role that noises its labels adopts this with one call to :func:`load_or_draw`,
plus :func:`check_agreement` as its resume agreement's check.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from privfl.errors import ConfigError
from privfl.parties.files import write_json

log = logging.getLogger("privfl.labels")
FILE_NAME = "label-draw.json"
FORMAT = 1
Drawer = Callable[[], tuple[np.ndarray, dict[str, Any]]]


class DrawBook(Protocol):
    """Where a site books its label draws (the site ledger): digest and ε of each."""

    def booked(self) -> list[tuple[str, float]]:
        """(digest, ε) of every draw booked for this job at this party, oldest first."""
        ...

    def book(self, digest: str) -> None:
        """Book a new draw against the run's admission; refuse one nothing admitted."""
        ...


def draw_digest(fingerprint: str, labels: np.ndarray) -> str:
    """sha256 (hex) of a draw: the job's fingerprint, the labels' dtype and bytes."""
    head = f"privfl label draw\0{fingerprint}\0{labels.dtype.str}\0".encode()
    return hashlib.sha256(head + np.ascontiguousarray(labels).tobytes()).hexdigest()


@dataclass(frozen=True, slots=True)
class LabelDraw:
    """The noised labels this job trains on, and every ε spent drawing labels for it."""

    labels: np.ndarray
    info: dict[str, Any]  # what the mechanism reported at the draw (JSON), kept with the labels
    epsilons: tuple[float, ...]  # ε of each draw of this job, oldest first
    reused: bool  # loaded from an earlier start of the job, not drawn now

    @property
    def draws(self) -> int:
        """How many times the labels of this job were drawn."""
        return len(self.epsilons)

    @property
    def epsilon(self) -> float:
        """The label ε the job has spent: the sum over its draws (sequential composition)."""
        return math.fsum(self.epsilons)


def load_or_draw(
    out: Path,
    fingerprint: str,
    epsilon: float,
    draw: Drawer,
    *,
    rows: int,
    redraw: bool = False,
    replace_other_job: bool = False,
    book: DrawBook | None = None,
) -> LabelDraw:
    """This job's saved draw from ``out``, or a new one from ``draw()`` saved before use.

    ``draw`` returns the noised labels and a JSON-able report of the draw; a saved draw
    must hold ``rows`` labels (the party's training rows). ``redraw``
    (the operator's ``--redraw-labels``) replaces a saved draw and adds its ε to the
    job's total. An infinite ε noises nothing, so nothing is saved (the file would be
    a copy of the true labels). A draw saved for another job (another fingerprint:
    the operators changed the job file, or ``run-local`` wrote a new kit) is refused,
    or with ``replace_other_job`` (a start that replaces the earlier run) replaced by
    this job's first draw. ``book``: the site ledger's record of this job's draws; the
    saved draw must be its last, and a new one is booked there before it is saved.
    """
    if not math.isfinite(epsilon):
        labels, info = draw()
        return LabelDraw(labels, info, (epsilon,), reused=False)
    path = out / FILE_NAME
    saved = _load(path, fingerprint, rows, replace_other_job) if path.exists() else None
    if book is not None:
        return _booked_draw(path, fingerprint, saved, draw, book, redraw=redraw)
    if saved is not None and not redraw:
        log.info("label DP: reusing this job's label draw from %s (%d draws)", path, saved.draws)
        return saved
    spent = saved.epsilons if saved is not None else ()
    labels, info = draw()
    fresh = LabelDraw(labels, info, (*spent, epsilon), reused=False)
    _save(path, fingerprint, fresh)
    if spent:
        log.warning(
            "label DP: new label draw %d of this job; label ε spent so far %g",
            fresh.draws,
            fresh.epsilon,
        )
    return fresh


def _booked_draw(
    path: Path,
    fingerprint: str,
    saved: LabelDraw | None,
    draw: Drawer,
    book: DrawBook,
    *,
    redraw: bool,
) -> LabelDraw:
    """:func:`load_or_draw` at a site with a ledger: the ledger, not the file, is the record."""
    booked = book.booked()
    spent = tuple(e for _, e in booked)
    if not redraw and saved is not None:
        digest = draw_digest(fingerprint, saved.labels)
        if not booked or booked[-1][0] != digest or saved.epsilons != spent:
            raise ConfigError(
                f"{path} does not match the label draw the site ledger books for this job "
                f"({_what_differs(booked, digest, saved.epsilons)}): it was replaced or "
                "edited; restore it from your backup, or start with --overwrite "
                "--redraw-labels to draw new labels (the ledger books their ε)"
            )
        log.info("label DP: reusing this job's label draw from %s (%d draws)", path, len(spent))
        return LabelDraw(saved.labels, saved.info, spent, reused=True)
    if not redraw and booked:
        raise ConfigError(
            f"the site ledger books a label draw of this job (sha256 {booked[-1][0][:16]}…), "
            f"but {path} is missing: restore it from your backup, or start with --overwrite "
            "--redraw-labels to draw new labels (the ledger books their ε)"
        )
    labels, info = draw()
    book.book(draw_digest(fingerprint, labels))  # refused if no admission covers it
    fresh = LabelDraw(labels, info, tuple(e for _, e in book.booked()), reused=False)
    _save(path, fingerprint, fresh)
    return fresh


def _what_differs(booked: list[tuple[str, float]], digest: str, epsilons: tuple[float, ...]) -> str:
    if not booked:
        return "it books none"
    if booked[-1][0] != digest:
        return f"the file's labels have sha256 {digest[:16]}…, the ledger's {booked[-1][0][:16]}…"
    return f"the file says ε {list(epsilons)}, the ledger {[e for _, e in booked]}"


def take(
    out: Path,
    fingerprint: str,
    epsilon: float,
    draw: Drawer,
    *,
    rows: int,
    resume: bool,
    redraw: bool,
    book: DrawBook | None = None,
) -> LabelDraw:
    """A label holder's start: the job's draw, with ``--redraw-labels`` refused on a resume.

    Every role that noises labels (the GLM Host, the SecureBoost Host) calls this
    before its first message. A start that is not a resume replaces the earlier run
    (``--overwrite``, or a new kit from ``run-local``): a draw saved for another job
    in ``out`` is replaced, one of this job is reused.
    """
    if redraw and resume:
        raise ConfigError(
            "--redraw-labels starts the job over on new labels; drop --resume (or drop "
            "--redraw-labels to continue on the labels already drawn)"
        )
    # an infinite ε saves no draw (load_or_draw): its file is missing by design
    missing = math.isfinite(epsilon) and not (out / FILE_NAME).exists()
    if resume and book is None and missing and _has_checkpoints(out):
        raise ConfigError(
            f"{out / FILE_NAME} is missing, yet this job has checkpoints: a resume would "
            "train on new labels the earlier epochs never saw (and spend label ε again); "
            "restore the file from your backup, or start with --overwrite --redraw-labels"
        )
    return load_or_draw(
        out,
        fingerprint,
        epsilon,
        draw,
        rows=rows,
        redraw=redraw,
        replace_other_job=not resume,
        book=book,
    )


def _has_checkpoints(out: Path) -> bool:
    folder = out / "checkpoints"
    return folder.is_dir() and any(folder.iterdir())


def check_agreement(drawn: LabelDraw, resume: bool, completed: int) -> None:
    """Refuse a ``--resume`` start that would train from epoch 1 on a draw already used.

    Called by the label holder with the agreed epoch, before it tells the peers.
    """
    if resume and completed == 0 and drawn.reused:
        raise ConfigError(
            "no checkpoint is common to all parties, so --resume would start this job over "
            "on the label draw an earlier start saved; start with --overwrite instead of --resume "
            "to train again from epoch 1 on that same draw, or with --overwrite "
            "--redraw-labels to draw new labels (spends label ε again)"
        )


def _load(path: Path, fingerprint: str, rows: int, replace_other_job: bool) -> LabelDraw | None:
    """The draw saved at ``path``; refused if it is of other rows or unreadable.

    Another job's draw is refused, or with ``replace_other_job`` ignored (None): the
    caller draws for this job and the file is replaced.
    """
    try:
        record = json.loads(path.read_text())
        labels = np.asarray(record["labels"], dtype=record["dtype"])
        epsilons = tuple(float(e) for e in record["epsilons"])
        info = dict(record["info"])
        ours = record["format"] == FORMAT and record["job"] == fingerprint
        if not ours and replace_other_job:
            log.warning("label DP: %s holds another job's draw; drawing for this job", path)
            return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"cannot read the label draw {path} ({exc}); use a new --out folder, or "
            "--redraw-labels to draw new labels (spends label ε again)"
        ) from exc
    if not ours or len(labels) != rows:
        raise ConfigError(
            f"{path} holds the label draw of another job or other rows ({len(labels)} labels, "
            f"this party has {rows} training rows); use a new --out folder for this job"
        )
    return LabelDraw(labels, info, epsilons, reused=True)


def _save(path: Path, fingerprint: str, drawn: LabelDraw) -> None:
    """Atomically, durably, mode 0600 (write_json), before the labels are used."""
    record = {
        "format": FORMAT,
        "job": fingerprint,
        "epsilons": list(drawn.epsilons),
        "info": drawn.info,
        "dtype": drawn.labels.dtype.str,
        "labels": drawn.labels.tolist(),
    }
    write_json(path, record, compact=True, durable=True)
