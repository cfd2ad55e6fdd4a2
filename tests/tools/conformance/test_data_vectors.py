"""The shipped vectors of the job fingerprint, the splits and the row commitment hold.

They are what another implementation checks itself against (docs/protocol.md §2),
so our code must still produce exactly them; each is also recomputed here from its
definition in the spec, not only through our functions.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import struct
from dataclasses import replace

import pytest
import rfc8785
from data_vectors import job_vector, rows_vector

from privfl.config.vertical import LabelDPConfig, canonical_job, load_job
from privfl.tools.conformance.vectors import DIR, load

JOB = load("job-example.json")
ROWS = load("rows.json")


def test_the_example_job_has_the_shipped_canonical_form_and_fingerprint() -> None:
    # Act
    job = load_job(DIR / JOB["file"])

    # Assert
    assert canonical_job(job).decode("utf-8") == JOB["canonical"]
    assert job.fingerprint() == JOB["fingerprint"]
    assert hashlib.sha256(JOB["canonical"].encode("utf-8")).hexdigest() == JOB["fingerprint"]
    assert job_vector() == JOB


def test_the_section_digests_follow_their_definition() -> None:
    """Each is sha256 of the canonical {key: value} (a party: {"parties": {name: …}}), 16 hex."""
    # Prepare
    data = json.loads(JOB["canonical"])
    sections = {key: {key: value} for key, value in data.items() if key != "parties"}
    for name, table in data["parties"].items():
        sections[f"parties.{name}"] = {"parties": {name: table}}

    # Act
    expected = ",".join(
        f"{name}={hashlib.sha256(rfc8785.dumps(part)).hexdigest()[:16]}"
        for name, part in sorted(sections.items())
    )

    # Assert
    assert JOB["job_sections"] == expected


def test_the_canonical_form_is_sorted_compact_json_without_local_keys() -> None:
    # Act
    canonical = JOB["canonical"]
    data = json.loads(canonical)

    # Assert: keys sorted at every level, no whitespace, numbers in ECMAScript form
    def sorted_keys(value: object) -> bool:
        if not isinstance(value, dict):
            return True
        return list(value) == sorted(value) and all(map(sorted_keys, value.values()))

    assert sorted_keys(data) and " " not in canonical
    assert data["label_dp"]["epsilon"] == "inf"
    assert '"learning_rate":1,' in canonical and '"tolerance":0.000001}' in canonical
    assert set(data["parties"]["host"]) == {
        "role",
        "endpoint",
        "columns",
        "max_ids",
        "feature_count",
    }
    assert set(data["parties"]["server"]) == {"role", "endpoint", "columns"}
    assert not {"timeout_seconds", "liveness_grace_seconds", "max_buffered_mib"} & set(data)


def test_an_integer_written_for_a_float_does_not_change_the_fingerprint() -> None:
    # Prepare
    job = load_job(DIR / JOB["file"])
    as_float = replace(job, training=replace(job.training, learning_rate=1.0, epochs=20))

    # Act / assert
    assert as_float.fingerprint() == job.fingerprint()
    finite = replace(job, label_dp=LabelDPConfig(epsilon=8.0))
    assert finite.fingerprint() != job.fingerprint()


@pytest.mark.parametrize("split", ROWS["id_split"], ids=lambda s: f"{s['split_seed']}")
def test_the_id_keyed_split_follows_its_definition(split: dict) -> None:
    # Act / assert: HMAC-SHA256(key = "privfl-split-<seed>", id), first 8 bytes / 2^64
    key = f"privfl-split-{split['split_seed']}".encode()
    for case in split["cases"]:
        mac = hmac.new(key, case["id"].encode("utf-8"), hashlib.sha256).digest()
        draw = int.from_bytes(mac[:8], "big") / 2.0**64
        assert mac[:8].hex() == case["hmac_first_8_bytes"]
        assert (draw < split["test_size"]) is case["test"]


def test_the_shipped_row_vectors_are_what_our_code_computes() -> None:
    # Act / assert (the demo split, the id-keyed split and the commitments)
    assert rows_vector() == ROWS
    demo = ROWS["demo_split"]
    assert len(demo["train"]) == 426 and len(demo["test"]) == 143
    assert sorted(demo["train"] + demo["test"]) == list(range(demo["rows"]))


def test_the_row_commitment_follows_its_definition() -> None:
    # Prepare
    vector = ROWS["commitments"][0]

    # Act: sha256 of the domain, the session and both lists, length-prefixed
    def strings(values: list[str]) -> bytes:
        out = struct.pack(">Q", len(values))
        for value in values:
            raw = value.encode("utf-8")
            out += struct.pack(">I", len(raw)) + raw
        return out

    session = vector["session"].encode("utf-8")
    message = b"privfl-rows-v1\x00" + struct.pack(">I", len(session)) + session
    message += strings(vector["train_ids"]) + strings(vector["test_ids"])

    # Assert
    assert hashlib.sha256(message).hexdigest() == vector["rows_digest"]
    assert not math.isnan(len(vector["rows_digest"]))
