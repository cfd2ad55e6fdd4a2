"""What one run spends of a site's privacy, known from the job alone (before any data).

Vertical: the label ε protects the Host's labels only; the Host books it. A Guest's
features and the Server's key never leave as a DP release (encryption protects them),
so those sites book the run with ε 0. Horizontal: a client host books the job's
``epsilon_budget`` (the aggregator stops before the worst client's total passes it);
the aggregator and the Shuffler hold no client rows and book ε 0.
"""

from __future__ import annotations

import math

from privfl.config.horizontal import PURE_LDP, HflJob
from privfl.config.vertical import REGRESSION_KINDS, JobConfig
from privfl.runs.site_ledger import Spend

LABEL_MECHANISM = {
    "logistic": "randomized response",
    "secureboost": "randomized response",
    "multiclass": "k-ary randomized response",
}
NO_RELEASE = "this site's records leave in no DP release in this job (encrypted only)"


def vertical_spend(job: JobConfig, role: str) -> Spend:
    """The label ε for the Host; ε 0 for a Guest or the Server."""
    if role != "host":
        return Spend(0.0, 0.0, "none", NO_RELEASE, "the label ε protects the Host's labels")
    kind = job.model.kind
    mechanism = (
        "Laplace on labels clipped to [label_low, label_high]"
        if kind in REGRESSION_KINDS
        else LABEL_MECHANISM[kind]
    )
    return Spend(
        job.label_dp.epsilon,
        0.0,
        "label DP",
        f"ε-label-DP per label of this site (pure ε), {mechanism}",
        "one noise draw per job from this site's CSPRNG; a resumed or restarted run of the "
        "same job reuses it (--redraw-labels draws and books again); ε = inf: no label DP",
    )


def hfl_spend(job: HflJob, role: str) -> Spend:
    """The job's per-client run budget for a client host; ε 0 for the aggregator, Shuffler."""
    cfg = job.config
    if role != "clients":
        return Spend(0.0, 0.0, "none", "this site holds no client rows", "")
    if cfg.mechanism in PURE_LDP:
        kind = "LDP"
    elif cfg.mechanism.startswith("gaussian"):
        kind = "DP (zCDP, per client's reports)"
    else:
        kind = "none"
    # the run's total is (ε, δ): advanced composition or zCDP conversion at the job's δ
    delta = cfg.delta if math.isfinite(cfg.epsilon_budget) else 0.0
    return Spend(
        cfg.epsilon_budget,
        delta,
        kind,
        f"per client over the run, worst client, at δ = {cfg.delta:g} (the job's epsilon_budget)",
        "an upper bound: the aggregator stops before the worst client's total passes "
        "epsilon_budget (its ledger, docs/security.md); sample-level ε of local DP-SGD is "
        "not booked",
    )
