"""Centralised references for a local demo run: what one place holding every column gets.

No real party holds every column, so only a harness that runs every party on the
bundled table (``privfl vfl run-local``) can fit these. They go into ``summary.json``
(``references``: name, metric, value, note) and onto the Host's training plot.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from privfl.config.vertical import JobConfig
from privfl.models.registry import kind_of
from privfl.parties.files import write_json

NOTE = "every column pooled at one place, true labels (no label DP), the run's split"


def demo_references(job: JobConfig) -> list[dict[str, Any]]:
    """The references of a run on the bundled table; none when a party reads its own CSV."""
    if not all(p.columns and not p.data for p in job.parties.values() if p.role != "server"):
        return []
    kind = kind_of(job)
    references: list[dict[str, Any]] = kind.load(kind.references)(job)
    return references


def glm_references(job: JobConfig) -> list[dict[str, Any]]:
    """The registry's references of a GLM kind (models/registry.py): one sklearn model."""
    return [glm_reference(job)]


def glm_reference(job: JobConfig) -> dict[str, Any]:
    """The sklearn model a GLM's objective names, scored by the run's headline metric.

    The logistic demo on breast cancer keeps sklearn's default C (docs/guide.md's 0.958);
    the other GLMs take the job's λ, as ``privfl experiment vfl-models`` does.
    """
    from privfl.data.views import central_baseline
    from privfl.learning.references import pooled, sklearn_reference

    kind, dataset = kind_of(job), job.data.dataset
    metric = kind.headline
    if kind.label_type == "binary" and dataset == "breast_cancer":
        value = central_baseline(dataset, job.data.test_size, job.data.split_seed)
    else:
        value = float(sklearn_reference(kind.name, pooled(dataset, job), job.training.l2)[metric])
    name = f"sklearn {kind.reference}"
    return {"name": name, "metric": metric, "value": value, "note": NOTE}


def booster_references(job: JobConfig) -> list[dict[str, Any]]:
    """Held-out AUC of sklearn's HistGradientBoosting and, when importable, xgboost (hist),
    with the run's booster settings (``privfl experiment vfl-models``'s references)."""
    from privfl.learning.references import centralised_boosters, pooled
    from privfl.parties.vertical.secureboost.common import params_of

    data = pooled(job.data.dataset, job)
    assert data.y_train is not None and data.y_test is not None
    aucs = centralised_boosters(
        params_of(job), (data.x_train, data.y_train, data.x_test, data.y_test)
    )
    out = [
        {
            "name": "sklearn HistGradientBoosting",
            "metric": "auc",
            "value": aucs["sklearn"],
            "note": NOTE,
        }
    ]
    if not math.isnan(aucs["xgboost"]):
        name = f"xgboost {aucs['xgboost_version']} (hist)"
        out.append({"name": name, "metric": "auc", "value": aucs["xgboost"], "note": NOTE})
    return out


def record(
    job: JobConfig,
    out: Path,
    summary: dict[str, Any],
    references: list[dict[str, Any]],
    started: float,
) -> None:
    """Redraw the Host's plot with ``references``, then write OUT/summary.json again with
    them and ``wall_seconds`` counted from ``started`` (the command's process start) to now.
    """
    if references:
        summary["references"] = references
        redraw(job, out / job.host, references)
    summary["wall_seconds"] = round(time.time() - started, 3)
    write_json(out / "summary.json", summary)


def redraw(job: JobConfig, host: Path, references: list[dict[str, Any]]) -> None:
    """The Host's training.png from its metrics.jsonl, with the references drawn."""
    lines = (host / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    kind = kind_of(job)
    kind.load(kind.plot)(job, records, host / "training.png", references)
