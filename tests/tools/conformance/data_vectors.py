"""Vectors of the job fingerprint, the splits and the row commitment (shipped in the package).

``python tests/tools/conformance/data_vectors.py`` rewrites ``job-example.json`` and
``rows.json`` in ``privfl/tools/conformance/vectors/``; test_data_vectors.py checks that our
code still gives exactly these values. Regenerate only for a deliberate change (a
new protocol version).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from privfl.config.core import encode_sections
from privfl.config.vertical import canonical_job, load_job
from privfl.data.alignment import row_commitment
from privfl.data.tables import held_out_mask
from privfl.data.views import demo_columns, demo_table, split_view
from privfl.tools.conformance.vectors import DIR

IDS = ["1", "2", "10", "alice@example.org", "ÄÖÜ-42", "7", "0000123", "x" * 40]
SPLITS = [(0.25, 0), (0.25, 1), (0.5, 12345)]
SESSION = "conformance-example"


def job_vector() -> dict[str, Any]:
    """The example job file's canonical bytes, fingerprint and Hello's section digests."""
    job = load_job(DIR / "job-example.toml")
    return {
        "file": "job-example.toml",
        "canonical": canonical_job(job).decode("utf-8"),
        "fingerprint": job.fingerprint(),
        "job_sections": encode_sections(job.sections()),
    }


def rows_vector() -> dict[str, Any]:
    """The id-keyed split of a few ids, the demo split, and row commitments."""
    import hashlib
    import hmac

    id_split = []
    for test_size, seed in SPLITS:
        key = f"privfl-split-{seed}".encode()
        mask = held_out_mask(IDS, test_size, seed)
        cases = []
        for identifier, held in zip(IDS, mask, strict=True):
            mac = hmac.new(key, identifier.encode(), hashlib.sha256).digest()
            first = mac[:8].hex()
            cases.append({"id": identifier, "hmac_first_8_bytes": first, "test": bool(held)})
        id_split.append({"test_size": test_size, "split_seed": seed, "cases": cases})
    table = demo_table("breast_cancer", demo_columns(1)["host"], with_labels=True)
    demo = split_view(table, 0.25, 0)
    return {
        "id_split": id_split,
        "demo_split": {
            "dataset": "breast_cancer",
            "rows": int(table.x.shape[0]),
            "test_size": 0.25,
            "split_seed": 0,
            "train": [int(i) for i in demo.train_ids],
            "test": [int(i) for i in demo.test_ids],
        },
        "commitments": [
            {
                "session": SESSION,
                "train_ids": ["b", "a", "c"],
                "test_ids": ["d"],
                "rows_digest": row_commitment(SESSION, ["b", "a", "c"], ["d"]),
            },
            {
                "session": "s",
                "train_ids": [],
                "test_ids": [],
                "rows_digest": row_commitment("s", [], []),
            },
            {
                "session": SESSION,
                "train_ids": [str(int(i)) for i in demo.train_ids],  # positions, as text
                "test_ids": [str(int(i)) for i in demo.test_ids],
                "rows_digest": row_commitment(SESSION, demo.train_ids, demo.test_ids),
            },
        ],
    }


def write() -> None:
    for name, data in (("job-example.json", job_vector()), ("rows.json", rows_vector())):
        text = json.dumps(data, indent=1, ensure_ascii=False)
        (DIR / name).write_text(text + "\n", encoding="utf-8")
        print(f"wrote {DIR / name}", file=sys.stderr)


if __name__ == "__main__":
    write()
