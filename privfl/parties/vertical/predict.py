"""Federated prediction: every party online, each scores its own columns of the new rows.

The rows are aligned by the same PSI stage as training (or by position without an id
column). Each guest sends its partial scores encrypted under a fresh Paillier key of the
Server; the Host sums them homomorphically and has the Server decrypt the sum under a
mask only the Host knows — so the Server sees uniform noise and, with two or more
guests, the Host learns only ``Σ_g z_g``, never one guest's score: each guest's packed
scores carry a mask uniform mod n that cancels in the sum over guests
(crypto/guest_masks.py), so however the Host packs its request, one guest's vector
decrypts to noise (docs/security.md, *Server decryptions*). The
Host adds its own ``z_H`` and bias and writes, per model kind: ``id, probability, label``
(logistic), ``id, p_0 … p_{k−1}, label`` (multiclass: every class's one-vs-rest
probability, the label the top one), ``id, prediction`` (linear) or, for Poisson,
``id, rate`` (per unit exposure) — ``id, rate, prediction`` (the expected count
``rate × exposure``) when the job names the Host's exposure column, read from the Host's
own file and used only there.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto import packing
from privfl.crypto.encoding import VALUE_BITS, decode, encode
from privfl.crypto.guest_masks import label
from privfl.crypto.paillier import unmask
from privfl.data.alignment import positions
from privfl.data.tables import IdTable, exposure_column_of, read_id_csv, standardise_with
from privfl.errors import ConfigError, ProtocolError
from privfl.learning.glm import Glm, glm_of, mean_of
from privfl.learning.kinds.base import add_all
from privfl.learning.kinds.logistic import Logistic
from privfl.parties.files import open_private, private_dir
from privfl.parties.session import PartyContext, run_role
from privfl.parties.vertical.handshake import (
    announce,
    check_hello,
    check_rows,
    receive_guest_key,
    receive_public_key,
    rows_digest,
)
from privfl.parties.vertical.psi import align
from privfl.parties.vertical.server import run_server
from privfl.parties.vertical.startup import open_audit
from privfl.protocol import fresh
from privfl.protocol.channel import Channel
from privfl.protocol.messages import (
    Decrypted,
    DecryptRequest,
    Finish,
    Hello,
    Kind,
    ScoreRequest,
    Scores,
)
from privfl.protocol.transport import Transport

log = logging.getLogger("privfl.predict")


@dataclass(frozen=True, slots=True)
class Model:
    """One party's saved weights, by feature name, and the standardisation it trained with."""

    features: tuple[str, ...]
    weights: np.ndarray  # (features,) or (features, k)
    mean: np.ndarray
    scale: np.ndarray
    bias: float | np.ndarray | None


def load_model(folder: Path, party: str) -> Model:
    """Read ``folder/model.json`` written by this party's training run."""
    path = folder / "model.json" if folder.is_dir() else folder
    try:
        data = json.loads(path.read_text())
        names = tuple(data["weights"])
        stats = data["standardisation"]
        model = Model(
            features=names,
            weights=np.array([data["weights"][n] for n in names], dtype=np.float64),
            mean=np.array([stats[n]["mean"] for n in names], dtype=np.float64),
            scale=np.array([stats[n]["scale"] for n in names], dtype=np.float64),
            bias=None if data.get("bias") is None else np.asarray(data["bias"], dtype=np.float64),
        )
    except FileNotFoundError as exc:
        raise ConfigError(
            f"no model at {path}; pass --model with the party's training --out"
        ) from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not a privfl model.json: {exc}") from exc
    if data.get("party") != party:
        raise ConfigError(f"{path} is the model of {data.get('party')!r}, not of {party!r}")
    return model


class Standardised(Protocol):
    """What a saved model of any kind keeps of its training columns' scaling."""

    @property
    def mean(self) -> np.ndarray: ...

    @property
    def scale(self) -> np.ndarray: ...


Answer = Callable[[PartyContext, IdTable, np.ndarray, str], dict[str, Any]]


