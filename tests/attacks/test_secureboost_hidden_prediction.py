"""Attack: a deviating Host reads a guest's binned columns through hidden-mode prediction sessions.

A model trained at the defaults (hidden instance space) leaves the guest no record of
which of its candidates won, so a prediction session selects obliviously again: the
guest sends its candidate sets over the new rows under a fresh key and decrypts one
masked request per ``(tree, node)`` of the model's shape (``trees × (2^depth − 1)``,
70 at the defaults), each once. It cannot tell which candidate a request holds, so a
Host may pick a different one at every node and in every session: 70 candidate sets
of its choice per session, over the guest's prediction rows (here the training rows).
With all ``bins − 1`` sets of a column it has every row's bin in that column. Measured
below at the defaults (20 columns, 32 bins, 620 candidates): 9 sessions read every cell
when the guest's operator predicts the same rows again and again
(``--allow-repeat-prediction`` every time: the leaky arm).

What holds (the arm with the bound): a session decrypts at most one request per node
id of the model's shape; a second request for a node, or a node past the shape, is
refused with one line naming the Host. The guest books every session in its model's
``predictions.jsonl`` and refuses a second one of the same model over the same rows:
the Host gets one session, 70 sets, two columns and part of a third. A shared-mode
model's prediction answers only the guest's own won thresholds (``boost_decide``), the
same sets in every session.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import failures, memory_job, party_data, run_in_threads, run_parties

from privfl.config.vertical import JobConfig, LabelDPConfig, switch_kind
from privfl.data.tables import IdTable
from privfl.errors import ConfigError, ProtocolError
from privfl.learning import secureboost as sb
from privfl.parties.session import PartyContext
from privfl.parties.vertical.predict import meet_guests
from privfl.parties.vertical.secureboost import predict, reveal
from privfl.parties.vertical.secureboost.common import guest_features
from privfl.parties.vertical.secureboost.predict import BoostModel, load_boost_model
from privfl.protocol.boost_messages import BoostCandidates, BoostRevealed
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Finish

GUEST = "guest-1"
pytestmark = pytest.mark.xdist_group("secureboost_hidden_prediction")  # one training run


def default_job() -> JobConfig:
    """The job `privfl init vfl --model secureboost` writes, on the in-memory hub."""
    return switch_kind(memory_job(1, timeout=60.0, epsilon=LabelDPConfig().epsilon), "secureboost")


def reading_host(picks: list[int | None], read: dict[int, np.ndarray]) -> Any:
    """The deviating Host's side of a session: ``picks[i]`` at the ``i``-th node id."""

    def host(
        ctx: PartyContext, model: BoostModel, rows: IdTable, x: np.ndarray, out: Path, digest: str
    ) -> dict[str, Any]:
        job, channel = ctx.job, ctx.channel
        meet_guests(ctx, len(x), digest)
        body = channel.gather(BoostCandidates, job.guests)[GUEST]
        columns = guest_features(job, GUEST)
        sets = reveal.check_candidates(job, GUEST, body, "rows", len(x), columns)
        nodes = 2**job.model.depth - 1
        where = [(i // nodes, i % nodes) for i in range(len(picks))]
        masks = {}
        for (t, n), pick in zip(where, picks, strict=True):
            request, masks[(t, n)] = sets.request(t, n, pick)
            channel.send(GUEST, request)
        for (t, n), pick in zip(where, picks, strict=True):
            left = sets.read(
                GUEST, channel.expect_body(BoostRevealed, {GUEST}), t, n, masks[(t, n)]
            )
            if pick is not None:
                read[pick] = left
        channel.broadcast([*job.guests, job.server], Finish(epochs=0, reason="predicted"))
        return {"rows": len(x)}

    return host


def session(
    job: JobConfig, models: dict[str, BoostModel], out: Path, *, allow_repeat: bool = False
) -> dict[str, Any]:
    """One prediction session over the training rows (in raw units), every party a thread;
    ``allow_repeat``: the guest operator's ``--allow-repeat-prediction``."""
    data = party_data(job)
    tables = {
        p: IdTable(
            ids=tuple(str(i) for i in range(len(data[p].x_train))),
            x=data[p].x_train * data[p].scale + data[p].mean,
            feature_names=models[p].features,
        )
        for p in models
    }
    hub = InMemoryHub()
    return run_parties(
        job.parties,
        lambda name: predict.predict_boost_party(
            job,
            name,
            out / name / "p.csv",
            model=models.get(name),
            table=tables.get(name),
            by_id=False,
            transport=hub.transport(name),
            allow_repeat=allow_repeat,
        ),
    )


def own_copy(models: dict[str, BoostModel], folder: Path) -> dict[str, BoostModel]:
    """The models with the guest's model.json copied into ``folder``: a ledger of its own."""
    folder.mkdir()
    path = Path(shutil.copy(models[GUEST].path, folder / "model.json"))
    return {**models, GUEST: dataclasses.replace(models[GUEST], path=path)}


def picks_of(read: int, candidates: int, per_session: int) -> list[int | None]:
    """The next session's picks: the ``per_session`` candidates not read yet, in order."""
    todo = list(range(read, min(candidates, read + per_session)))
    return [*todo, *[None] * (per_session - len(todo))]


def known_cells(read: dict[int, np.ndarray], want: np.ndarray, bins: int) -> int:
    """The cells whose bin the Host has exactly: a row left of a cut ``k`` it read, with
    every cut below ``k`` read too, or past every cut of a column it read whole."""
    known = 0
    for column in range(want.shape[1]):
        cuts = [read.get(column * (bins - 1) + b) for b in range(bins - 1)]
        have = next((b for b, c in enumerate(cuts) if c is None), bins - 1)
        if have == 0:
            continue
        left = np.array(cuts[:have])  # (have, rows): is the row at or under cut b
        exact = left.any(axis=0) if have < bins - 1 else np.ones(len(want), dtype=bool)
        decoded = (~left).sum(axis=0)
        assert np.array_equal(decoded[exact], want[exact, column])  # really read
        known += int(exact.sum())
    return known


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[JobConfig, dict[str, BoostModel]]:
    job = default_job()
    assert job.model.instance_space == "hidden" and job.model.host_check is False
    out = tmp_path_factory.mktemp("train")
    results = run_in_threads(job, InMemoryHub(), out)
    assert not failures(results), failures(results)
    return job, {p: load_boost_model(out / p, p) for p in (job.host, *job.guests)}


def truth(job: JobConfig, model: BoostModel) -> np.ndarray:
    """The guest's bins of the training rows, as its prediction code bins them."""
    data = party_data(job)[GUEST]
    x = ((data.x_train * data.scale + data.mean) - model.mean) / model.scale
    edges = np.array([c["threshold"] for c in model.raw["candidates"]]).reshape(len(x[0]), -1)
    return sb.bin_columns(x, edges)


def test_leaky_arm_nine_prediction_sessions_read_every_guest_cell(
    trained: tuple[JobConfig, dict[str, BoostModel]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job, models = trained
    bins = job.model.bins
    per_session = job.model.trees * (2**job.model.depth - 1)  # 70 at the defaults
    candidates = len(models[GUEST].raw["candidates"])  # 20 columns × 31
    models = own_copy(models, tmp_path / "model")
    read: dict[int, np.ndarray] = {}
    sessions = 0
    while len(read) < candidates:
        picks = picks_of(len(read), candidates, per_session)
        monkeypatch.setattr(predict, "host_predict", reading_host(picks, read))
        results = session(job, models, tmp_path / str(sessions), allow_repeat=True)
        assert not [r for r in results.values() if isinstance(r, Exception)], results
        sessions += 1

    left = np.array([read[i] for i in range(candidates)]).reshape(-1, bins - 1, len(read[0]))
    decoded = (~left).sum(axis=1).T  # a row's bin: how many of its column's cuts it is above
    want = truth(job, models[GUEST])
    assert np.array_equal(decoded, want)  # every cell of every training row
    assert sessions == -(-candidates // per_session) == 9
    assert results[GUEST]["repeat"] == 8  # the ninth session over these rows, booked
    print(f"{sessions} sessions, {per_session} sets each: all {want.size} guest cells read")


def test_the_guest_refuses_a_second_session_over_the_same_rows(
    trained: tuple[JobConfig, dict[str, BoostModel]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Prepare: the same deviating Host, the guest at its defaults.
    job, models = trained
    models = own_copy(models, tmp_path / "model")
    bins, candidates = job.model.bins, len(models[GUEST].raw["candidates"])
    per_session = job.model.trees * (2**job.model.depth - 1)
    read: dict[int, np.ndarray] = {}

    # Act: the first session, then the Host asks for a second one over the same rows.
    monkeypatch.setattr(
        predict, "host_predict", reading_host(picks_of(0, candidates, per_session), read)
    )
    first = session(job, models, tmp_path / "first")
    monkeypatch.setattr(
        predict, "host_predict", reading_host(picks_of(len(read), candidates, per_session), read)
    )
    second = session(job, models, tmp_path / "second")

    # Assert: one session's sets, no more; the refusal names what to do.
    assert not [r for r in first.values() if isinstance(r, Exception)], first
    refused = second[GUEST]
    assert isinstance(refused, ConfigError) and "--allow-repeat-prediction" in str(refused)
    assert len(read) == per_session
    want = truth(job, models[GUEST])
    known = known_cells(read, want, bins)
    assert known < want.size // 4
    print(f"1 session ({per_session} sets): {known} of {want.size} guest cells read")


def test_a_session_decrypts_one_request_per_node_of_the_shape(
    trained: tuple[JobConfig, dict[str, BoostModel]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job, models = trained
    per_session = job.model.trees * (2**job.model.depth - 1)
    picks: list[int | None] = [None] * (per_session + 1)  # one node past the model's shape
    monkeypatch.setattr(predict, "host_predict", reading_host(picks, {}))

    results = session(job, own_copy(models, tmp_path / "model"), tmp_path)

    refused = results[GUEST]
    assert isinstance(refused, ProtocolError)
    assert str(refused).startswith("the host deviated from the protocol: a second or unexpected")
