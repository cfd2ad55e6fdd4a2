"""Private set intersection: the maths, and the stage between a Host and two guests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from psi_harness import id_table, job_of, run_stage, send_as, tables

from privfl.config.vertical import from_dict, to_dict
from privfl.crypto import psi_ecdh as ecdh
from privfl.crypto import psi_rsa as rsa
from privfl.data.tables import IdTable
from privfl.errors import ConfigError, ProtocolError
from privfl.protocol import codec
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import PsiAnswer, PsiHello, PsiQuery


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


def test_rsa_keys_have_a_prime_exponent_larger_than_the_modulus() -> None:
    signer = rsa.generate(1024)
    n, e = signer.public.n, signer.public.e

    assert n.bit_length() == 1024 and e.bit_length() == 1025 and e > n
    rsa.check_public(signer.public, 1024)  # the blinder accepts it
    assert rsa.tags(signer.sign(rsa.full_domain_hash(["x"], n, b"c")), n) != rsa.tags(
        rsa.full_domain_hash(["x"], n, b"c"), n
    )


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda n, e: (n, 65537), "prime larger than N"),  # the old exponent
        (lambda n, e: (n, 3 * e), "not prime"),
        (lambda n, e: (n, n - 2), "prime larger than N"),
        (lambda n, e: (n, (1 << 1200) + 1), "prime larger than N"),  # too costly to blind
        (lambda n, e: (n * 3, e), "bits"),
        (lambda n, e: (3 * (n // 3 | 1), e), "small prime factor"),
    ],
)
def test_a_key_that_may_not_permute_z_n_is_refused(change: Any, why: str) -> None:
    signer = rsa.generate(1024)
    n, e = change(signer.public.n, signer.public.e)

    with pytest.raises(ProtocolError, match=why):
        rsa.check_public(rsa.RsaPublic(n, e), 1024)


def test_ristretto_exponentiation_commutes_and_depends_on_the_key() -> None:
    a, b = ecdh.new_secret(), ecdh.new_secret()
    points = ecdh.hash_to_group([f"id{i}" for i in range(20)], b"ctx")

    ab = ecdh.multiply(a, ecdh.multiply(b, points))

    assert ab == ecdh.multiply(b, ecdh.multiply(a, points))
    assert ab != ecdh.multiply(a, ecdh.multiply(a, points))
    assert len(set(points)) == 20 and all(ecdh.is_element(p) for p in ab)


@pytest.mark.parametrize("value", [0, 1, 2**255 + 5, 2**256, 2**256 - 1])
def test_a_value_outside_the_group_is_refused(value: int) -> None:
    with pytest.raises(ProtocolError, match="not a ristretto255 group element"):
        ecdh.multiply(ecdh.new_secret(), [value])


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


def test_caps_are_in_the_job_file_and_checked() -> None:
    job = job_of(1, "ecdh", caps={"host": 50, "guest-1": 70})

    again = from_dict(to_dict(job))

    assert again.party("host").max_ids == 50 and again.party("guest-1").max_ids == 70
    assert "max_ids" not in to_dict(job)["parties"]["server"]
    bad = to_dict(job)
    bad["parties"]["host"]["max_ids"] = 0
    with pytest.raises(ConfigError, match="max_ids"):
        from_dict(bad)


@pytest.mark.parametrize("method", ["ecdh", "rsa"])
def test_a_site_over_its_own_cap_refuses_before_sending(method: str) -> None:
    job = job_of(1, method, caps={"guest-1": 79}, timeout=1)
    sites, _ = tables(1)  # every site holds 80 ids
    hub = InMemoryHub()

    results = run_stage(job, sites, hub)

    assert isinstance(results["guest-1"], ConfigError)
    assert "more than its max_ids of 79" in str(results["guest-1"])
    assert not [s for s in hub.sent if s.sender == "guest-1"]  # nothing left the guest


def test_caps_that_fit_change_nothing() -> None:
    job = job_of(2, "ecdh", caps={"host": 80, "guest-1": 80, "guest-2": 80})
    sites, shared = tables(2)

    results = run_stage(job, sites, InMemoryHub())

    assert set(results["host"].ids) == shared


def test_the_host_refuses_a_hello_over_the_guests_cap_before_any_query() -> None:
    job = job_of(2, "ecdh", caps={"guest-2": 10})
    hub = InMemoryHub()

    def guests() -> None:
        send_as(job, hub, "guest-1", PsiHello("ecdh", 0, 0, 5))
        send_as(job, hub, "guest-2", PsiHello("ecdh", 0, 0, 11))

    results = run_stage(job, {"host": id_table(["a", "b"])}, hub, guests)

    assert isinstance(results["host"], ProtocolError)
    assert "guest-2 announces 11 ids, more than its max_ids of 10" in str(results["host"])
    assert not [s for s in hub.sent if s.sender == "host"]  # not even guest-1 got a query