def prediction_session(
    job: JobConfig,
    name: str,
    out: Path,
    *,
    model: Standardised | None,
    table: IdTable | None,
    by_id: bool,
    transport: Transport,
    serve: Callable[[PartyContext], dict[str, Any]],
    answer: Answer,
) -> dict[str, Any]:
    """One party's prediction session, any model kind: align the new rows (PSI or by
    position), scale them as in training, commit to them, then ``answer`` (a Host or
    guest) or ``serve`` (the Server)."""
    private_dir(out.parent)
    audit = open_audit(job, name, out.parent)  # every session appends to the folder's log
    channel = Channel(transport, session=job.session, timeout=job.timeout_seconds, observer=audit)
    audit.attach(channel)
    ctx = PartyContext(name=name, job=job, channel=channel, out=out.parent, checkpoints=False)
    with audit, run_role(name, channel, lambda: ctx.peers, [transport]):
        if job.party(name).role == "server":
            result = serve(ctx)
        else:
            assert model is not None and table is not None
            rows = align(ctx, table) if by_id else table
            x = standardise_with(rows, model.mean, model.scale)
            # The row commitment (docs/protocol.md §2.3): ids, or 0-based positions.
            ids = rows.ids if by_id else positions(range(len(rows.ids)))
            result = answer(ctx, rows, x, rows_digest(ctx, ids, ()))
        audit.settle()  # our last head recorded by each peer, and theirs by us
        return result


def predict_party(
    job: JobConfig,
    name: str,
    out: Path,
    *,
    model: Model | None,
    table: IdTable | None,
    by_id: bool,
    transport: Transport,
) -> dict[str, Any]:
    """Run one party's side of a GLM prediction session; the Host returns where it wrote."""

    def answer(ctx: PartyContext, rows: IdTable, x: np.ndarray, digest: str) -> dict[str, Any]:
        assert model is not None
        check_outputs(model, glm_of(job), name)
        if job.party(name).role == "guest":
            return guest_scores(ctx, x @ model.weights, digest)
        bias = 0.0 if model.bias is None else model.bias
        return host_predict(ctx, rows, x @ model.weights + bias, out, digest)

    def serve(ctx: PartyContext) -> dict[str, Any]:
        return run_server(ctx, predicting=True)

    return prediction_session(
        job, name, out, model=model, table=table, by_id=by_id, transport=transport,
        serve=serve, answer=answer,
    )  # fmt: skip


def check_outputs(model: Model, glm: Glm, name: str) -> None:
    """The saved weights have the job's k outputs per feature."""
    k = 1 if model.weights.ndim == 1 else model.weights.shape[1]
    if k != glm.outputs:
        raise ConfigError(
            f"the model.json of {name} has {k} output(s) per feature, the job's "
            f"{glm.kind} model {glm.outputs}: pass the model trained with this job"
        )


def guest_scores(ctx: PartyContext, z: np.ndarray, digest: str = "") -> dict[str, Any]:
    """Announce our rows, then send ``[[z_g]]`` when the Host asks, and wait for the end."""
    job, channel = ctx.job, ctx.channel
    announce(ctx, "guest", len(z), 0, [job.server, job.host], digest)
    key, _, zero_sum = receive_guest_key(ctx)
    request = channel.expect_body(ScoreRequest, {job.host})
    flat = np.asarray(z).ravel()  # every class of a row together (row-major)
    packed = packing.pack_plain(encode(flat, VALUE_BITS, key.n), key.n)
    # Masked to cancel in the Host's sum over guests (crypto/guest_masks.py): one
    # guest's vector alone decrypts to uniform values, however the Host packs it.
    plain = zero_sum.add(key.n, label("predict", request.epoch, request.split), packed)
    values = fresh.encrypt(key, plain)
    channel.send(job.host, Scores(epoch=request.epoch, split=request.split, scores=values))
    channel.expect_body(Finish, {job.host})  # the Host ends the session
    log.info("sent encrypted scores for %d rows", len(z))
    return {"rows": len(z)}


