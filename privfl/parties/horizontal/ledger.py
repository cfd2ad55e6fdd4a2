"""The privacy ledger (docs/security.md): ε per weight, per report and per client over the run.

One release = one client's report in one round. The ledger counts, per client, the
rounds it was asked in and the reports it actually released, and every total is
the worst client's. Pure-LDP mechanisms compose over the d coordinates of a report
by basic composition (PNPM/Duchi/PM spend ε on *every* weight); the top-k ones split
ε over k. Gaussian reports are discrete Gaussians accounted in zCDP (ρ adds up).

Amplification by subsampling is claimed only where it is earned: the client's own
CSPRNG coin (β) *and* a Shuffler that hides who reported. The aggregator's K-of-N
sample comes from the public job seed and amplifies nothing. Every figure carries
its unit and the assumption it rests on (``epsilon_assumptions``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from privfl.config.horizontal import PURE_LDP, HflConfig
from privfl.errors import PrivacyBudgetExceeded
from privfl.learning.local_dp import local_epsilon
from privfl.mechanisms.accountants import (
    advanced_composition,
    shuffle_amplification,
    subsampling_amplification,
    zcdp_epsilon,
)
from privfl.mechanisms.noise import PRIVATE_LABEL, SEEDED_LABEL

GAUSSIAN = ("gaussian", "gaussian-topk")
# What every shuffle-model figure rests on; the round digest lets the Shuffler check the second.
SHUFFLE_TRUST = (
    "an honest Shuffler that does not collude with the aggregator (nor, through a relay, "
    "the relay's operator, who sees how many reports each host sends the Shuffler), and an "
    "aggregator that does not tag client hosts (one round token, report key and model for "
    "all, which the Shuffler checks)"
)


def local_epsilon_source(method: str) -> str:
    """How the local ε is justified: proven for DP-SGD, the seed's claim for FSDP."""
    if method == "fsdp":
        return "the paper's own analysis (seed 002), not a verified bound"
    return "RDP accountant, proven bound"


def aggregation_line(cfg: HflConfig) -> str:
    """What the aggregation rule does to the ledger: nothing to the clients' ε (said once)."""
    rule = cfg.aggregation + (
        f" (trim {cfg.trim_fraction:g})" if cfg.aggregation == "trimmed-mean" else ""
    )
    return (
        f"aggregation {rule}: post-processing of the reports, so every ε above is unchanged; "
        "no central ε is booked for the aggregate (a median's or trimmed mean's sensitivity "
        "is not the mean's 2B/n, so NbAFL's server noise runs with the mean only)"
    )


POPULATION_NOTE = (
    "population study (client_rows): each client's rows are drawn with replacement from "
    "one data set, so a record can be several rows of a client and rows of many clients; "
    "this ε is per client or per row, not per record"
)


