"""Federated prediction over the in-memory hub: right scores, and the Host sees only the sum;
Poisson's expected counts scale by the Host's own exposures, which never leave it."""

from __future__ import annotations

import math
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import run_parties

from privfl.config.vertical import (
    DataConfig,
    JobConfig,
    LabelDPConfig,
    ModelConfig,
    PartySpec,
)
from privfl.crypto.encoding import VALUE_BITS, encode
from privfl.crypto.packing import pack_plain, packed_length
from privfl.data.tables import IdTable, exposure_column_of
from privfl.errors import ConfigError, ProtocolError
from privfl.learning.taylor import sigmoid
from privfl.parties.vertical import predict as predict_module
from privfl.parties.vertical.handshake import announce, receive_public_key
from privfl.parties.vertical.predict import Model, predict_party, prediction_rows
from privfl.protocol import codec, fresh
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import (
    Decrypted,
    Finish,
    Kind,
    PublicKeyMessage,
    ScoreRequest,
    Scores,
)

NAMES = ["server", "host", "guest-1", "guest-2"]
POISSON = NAMES[:3]  # Poisson takes one guest


def setup(
    rng: np.random.Generator, everyone: list[str] = NAMES, exposure: str | None = None
) -> tuple[JobConfig, dict[str, Model], dict[str, IdTable]]:
    """A logistic job, or with ``exposure`` (a column name or "") a Poisson one."""
    parties = {n: PartySpec(n, n.split("-")[0], f"mem://{n}") for n in everyone}
    job = JobConfig(
        session=uuid.uuid4().hex,
        parties=parties,
        key_bits=512,
        allow_weak_keys=True,
        timeout_seconds=20,
        data=DataConfig(psi="ecdh"),
    )
    if exposure is not None:  # Poisson without label bounds: no label DP (ε = inf)
        model = ModelConfig(kind="poisson", exposure=exposure)
        job = replace(job, model=model, label_dp=LabelDPConfig(epsilon=math.inf))
    ids = [f"new-{i}" for i in range(40)]
    models, tables = {}, {}
    widths = {"host": 3, "guest-1": 2, "guest-2": 4}
    for name, width in [(n, widths[n]) for n in everyone if n != "server"]:
        names = tuple(f"{name}-{j}" for j in range(width))
        models[name] = Model(
            features=names,
            weights=rng.normal(size=width),
            mean=rng.normal(size=width),
            scale=rng.uniform(0.5, 2, size=width),
            bias=0.3 if name == "host" else None,
        )
        order = rng.permutation(len(ids))
        tables[name] = IdTable(
            ids=tuple(ids[i] for i in order), x=rng.normal(size=(len(ids), width))[order],
            feature_names=names,
        )  # fmt: skip
    return job, models, tables


def z_of(model: Model, table: IdTable, ids: list[str]) -> np.ndarray:
    where = {i: k for k, i in enumerate(table.ids)}
    x = table.x[[where[i] for i in ids]]
    return np.asarray(((x - model.mean) / model.scale) @ model.weights)


def predict_all(
    job: JobConfig, models: dict[str, Model], tables: dict[str, IdTable], out: Path
) -> InMemoryHub:
    """Every party of ``job`` in its own thread over one hub; the Host writes ``out``."""
    hub = InMemoryHub()
    transports = {n: hub.transport(n) for n in job.parties}
    results = run_parties(
        job.parties,
        lambda name: predict_party(
            job,
            name,
            out if name == "host" else out.parent / name / "p.csv",
            model=models.get(name),
            table=tables.get(name),
            by_id=True,
            transport=transports[name],
        ),
        join=60,
    )
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    return hub


def test_the_host_gets_the_joint_scores_through_one_masked_sum(tmp_path: Path) -> None:
    job, models, tables = setup(np.random.default_rng(5))
    out = tmp_path / "host" / "predictions.csv"

    hub = predict_all(job, models, tables, out)

    got = pd.read_csv(out)
    ids = got["id"].tolist()
    parts = {n: z_of(models[n], tables[n], ids) for n in models}
    expected = sigmoid(parts["host"] + 0.3 + parts["guest-1"] + parts["guest-2"])
    np.testing.assert_allclose(got["probability"], expected, atol=2e-6)
    assert (got["label"] == (expected >= 0.5)).all()

    traffic = [(s.sender, s.receiver, *codec.decode(s.frames)) for s in hub.sent]
    to_host = [(sender, body) for sender, receiver, _, body in traffic if receiver == "host"]
    (n,) = {body.n for _, _, _, body in traffic if isinstance(body, PublicKeyMessage)}
    decrypted = [body for _, body in to_host if isinstance(body, Decrypted)]
    # One decryption for the Host, of the summed scores only — masked, so the Server
    # saw noise, and never of one guest's scores alone.
    assert len(decrypted) == 1 and len(decrypted[0].values) == packed_length(len(ids), n)
    one, two = (pack_plain(encode(parts[g], VALUE_BITS, n), n) for g in ("guest-1", "guest-2"))
    total = [a + b for a, b in zip(one, two, strict=True)]  # the packed sum the Server would see
    assert not set(decrypted[0].values.values) & (set(total) | set(one))
    kinds = {header.kind for _, receiver, header, _ in traffic if receiver == "host"}
    assert kinds <= {
        Kind.HELLO, Kind.PUBLIC_KEY, Kind.PSI_HELLO, Kind.PSI_ANSWER, Kind.SCORES, Kind.DECRYPTED,
        Kind.AUDIT_HEAD,  # the peers' audit-chain heads: a line count and a hash
    }  # fmt: skip


