"""Scripts against a party of a SecureBoost prediction session (docs/protocol.md §6.9
*Prediction*): no key, no ciphertext; each guest decides its own split nodes.

- **guest** (the kit plays the Server and the Host): Hellos with ``features = 0`` and the
  rows by position; a ``boost_decide`` of another session is refused; the real one
  (``tree = 0``, ``trees`` = the model's, ``split = "rows"``) is answered with one
  ``boost_decisions`` echoing tree 0 and ``rows``, one mask of every new row per node;
  with its files, exactly the guest's split nodes, each mask ``x[:, column] ≤ threshold``
  of its model; then ``finish``.
- **host** (the Server and every guest; needs the Host's ``--model``, to know which
  nodes each guest owns): its Hello; one ``boost_decide`` to every guest; the played
  guests answer with known masks; ``finish`` to every guest and the Server, and nothing
  else to the Server; with ``--data`` and ``--predictions``, the CSV holds
  ``σ(base + Σ leaves)`` of the rows routed by its own thresholds and the played masks.
  Violation: a guest's decisions that also name a node another party split must make
  it abort (a guest never decides another party's node).
"""

from __future__ import annotations

import numpy as np

from privfl.config.vertical import JobConfig
from privfl.data.tables import standardise_with
from privfl.learning.taylor import sigmoid
from privfl.parties.vertical.secureboost.predict import (
    BoostModel,
    boost_rows,
    load_boost_model,
    owned_nodes,
    route_rows,
)
from privfl.protocol.boost_messages import BoostDecide, BoostDecisions
from privfl.protocol.channel import body_as
from privfl.protocol.messages import Kind
from privfl.tools.conformance.peer import Peer, Report, expect, quiet
from privfl.tools.conformance.session import (
    Scored,
    aborts,
    guest_ends,
    guest_hellos,
    host_ends,
    host_hellos,
    played,
    read_predictions,
)
from privfl.tools.conformance.target import PredictInputs, Target


def boost_scored(
    job: JobConfig, party: str, inputs: PredictInputs
) -> tuple[BoostModel | None, Scored | None]:
    """The party's SecureBoost model (with ``--model``) and its standardised new rows
    (with ``--data`` too)."""
    if inputs.model is None:
        return None, None
    model = load_boost_model(inputs.model, party)
    if inputs.data is None:
        return model, None
    table, _ = boost_rows(job, party, model, inputs.data, None)
    return model, Scored(table, standardise_with(table, model.mean, model.scale))


def boost_predict_guest_script(target: Target) -> None:
    """Play the Server and the Host against a SecureBoost guest's prediction session."""
    job, party, _, report, process = target.parts()
    inputs = target.inputs
    model, scored = boost_scored(job, party, inputs)
    with played(job, job.server, job.host) as (server, host):
        rows = None if scored is None else len(scored.x)
        if guest_hellos(report, server, host, party, job, rows) is None:
            return
        splits = [] if model is None else model.raw["splits"]
        trees = max([s["tree"] + 1 for s in splits], default=job.model.trees)
        host.raw(party, BoostDecide(0, trees, "rows"), session="another-session")
        quiet(report, [host, server], party, "a boost_decide of another session is refused")
        host.channel.send(party, BoostDecide(0, trees, "rows"))
        env = expect(report, host, Kind.BOOST_DECISIONS, party, "boost_decide → boost_decisions")
        if env is None:
            return
        body = body_as(env.body, BoostDecisions)
        report.check(
            "boost_decisions echo tree 0 and split rows",
            (body.tree, body.split) == (0, "rows"),
            f"tree {body.tree}, split {body.split}",
        )
        if model is not None and scored is not None:
            _check_decisions(report, body, model, scored)
        guest_ends(report, server, host, party, job, process)


def _check_decisions(
    report: Report, got: BoostDecisions, model: BoostModel, scored: Scored
) -> None:
    """One mask per split node the guest owns, each its threshold on the new rows."""
    column = {n: i for i, n in enumerate(model.features)}
    want = {
        (s["tree"], s["node"]): scored.x[:, column[s["feature"]]] <= s["threshold"]
        for s in model.raw["splits"]
    }
    nodes = [tuple(n) for n in got.nodes.tolist()]
    if not report.check(
        "boost_decisions: one mask per split node of the guest's model, none other",
        sorted(nodes) == sorted(want) and len(set(nodes)) == len(nodes),
        f"{len(nodes)} nodes {nodes[:4]}, the model has {len(want)}",
    ):
        return
    wrong = [n for i, n in enumerate(nodes) if not np.array_equal(got.left[i], want[n])]
    report.check(
        "every mask is x[:, column] ≤ threshold of the new rows, in order",
        got.left.shape[1:] == (len(scored.x),) and not wrong,
        f"{got.left.shape[1]} rows; wrong masks at (tree, node) {wrong[:4]}",
    )