def meet_guests(ctx: PartyContext, rows: int, digest: str) -> None:
    """The Host's side of a prediction hello: announce its rows, check every guest's."""
    job = ctx.job
    announce(ctx, "host", rows, 0, [job.server], digest)
    for sender, hello in ctx.channel.gather(Hello, job.guests).items():
        check_hello(ctx, sender, hello)
        if hello.rows != rows:
            raise ConfigError(f"{sender} has {hello.rows} rows to score, the host {rows}")
        check_rows(sender, hello.rows_digest, digest, "the host's")


def host_predict(
    ctx: PartyContext, rows: IdTable, z_host: np.ndarray, out: Path, digest: str = ""
) -> dict[str, Any]:
    """Collect the guests' summed scores (masked decryption), write the predictions file."""
    job, channel = ctx.job, ctx.channel
    meet_guests(ctx, len(z_host), digest)
    key = receive_public_key(ctx)
    channel.broadcast(job.guests, ScoreRequest(epoch=0, split="test"))
    replies = channel.gather(Kind.SCORES, job.guests)
    typed = {g: r for g, r in replies.items() if isinstance(r, Scores)}
    if len(typed) != len(replies):
        odd = ", ".join(sorted(set(replies) - set(typed)))
        raise ProtocolError(f"{odd} answered the score request with something else than scores")
    # The guests pack their scores (as in evaluation): one slot per row, summed slot-wise.
    expected = packing.packed_length(z_host.size, key.n)
    for guest in job.guests:
        if len(typed[guest].scores) != expected:
            raise ProtocolError(
                f"{guest} sent {len(typed[guest].scores)} packed scores for the {len(z_host)} "
                f"rows to score, not {expected}: its model or rows are not this session's"
            )
    total = add_all(key, [typed[g].scores.values for g in job.guests])
    masked, masks = fresh.mask(key, total)  # masked, then re-randomised by the Host
    channel.send(job.server, DecryptRequest(epoch=0, batch=0, purpose="scores", values=masked))
    reply = channel.expect_body(Decrypted, {job.server})
    unmasked = unmask(reply.values.values, masks, key.n)
    plain = packing.unpack(unmasked, z_host.size, key.n, len(typed))
    guests = decode(plain, VALUE_BITS, key.n).reshape(z_host.shape)
    channel.broadcast([*job.guests, job.server], Finish(epochs=0, reason="predicted"))
    glm = glm_of(job)
    eta = (z_host + guests).reshape(len(z_host), glm.outputs)
    prediction = mean_of(glm, eta)  # Poisson: the rate per unit exposure
    # The session is over: the exposures scale the rates here, at the Host, and nowhere else.
    write_predictions(out, rows.ids, prediction, glm, exposure=rows.exposure)
    log.info("wrote %d predictions to %s", len(prediction), out)
    return {"rows": len(prediction), "out": str(out)}


def write_predictions(
    path: Path,
    ids: tuple[str, ...],
    prediction: np.ndarray,
    glm: Glm | None = None,
    *,
    exposure: np.ndarray | None = None,
) -> None:
    """One row per scored id: ``id, probability, label`` (label = probability ≥ 0.5) for
    logistic regression; the other kinds' columns as in the module's docstring (Poisson:
    with ``exposure``, the expected count ``rate × exposure`` after the rate)."""
    values = np.asarray(prediction, dtype=np.float64).reshape(len(ids), -1)
    header, rows = (glm or Logistic()).prediction_columns(values, exposure)
    with open_private(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", *header])
        writer.writerows([i, *row] for i, row in zip(ids, rows, strict=True))


def prediction_rows(
    job: JobConfig, name: str, model: Model, path: Path, id_column: str | None
) -> tuple[IdTable, bool]:
    """The new rows' model columns (and the Host's exposures, when the job names a column
    of them); matched by id (PSI) when an id column is known."""
    spec = job.party(name)
    column = id_column or spec.id_column or None
    exposure = exposure_column_of(job, name)
    table = read_id_csv(path, column, None, model.features, exposure_column=exposure)
    return table, column is not None