@pytest.mark.parametrize("exposed", [False, True], ids=["rate only", "with exposure"])
def test_poisson_writes_rates_and_with_exposure_expected_counts(
    tmp_path: Path, exposed: bool
) -> None:
    # Prepare: a Poisson job (one guest); with an exposure column, the Host's own exposures.
    rng = np.random.default_rng(11)
    job, models, tables = setup(rng, POISSON, "exposure" if exposed else "")
    exposure = rng.uniform(0.5, 3.0, size=len(tables["host"].ids))
    if exposed:
        tables["host"] = replace(tables["host"], exposure=exposure)
    out = tmp_path / "host" / "predictions.csv"

    # Act
    hub = predict_all(job, models, tables, out)

    # Assert: the rate per unit exposure, then (with exposures) the expected count.
    got = pd.read_csv(out)
    ids = got["id"].tolist()
    rate = np.exp(sum(z_of(models[n], tables[n], ids) for n in models) + 0.3)
    np.testing.assert_allclose(got["rate"], rate, rtol=1e-5, atol=2e-6)
    if not exposed:
        assert got.columns.tolist() == ["id", "rate"]
        return
    assert got.columns.tolist() == ["id", "rate", "prediction"]
    where = {i: k for k, i in enumerate(tables["host"].ids)}
    counts = rate * exposure[[where[i] for i in ids]]
    np.testing.assert_allclose(got["prediction"], counts, rtol=1e-5, atol=2e-6)
    # No exposure (or its log, the training offset) is in any frame the Host sent.
    sent = b"".join(f for s in hub.sent if s.sender == "host" for f in s.frames)
    values = [*exposure, *np.log(exposure)]
    assert not [v for v in values if np.float64(v).tobytes() in sent]


def prediction_file(tmp_path: Path, exposure: list[str] | None) -> Path:
    path = tmp_path / "new.csv"
    rows = [["host-0", "host-1", "host-2"], *[["0.1", "0.2", "0.3"]] * len(exposure or [1])]
    if exposure is not None:
        rows = [[*row, e] for row, e in zip(rows, ["exposure", *exposure], strict=True)]
    path.write_text("\n".join(",".join(row) for row in rows) + "\n")
    return path


@pytest.mark.parametrize(
    ("exposure", "error"),
    [
        (None, "has no exposure column 'exposure'"),
        (["1.5", "0"], "every exposure in column 'exposure' must be a positive number"),
        (["1.5", ""], "every exposure in column 'exposure' must be a positive number"),
    ],
    ids=["missing", "zero", "empty"],
)
def test_a_named_exposure_column_must_be_in_the_hosts_file_and_positive(
    tmp_path: Path, exposure: list[str] | None, error: str
) -> None:
    job, models, _ = setup(np.random.default_rng(1), POISSON, "exposure")
    with pytest.raises(ConfigError, match=error):
        prediction_rows(job, "host", models["host"], prediction_file(tmp_path, exposure), None)


def test_exposure_is_read_only_when_the_job_names_it_and_only_by_the_host(tmp_path: Path) -> None:
    named, models, _ = setup(np.random.default_rng(1), POISSON, "exposure")
    unnamed = replace(named, model=ModelConfig(kind="poisson"))
    path = prediction_file(tmp_path, ["2.0", "0.5"])

    table, by_id = prediction_rows(named, "host", models["host"], path, None)
    plain, _ = prediction_rows(unnamed, "host", models["host"], path, None)

    assert table.exposure is not None and table.exposure.tolist() == [2.0, 0.5] and not by_id
    assert plain.exposure is None
    assert exposure_column_of(named, "guest-1") is None
    assert plain.x.tolist() == table.x.tolist() == [[0.1, 0.2, 0.3]] * 2


def test_a_guest_sending_scores_for_other_rows_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: guest-2 packs one ciphertext short (another row count, or a stale model).
    honest = predict_module.guest_scores

    def short(ctx: Any, z: np.ndarray, digest: str = "") -> dict[str, Any]:
        if ctx.name != "guest-2":
            return honest(ctx, z, digest)
        job = ctx.job
        announce(ctx, "guest", len(z), 0, [job.server, job.host], digest)
        key = receive_public_key(ctx)
        request = ctx.channel.expect_body(ScoreRequest, {job.host})
        plain = pack_plain(encode(np.ravel(z), VALUE_BITS, key.n), key.n)[:-1]
        scores = Scores(request.epoch, request.split, fresh.encrypt(key, plain))
        ctx.channel.send(job.host, scores)
        ctx.channel.expect_body(Finish, {job.host})
        return {}

    monkeypatch.setattr(predict_module, "guest_scores", short)
    job, models, tables = setup(np.random.default_rng(7))
    hub = InMemoryHub()
    transports = {n: hub.transport(n) for n in job.parties}

    # Act
    results = run_parties(
        job.parties,
        lambda name: predict_party(
            job, name, tmp_path / name / "p.csv", model=models.get(name),
            table=tables.get(name), by_id=True, transport=transports[name],
        ),
        join=60,
    )  # fmt: skip

    # Assert: the Host stops with one line naming guest-2; no file of predictions.
    error = results["host"]
    assert isinstance(error, ProtocolError), error
    assert str(error).startswith("guest-2 sent ") and "\n" not in str(error)
    assert not (tmp_path / "host" / "p.csv").exists()