def boost_predict_host_script(target: Target) -> None:
    """Play the Server and every guest against a SecureBoost Host's prediction session."""
    job, party, ending, report, process = target.parts()
    inputs = target.inputs
    model, scored = boost_scored(job, party, inputs)
    if model is None:
        report.check("the host's --model is given (it names each guest's nodes)", False)
        return
    with played(job, job.server, *job.guests) as peers:
        server, guests = peers[0], {peer.name: peer for peer in peers[1:]}
        rows = None if scored is None else len(scored.x)
        hello = host_hellos(report, server, guests, party, job, rows)
        if hello is None:
            return
        masks = _answer_decides(report, job, party, model, guests, hello.rows, ending)
        if ending == "violation":
            what = "decisions for a node another party split make it Abort"
            aborts(report, server, party, what, process)
            return
        if masks is None:
            return
        host_ends(report, peers, party, job, process)
        if scored is not None and inputs.predictions is not None:
            _check_boost_predictions(report, model, scored, masks, inputs)


def _answer_decides(
    report: Report,
    job: JobConfig,
    party: str,
    model: BoostModel,
    guests: dict[str, Peer],
    rows: int,
    ending: str,
) -> dict[tuple[int, int], np.ndarray] | None:
    """Each guest's known masks for the nodes the Host's model says it owns."""
    trees = model.raw["trees"]
    rng = np.random.default_rng(17)  # known answers, not privacy randomness
    masks: dict[tuple[int, int], np.ndarray] = {}
    for i, (name, peer) in enumerate(guests.items()):
        env = expect(report, peer, Kind.BOOST_DECIDE, party, f"boost_decide to {name}")
        if env is None:
            return None
        body = body_as(env.body, BoostDecide)
        report.check(
            f"boost_decide to {name}: tree 0, the model's {len(trees)} trees, split rows",
            (body.tree, body.trees, body.split) == (0, max(1, len(trees)), "rows"),
            str(body),
        )
        own = sorted(owned_nodes(model, name))
        left = rng.random((len(own), rows)) < 0.5
        masks.update(zip(own, left, strict=True))
        if ending == "violation" and i == 0:  # also decides a node another party split
            own, left = [*own, _foreign(model, name)], np.vstack([left, left[:1]])
        nodes = np.array(own, dtype=np.int64).reshape(-1, 2)
        peer.channel.send(party, BoostDecisions(0, "rows", nodes, left))
    return masks


def _foreign(model: BoostModel, guest: str) -> tuple[int, int]:
    """A split node of the Host's model that ``guest`` did not split ((0, 0) if none:
    then a root the guest split twice, refused as well)."""
    splits = [
        (t, int(e["node"]))
        for t, tree in enumerate(model.raw["trees"])
        for e in tree
        if "leaf" not in e and e.get("party") != guest
    ]
    return splits[0] if splits else (0, 0)


def _check_boost_predictions(
    report: Report,
    model: BoostModel,
    scored: Scored,
    masks: dict[tuple[int, int], np.ndarray],
    inputs: PredictInputs,
) -> None:
    """The Host's CSV: ``id, probability, label`` of the rows routed through every tree."""
    probability = sigmoid(route_rows(model, scored.x, masks))
    got = read_predictions(report, inputs)
    if got is None:
        return
    ids = [row[0] for row in got[1:]]
    values = np.array([float(row[1]) for row in got[1:]]) if len(got) > 1 else np.zeros(0)
    report.check(
        "predictions are σ(base + Σ leaves) of the rows routed by the host's thresholds "
        "and the guests' masks",
        ids == list(scored.table.ids)
        and values.shape == probability.shape
        and bool(np.allclose(values, probability, atol=1e-5)),
        f"first rows {got[1:3]}, expected {probability[:2]}",
    )
