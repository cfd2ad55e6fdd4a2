"""Federated prediction over the in-memory hub: right scores, and the Host sees only the sum."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privfl.config.vertical import DataConfig, JobConfig, PartySpec
from privfl.crypto.encoding import VALUE_BITS, encode
from privfl.crypto.packing import pack_plain, packed_length
from privfl.data.tables import IdTable
from privfl.learning.taylor import sigmoid
from privfl.parties.vertical.predict import Model, predict_party
from privfl.protocol import codec
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Decrypted, Kind, PublicKeyMessage

NAMES = ["server", "host", "guest-1", "guest-2"]


def setup(rng: np.random.Generator) -> tuple[JobConfig, dict[str, Model], dict[str, IdTable]]:
    parties = {n: PartySpec(n, n.split("-")[0], f"mem://{n}") for n in NAMES}
    job = JobConfig(
        session=uuid.uuid4().hex,
        parties=parties,
        key_bits=512,
        allow_weak_keys=True,
        timeout_seconds=20,
        data=DataConfig(psi="ecdh"),
    )
    ids = [f"new-{i}" for i in range(40)]
    models, tables = {}, {}
    for name, width in [("host", 3), ("guest-1", 2), ("guest-2", 4)]:
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


def test_the_host_gets_the_joint_scores_through_one_masked_sum(tmp_path: Path) -> None:
    job, models, tables = setup(np.random.default_rng(5))
    hub = InMemoryHub()
    transports = {n: hub.transport(n) for n in NAMES}
    results: dict[str, Any] = {}
    out = tmp_path / "host" / "predictions.csv"

    def party(name: str) -> None:
        try:
            results[name] = predict_party(
                job, name, out if name == "host" else tmp_path / name / "p.csv",
                model=models.get(name), table=tables.get(name), by_id=True,
                transport=transports[name],
            )  # fmt: skip
        except Exception as exc:
            results[name] = exc

    threads = [threading.Thread(target=party, args=(n,), daemon=True) for n in NAMES]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert not [r for r in results.values() if isinstance(r, Exception)], results
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
    }  # fmt: skip
