"""Federated SecureBoost prediction: every party online, each decides its own split nodes.

The Host holds the tree shapes, the leaf values and its own thresholds; each guest
its lookup table (column, threshold per node it owns). The Host asks every guest for
its decisions on the new rows (``boost_decide``/``boost_decisions``), routes each row
to its leaves and writes ``id, probability, label``. Nothing is encrypted: the
decisions are what the Host needs, and no value, threshold or gradient travels.

A model trained with a hidden instance space has no record, at the guest, of which
of its candidates won: the guest sends its candidate sets over the new rows under a
key of its own (``boost_candidates``) and the Host selects, masks and asks for one
decryption per split node of the model, as in training (oblivious.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.crypto.engine import POOL
from privfl.data.tables import IdTable, read_id_csv
from privfl.errors import ConfigError, ProtocolError
from privfl.learning import secureboost as sb
from privfl.learning.taylor import sigmoid
from privfl.models.registry import KINDS, kind_of_file
from privfl.parties.session import PartyContext
from privfl.parties.vertical.handshake import announce
from privfl.parties.vertical.predict import meet_guests, prediction_session, write_predictions
from privfl.parties.vertical.secureboost import reveal, sessions
from privfl.parties.vertical.secureboost.common import guest_features
from privfl.parties.vertical.secureboost.ledger import unkept
from privfl.parties.vertical.secureboost.run import run_boost_server
from privfl.protocol.boost_messages import (
    BoostCandidates,
    BoostDecide,
    BoostDecisions,
    BoostReveal,
    BoostRevealed,
)
from privfl.protocol.messages import Finish, Kind
from privfl.protocol.transport import Transport

log = logging.getLogger("privfl.predict")


@dataclass(frozen=True, slots=True)
class BoostModel:
    """One party's saved part of the trees (model.json of a SecureBoost training run)."""

    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    raw: dict[str, Any]
    path: Path  # the model.json read: its folder keeps the guest's predictions.jsonl


def load_boost_model(folder: Path, party: str) -> BoostModel:
    """Read ``folder/model.json`` written by this party's SecureBoost training."""
    path = folder / "model.json" if folder.is_dir() else folder
    try:
        data = json.loads(path.read_text())
        stats = data["standardisation"]
        names = tuple(stats)
        model = BoostModel(
            features=names,
            mean=np.array([stats[n]["mean"] for n in names], dtype=np.float64),
            scale=np.array([stats[n]["scale"] for n in names], dtype=np.float64),
            raw=data,
            path=path,
        )
    except FileNotFoundError as exc:
        raise ConfigError(
            f"no model at {path}; pass --model with the party's training --out"
        ) from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not a privfl model.json: {exc}") from exc
    kind = KINDS.get(kind_of_file(data) or "")
    if kind is None or kind.is_glm or data.get("party") != party:
        raise ConfigError(f"{path} is not the SecureBoost model of {party!r}")
    return model


def boost_rows(
    job: JobConfig, name: str, model: BoostModel, path: Path, id_column: str | None
) -> tuple[IdTable, bool]:
    """The new rows' model columns; matched by id (PSI) when an id column is known."""
    column = id_column or job.party(name).id_column or None
    return read_id_csv(path, column, None, model.features), column is not None


def predict_boost_party(
    job: JobConfig,
    name: str,
    out: Path,
    *,
    model: BoostModel | None,
    table: IdTable | None,
    by_id: bool,
    transport: Transport,
    allow_repeat: bool = False,
) -> dict[str, Any]:
    """Run one party's side of a SecureBoost prediction session; ``allow_repeat``: a
    hidden-mode guest predicts rows it predicted before with this model (sessions.py)."""

    def answer(ctx: PartyContext, rows: IdTable, x: np.ndarray, digest: str) -> dict[str, Any]:
        assert model is not None and table is not None
        hidden = model.raw.get("instance_space") == "hidden"
        if job.party(name).role == "guest":
            if hidden:
                # our own file's rows, before the intersection the host's ids shape
                mine = sessions.rows_digest(table, by_id)
                booking = sessions.admit(
                    model.path, mine, len(table.ids), allow_repeat=allow_repeat
                )
                return guest_reveals(ctx, model, x, digest, booking)
            return guest_decisions(ctx, model, x, digest)
        return host_predict(ctx, model, rows, x, out, digest)

    return prediction_session(
        job, name, out, model=model, table=table, by_id=by_id, transport=transport,
        serve=run_boost_server, answer=answer,
    )  # fmt: skip


