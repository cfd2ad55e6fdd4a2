"""What ``privfl site budget`` reports: each project's budget, spent and left ε, runs, refusals.

One function for every reader of the ledger (the command line, ``privfl board``), so the
numbers, their units (ε per project at this site, basic composition over its runs) and
the spelling of an unlimited budget (``"inf"``) are the same wherever they are shown.
"""

from __future__ import annotations

import math
from typing import Any

from privfl.config.policy import SitePolicy
from privfl.runs.site_ledger import read_document, spent


def site_report(policy: SitePolicy) -> dict[str, Any]:
    """The ledger of ``policy`` as ``privfl site budget --json`` prints it."""
    document = read_document(policy.ledger_path())
    return {**budget_report(policy, document["runs"]), "refused": document["refused"]}


def budget_report(policy: SitePolicy, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Budget, spent and left per project (every approved one, every booked one), and runs."""
    names = sorted(set(policy.projects) | {r["project"] for r in runs})
    projects = {}
    for name in names:
        cap = policy.projects[name].max_epsilon if name in policy.projects else math.inf
        used = spent(runs, name)
        projects[name] = {
            "max_epsilon": _text(cap),
            "spent": _text(used),
            "left": _text(cap - used if math.isfinite(cap) else math.inf),
            "runs": sum(r["project"] == name for r in runs),
        }
    return {"ledger": str(policy.ledger_path()), "projects": projects, "runs": runs}


def _text(value: float) -> float | str:
    return value if math.isfinite(value) else "inf"
