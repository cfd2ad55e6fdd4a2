"""Private set intersection: the maths, and the stage between a Host and two guests."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from privfl.config import DataConfig, JobConfig, PartySpec
from privfl.data.tables import IdTable
from privfl.parties.channel import Channel
from privfl.parties.common import PartyContext
from privfl.protocol import codec
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import PsiAnswer, PsiQuery
from privfl.psi import ecdh, rsa
from privfl.psi.stage import align


def test_rsa_blind_signature_tags_equal_direct_tags() -> None:
    signer = rsa.generate(1024)
    ids = ["a", "b", "c"]
    hashes = rsa.full_domain_hash(ids, signer.public.n, b"ctx")

    blinded, factors = rsa.blind(hashes, signer.public)
    via_blinding = rsa.tags(
        rsa.unblind(signer.sign(blinded), factors, signer.public), signer.public.n
    )

    assert via_blinding == rsa.tags(signer.sign(hashes), signer.public.n)
    assert blinded != hashes  # the signer never sees the hashes themselves
    assert all(
        pow(s, signer.public.e, signer.public.n) == h
        for s, h in zip(signer.sign(hashes), hashes, strict=True)
    )


def test_x25519_exponentiation_commutes_and_depends_on_the_key() -> None:
    a, b = ecdh.new_secret(), ecdh.new_secret()
    u = ecdh.hash_to_u([f"id{i}" for i in range(20)], b"ctx")

    ab = ecdh.multiply(a, ecdh.multiply(b, u))

    assert ab == ecdh.multiply(b, ecdh.multiply(a, u))
    assert ab != ecdh.multiply(a, ecdh.multiply(a, u))


def job_of(guests: int, method: str) -> JobConfig:
    names = ["server", "host", *[f"guest-{i + 1}" for i in range(guests)]]
    parties = {n: PartySpec(n, n.split("-")[0], f"mem://{n}") for n in names}
    return JobConfig(
        session=uuid.uuid4().hex,
        parties=parties,
        key_bits=512,
        allow_weak_keys=True,
        timeout_seconds=20,
        data=DataConfig(psi=method, psi_key_bits=1024),
    )


def tables(guests: int, seed: int = 1) -> tuple[dict[str, IdTable], set[str]]:
    """Each site holds 80 of 100 ids (its own 20 missing), shuffled; features encode the id."""
    rng = np.random.default_rng(seed)
    universe = [f"patient-{i:03d}" for i in range(100)]
    sites = ["host", *[f"guest-{i + 1}" for i in range(guests)]]
    out, held = {}, []
    for k, site in enumerate(sites):
        ids = [u for j, u in enumerate(universe) if not 20 * k <= j < 20 * (k + 1)]
        ids = [ids[i] for i in rng.permutation(len(ids))]
        x = np.array([[float(i.split("-")[1])] for i in ids])
        out[site] = IdTable(ids=tuple(ids), x=x, feature_names=(f"{site}-x",))
        held.append(set(ids))
    return out, set.intersection(*held)


def run_stage(job: JobConfig, sites: dict[str, IdTable], hub: InMemoryHub) -> dict[str, Any]:
    transports = {n: hub.transport(n) for n in sites}
    results: dict[str, Any] = {}

    def party(name: str) -> None:
        channel = Channel(transports[name], session=job.session, timeout=job.timeout_seconds)
        ctx = PartyContext(name=name, job=job, channel=channel, out=Path("."))
        try:
            results[name] = align(ctx, sites[name])
        except Exception as exc:
            results[name] = exc

    threads = [threading.Thread(target=party, args=(n,), daemon=True) for n in sites]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


@pytest.mark.parametrize(("method", "guests"), [("rsa", 1), ("rsa", 2), ("ecdh", 2)])
def test_every_party_gets_the_same_shared_rows_in_the_same_order(method: str, guests: int) -> None:
    job = job_of(guests, method)
    sites, shared = tables(guests)
    hub = InMemoryHub()

    results = run_stage(job, sites, hub)

    assert all(isinstance(r, IdTable) for r in results.values()), results
    host_ids = results["host"].ids
    assert set(host_ids) == shared and len(host_ids) == len(shared)
    for site, table in results.items():
        assert table.ids == host_ids, site
        # the features moved with their ids
        assert [float(i.split("-")[1]) for i in table.ids] == table.x[:, 0].tolist()
    # no id string crossed the wire; the messages are hashes, blinded values and positions
    wire = b"".join(b"".join(s.frames) for s in hub.sent)
    assert b"patient" not in wire


def test_the_host_query_is_blinded_and_guest_tags_are_shuffled() -> None:
    job = job_of(1, "rsa")
    sites, _ = tables(1)
    hub = InMemoryHub()

    run_stage(job, sites, hub)

    bodies = [codec.decode(s.frames)[1] for s in hub.sent]
    query = next(b for b in bodies if isinstance(b, PsiQuery))
    answer = next(b for b in bodies if isinstance(b, PsiAnswer))
    assert len(query.values) == len(sites["host"].ids)
    assert len(answer.tags) == len(sites["guest-1"].ids)
    # blinded values are spread over Z_N, not clustered like hashes of similar ids would be
    assert len(set(query.values.values)) == len(query.values)


def test_no_shared_id_is_a_clear_error() -> None:
    job = job_of(1, "ecdh")
    sites = {
        "host": IdTable(ids=("a", "b"), x=np.zeros((2, 1)), feature_names=("x",)),
        "guest-1": IdTable(ids=("c", "d"), x=np.zeros((2, 1)), feature_names=("x",)),
    }
    results = run_stage(job, sites, InMemoryHub())
    assert all("share no id" in str(r) for r in results.values()), results