def guest_decisions(
    ctx: PartyContext, model: BoostModel, x: np.ndarray, digest: str
) -> dict[str, Any]:
    """Announce our rows, answer the Host's one decision request, wait for the end."""
    job = ctx.job
    announce(ctx, "guest", len(x), 0, [job.server, job.host], digest)
    request = ctx.channel.expect_body(BoostDecide, {job.host})
    if request.split != "rows":
        raise ConfigError("a prediction session decides the new rows only")
    column = {n: i for i, n in enumerate(model.features)}
    splits = [
        s for s in model.raw["splits"] if request.tree <= s["tree"] < request.tree + request.trees
    ]
    left = np.zeros((len(splits), len(x)), dtype=np.bool_)
    for i, s in enumerate(splits):
        left[i] = x[:, column[s["feature"]]] <= s["threshold"]
    nodes = np.array([[s["tree"], s["node"]] for s in splits], dtype=np.int64).reshape(-1, 2)
    ctx.channel.send(job.host, BoostDecisions(request.tree, "rows", nodes, left))
    ctx.channel.expect_body(Finish, {job.host})
    log.info("sent decisions of %d split nodes for %d rows", len(splits), len(x))
    return {"rows": len(x)}


def guest_reveals(
    ctx: PartyContext, model: BoostModel, x: np.ndarray, digest: str, booking: sessions.Booking
) -> dict[str, Any]:
    """Hidden: our candidate sets over the new rows, then one decryption per split node."""
    job = ctx.job
    announce(ctx, "guest", len(x), 0, [job.server, job.host], digest)
    thresholds = [float(c["threshold"]) for c in model.raw["candidates"]]
    edges = np.array(thresholds).reshape(len(model.features), -1)  # oblivious.py's order
    binned = sb.bin_columns(x, edges)
    fresh_key = unkept(job.key_bits, job.obfuscation)  # per session (docs/security.md)
    sets, body = reveal.candidates(job, ctx.name, binned, "rows", POOL, 1, fresh_key)
    ctx.channel.send(job.host, body)
    allowed = requestable(model)
    answered = 0
    try:
        while True:
            env = ctx.channel.expect({Kind.BOOST_REVEAL, Kind.FINISH}, {job.host})
            if isinstance(env.body, Finish):
                break
            assert isinstance(env.body, BoostReveal)
            reply = reveal.answer(sets, env.body, allowed)
            ctx.channel.send(job.host, reply)
            answered += 1
    finally:
        booking.close(answered)  # the session's record stays, whatever ended it
    log.info("answered %d decryption requests for %d rows", answered, len(x))
    return {"rows": len(x), "repeat": booking.earlier}


def requestable(model: BoostModel) -> Callable[[int, int], bool]:
    """The (tree, node) a hidden-mode guest decrypts a request for: the split nodes its
    training answered (``answered_nodes``), or, in a model without them, every node id
    of the model's shape."""
    try:
        nodes = 2 ** int(model.raw["depth"]) - 1
        trees = int(model.raw["trees"])
        listed = model.raw.get("answered_nodes")
        split = None if listed is None else {(int(t), int(n)) for t, n in listed}
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{model.path} is not a privfl model.json: {exc}") from exc
    if split is not None:
        return lambda t, n: (t, n) in split
    return lambda t, n: t < trees and n < nodes


def host_predict(
    ctx: PartyContext, model: BoostModel, rows: IdTable, x: np.ndarray, out: Path, digest: str
) -> dict[str, Any]:
    """Gather every guest's decisions, route each row through every tree, write predictions."""
    job, channel = ctx.job, ctx.channel
    meet_guests(ctx, len(x), digest)
    trees = model.raw["trees"]
    if model.raw.get("instance_space") == "hidden":
        revealed = hidden_decisions(ctx, model, len(x))
        channel.broadcast([*job.guests, job.server], Finish(epochs=0, reason="predicted"))
        return write_routed(ctx, model, rows, x, out, revealed)
    channel.broadcast(job.guests, BoostDecide(0, max(1, len(trees)), "rows"))
    guest_left: dict[tuple[int, int], np.ndarray] = {}
    for guest, body in channel.gather(BoostDecisions, job.guests).items():
        if body.split != "rows" or body.tree != 0 or body.left.shape[1:] != (len(x),):
            raise ProtocolError(f"{guest} sent decisions for other rows or trees")
        nodes = [(t, n) for t, n in body.nodes.tolist()]
        # Only the nodes the guest split: another party's decision is never taken from it.
        owned = owned_nodes(model, guest)
        if sorted(nodes) != sorted(owned) or len(set(nodes)) != len(nodes):
            raise ProtocolError(
                f"{guest} sent decisions for nodes {sorted(set(nodes) - owned)[:3]} it did not "
                f"split, or not for {sorted(owned - set(nodes))[:3]}: it must decide exactly "
                "its own split nodes (docs/protocol.md §6.9)"
            )
        guest_left.update(zip(nodes, body.left, strict=True))
    channel.broadcast([*job.guests, job.server], Finish(epochs=0, reason="predicted"))
    return write_routed(ctx, model, rows, x, out, guest_left)


