"""Golden vectors shipped with privfl for other implementations (docs/protocol.md §10).

``golden.json``: every message kind's frames and the link layer; ``job-example.toml`` and
``job-example.json``: a job file, its canonical encoding and fingerprint (§2.1);
``rows.json``: the id-keyed split, the demo split and row commitments (§2.2, §2.3);
``spec.json``: a job per model kind (§2.1), RSA-PSI tags (§6.5) and batch plans (§6.2).
``boost.json``: SecureBoost's column sample, bin edges and thresholds, packed histogram
slots (§6.9).
``hidden.json``: one level of SecureBoost's hidden instance space, lanes and plaintexts (§6.9).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DIR = Path(__file__).parent


def load(name: str) -> Any:
    """One JSON vector file of this folder, parsed."""
    return json.loads((DIR / name).read_text(encoding="utf-8"))