def _finite(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"


def compose_pure(epsilon: float, releases: int, delta: float) -> float:
    """ε of ``releases`` ε-DP releases: the smaller of basic and advanced composition (at δ)."""
    if releases == 0:
        return 0.0
    if not math.isfinite(epsilon):
        return math.inf
    return min(releases * epsilon, advanced_composition(epsilon, 0.0, releases, delta)[0])


@dataclass
class PrivacyLedger:
    """Cumulative ε of a run; ``check_next`` before a round, ``record`` after it."""

    config: HflConfig
    dims: int
    k: int
    rho: float = 0.0  # zCDP ρ of one Gaussian report
    rounds: int = 0
    asked: dict[int, int] = field(default_factory=dict)  # rounds each client was asked in
    released: dict[int, int] = field(default_factory=dict)  # reports it (may have) sent
    central_per_round: list[float] = field(default_factory=list)
    local_rows: int = 0  # smallest shard: the worst-case local sampling rate (local_dp)

    @property
    def epsilon_per_weight(self) -> float:
        cfg = self.config
        if cfg.mechanism == "none":
            return math.inf
        if cfg.mechanism in ("laplace-topk", "gaussian-topk"):
            return cfg.epsilon / self.k
        return cfg.epsilon  # pnpm/duchi/pm: the setting; gaussian: the whole vector

    @property
    def epsilon_per_client_round(self) -> float:
        """ε of one report (basic composition over its perturbed coordinates)."""
        cfg = self.config
        if cfg.mechanism == "none":
            return math.inf
        if cfg.mechanism in ("pnpm", "duchi", "pm"):
            return cfg.epsilon * self.dims
        return cfg.epsilon

    @property
    def delta_per_client_round(self) -> float:
        mech = self.config.mechanism
        return 0.0 if mech in PURE_LDP or mech == "none" else self.config.delta

    @property
    def amplified(self) -> bool:
        return self.config.secret_rate < 1 and self.config.mechanism in PURE_LDP

    def client_epsilon(self, asked: int, released: int) -> float:
        """ε of one client asked in ``asked`` rounds that released ``released`` reports (at δ)."""
        cfg, eps = self.config, self.epsilon_per_client_round
        if cfg.mechanism in GAUSSIAN:
            return zcdp_epsilon(released * self.rho, cfg.delta)
        if self.amplified:
            return compose_pure(subsampling_amplification(eps, cfg.secret_rate), asked, cfg.delta)
        return compose_pure(eps, released, cfg.delta)

    def total_epsilon(self, extra: frozenset[int] = frozenset()) -> float:
        """The worst client's ε, with one more round for the clients in ``extra``."""
        clients = set(self.asked) | set(extra)
        if not clients:
            return 0.0
        return max(
            self.client_epsilon(
                self.asked.get(c, 0) + (c in extra), self.released.get(c, 0) + (c in extra)
            )
            for c in clients
        )

    def check_next(self, selected: list[int]) -> None:
        """Raise PrivacyBudgetExceeded if asking ``selected`` once more would pass the budget."""
        budget = self.config.epsilon_budget
        if not math.isfinite(budget):
            return
        projected = self.total_epsilon(frozenset(selected))
        if projected > budget:
            raise PrivacyBudgetExceeded(
                f"round {self.rounds + 1} would raise the worst client's total ε to "
                f"{projected:.4g} > budget {budget:g}"
            )

    def central_epsilon(self, reports: int) -> float:
        """Central ε of one round's shuffled batch of ``reports`` reports (pure ε0 only)."""
        eps0 = self.epsilon_per_client_round
        if not self.config.shuffler or self.config.mechanism not in PURE_LDP:
            return eps0
        if not math.isfinite(eps0):
            return eps0
        return shuffle_amplification(eps0, max(reports, 1), self.config.delta)

    def record(self, asked: list[int], reported: list[int] | None, reports: int) -> dict[str, Any]:
        """Book one round: who was asked, who released (None: unknown, so all asked did)."""
        self.rounds += 1
        for client in asked:
            self.asked[client] = self.asked.get(client, 0) + 1
        for client in asked if reported is None else reported:
            self.released[client] = self.released.get(client, 0) + 1
        if self.config.shuffler:
            self.central_per_round.append(self.central_epsilon(reports))
        return self.snapshot()

    def assumptions(self) -> dict[str, str]:
        """Unit and assumption of every ε figure in the snapshot."""
        cfg = self.config
        noise = "noise secret from every other party" if not cfg.seeded_noise else SEEDED_LABEL
        if cfg.mechanism in GAUSSIAN:
            total = "zCDP composition of the discrete Gaussian reports the worst client released"
        elif self.amplified:
            total = (
                f"amplified by each client's own secret coin β = {cfg.secret_rate:g}, valid only "
                f"while the Shuffler hides who reported ({SHUFFLE_TRUST}); "
                "composed over the rounds the worst client was asked in"
            )
        else:
            total = (
                "no amplification (the K-of-N sample is public and the aggregator sees who "
                "reported); composed over the reports the worst client released"
            )
        out = {
            "epsilon_per_weight": f"per weight, one report; {noise}",
            "epsilon_per_client_round": f"per client per round (one report); {noise}",
            "epsilon_total": f"per client over the run, worst client, at δ = {cfg.delta:g}; "
            f"{total}; {noise}",
            "epsilon_total_unamplified": "per client over the run, worst client, no amplification",
        }
        if cfg.shuffler:
            out["epsilon_central_round"] = (
                "per round, central (shuffle model, Feldman et al.), at δ = "
                f"{cfg.delta:g}; assumes {SHUFFLE_TRUST}, one report per client and "
                "every other valid report honest"
            )
        if cfg.local_dp != "none":
            out["epsilon_local_sample_level"] = (
                f"per row of a client's data over its releases; {noise}"
            )
        if cfg.client_rows:  # a scale study: the clients' rows overlap
            for name in ("epsilon_total", "epsilon_local_sample_level"):
                if name in out:
                    out[name] += f"; {POPULATION_NOTE}"
        return out

    def snapshot(self) -> dict[str, Any]:
        """The ``epsilon_*`` figures so far; units and assumptions in ``epsilon_assumptions``."""
        most = max(self.released.values(), default=0)
        out: dict[str, Any] = {
            "epsilon_per_weight": _finite(self.epsilon_per_weight),
            "epsilon_per_client_round": _finite(self.epsilon_per_client_round),
            "delta_per_client_round": self.delta_per_client_round,
            "epsilon_total": _finite(self.total_epsilon()),
            "epsilon_total_unamplified": _finite(self._unamplified(most)),
            "amplification_rate": self.config.secret_rate if self.amplified else 1.0,
            "delta": self.config.delta,
            "max_participations": most,
            "max_asked": max(self.asked.values(), default=0),
            "noise": SEEDED_LABEL if self.config.seeded_noise else PRIVATE_LABEL,
            "epsilon_assumptions": self.assumptions(),
        }
        if self.config.shuffler:
            last = self.central_per_round[-1] if self.central_per_round else 0.0
            out["epsilon_central_round"] = _finite(last)
        if self.config.local_dp != "none":
            out["epsilon_local_sample_level"] = self.local_sample_epsilon(most)
            out["epsilon_local_source"] = local_epsilon_source(self.config.local_dp)
        return out

    def _unamplified(self, releases: int) -> float:
        if self.config.mechanism in GAUSSIAN:
            return zcdp_epsilon(releases * self.rho, self.config.delta)
        return compose_pure(self.epsilon_per_client_round, releases, self.config.delta)

    def local_sample_epsilon(self, participations: int) -> float:
        """Sample-level ε of a client's rows from its private local training (RDP)."""
        cfg = self.config
        return local_epsilon(
            max(self.local_rows, 1), cfg.batch_size, cfg.local_epochs, participations,
            cfg.local_noise, cfg.delta,
        )  # fmt: skip

    def lines(self) -> list[str]:
        """The ledger in words, for the console: every ε with its unit and assumption."""
        snap, why, cfg = self.snapshot(), self.assumptions(), self.config
        rows = [
            f"mechanism {cfg.mechanism}, δ = {cfg.delta:g}; noise: {snap['noise']}",
            f"ε per weight = {snap['epsilon_per_weight']}  [{why['epsilon_per_weight']}]",
            f"ε per client per round = {snap['epsilon_per_client_round']}"
            + (
                f" (= {self.dims} weights × ε: basic composition)"
                if cfg.mechanism in ("pnpm", "duchi", "pm")
                else ""
            )
            + f"  [{why['epsilon_per_client_round']}]",
            f"ε total per client = {snap['epsilon_total']} ({self.rounds} rounds, worst client "
            f"released {snap['max_participations']} reports)  [{why['epsilon_total']}]",
        ]
        if cfg.shuffler:
            rows.append(
                f"central ε of the last shuffled round = {snap['epsilon_central_round']}  "
                f"[{why['epsilon_central_round']}]"
            )
        if cfg.local_dp != "none":
            rows.append(
                f"local {cfg.local_dp}: ε of one row of a client = "
                f"{snap['epsilon_local_sample_level']:.4g} ({snap['epsilon_local_source']})  "
                f"[{why['epsilon_local_sample_level']}]"
            )
        if cfg.mechanism == "pnpm":
            rows.append("PNPM: only the sign of each weight is ε-LDP; |w| is scaled, not hidden")
        rows.append(aggregation_line(cfg))
        return rows

    def state(self) -> dict[str, Any]:
        """What a checkpoint needs to resume the ledger."""
        return {
            "rounds": self.rounds,
            "asked": {str(k): v for k, v in self.asked.items()},
            "released": {str(k): v for k, v in self.released.items()},
            "central_per_round": self.central_per_round,
        }