def write_routed(
    ctx: PartyContext,
    model: BoostModel,
    rows: IdTable,
    x: np.ndarray,
    out: Path,
    guest_left: dict[tuple[int, int], np.ndarray],
) -> dict[str, Any]:
    """Route every row, write ``id, probability, label``."""
    probability = sigmoid(route_rows(model, x, guest_left))
    write_predictions(out, rows.ids, probability)
    log.info("wrote %d predictions to %s", len(probability), out)
    return {"rows": len(probability), "out": str(out)}


def hidden_decisions(
    ctx: PartyContext, model: BoostModel, rows: int
) -> dict[tuple[int, int], np.ndarray]:
    """Hidden: every guest's sets over the new rows, then per split node of the model one
    masked request to every guest (the owner's candidate, dummies elsewhere), in order."""
    job, channel = ctx.job, ctx.channel
    held: dict[str, reveal.HostSets] = {}
    for guest, sent in channel.gather(BoostCandidates, job.guests).items():
        columns = guest_features(job, guest)
        held[guest] = reveal.check_candidates(job, guest, sent, "rows", rows, columns)
    nodes = [
        (t, int(e["node"]), e["party"], e.get("candidate"))
        for t, tree in enumerate(model.raw["trees"])
        for e in tree
        if "party" in e  # every split node, the Host's too: a guest cannot count its wins
    ]
    masks: dict[tuple[str, int, int], list[int]] = {}
    for t, n, owner, pick in nodes:
        for guest, sets in held.items():
            chosen = int(pick) if guest == owner and pick is not None else None
            request, masks[(guest, t, n)] = sets.request(t, n, chosen)
            channel.send(guest, request)
    out: dict[tuple[int, int], np.ndarray] = {}
    for t, n, owner, _ in nodes:
        for guest, sets in held.items():
            body = channel.expect_body(BoostRevealed, {guest})
            left = sets.read(guest, body, t, n, masks.pop((guest, t, n)))
            if guest == owner:
                out[(t, n)] = left
    return out


def owned_nodes(model: BoostModel, party: str) -> set[tuple[int, int]]:
    """The (tree, node) pairs ``party`` split, by the Host's model."""
    trees = model.raw["trees"]
    return {
        (t, int(e["node"])) for t, tree in enumerate(trees) for e in tree if e.get("party") == party
    }


def route_rows(
    model: BoostModel, x: np.ndarray, guest_left: dict[tuple[int, int], np.ndarray]
) -> np.ndarray:
    """Every row's margin: the base plus its leaf in each tree, routed by the Host's own
    thresholds and the guests' left masks per (tree, node)."""
    column = {n: i for i, n in enumerate(model.features)}
    margin = np.full(len(x), float(model.raw["base_margin"]))
    for t, nodes in enumerate(model.raw["trees"]):
        tree: sb.Tree = {}
        decide: dict[int, np.ndarray] = {}
        for entry in nodes:
            n = int(entry["node"])
            if "leaf" in entry:
                tree[n] = sb.Node(value=float(entry["leaf"]))
                continue
            tree[n] = sb.Node(group=0, feature=0, bin=0)
            if entry["party"] == "host":
                decide[n] = x[:, column[entry["feature"]]] <= entry["threshold"]
            elif (t, n) in guest_left:
                decide[n] = guest_left[(t, n)]
            else:
                raise ConfigError(f"{entry['party']} sent no decision for tree {t} node {n}")
        margin += sb.route(tree, decide, len(x))
    return margin
