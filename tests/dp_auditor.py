"""An ε auditor that plays the distinguishing game against a mechanism it only samples.

It knows nothing of the mechanism's code: it gets a sampler (an input value and a
count in, that many outputs out) and two neighbouring inputs. The game follows
Jagielski, Ullman and Oprea, "Auditing Differentially Private Machine Learning: How
Private is Private SGD?" (NeurIPS 2020), as Arcolezi and Gambs play it on local
randomizers ("Revealing the True Cost of Locally Differentially Private Protocols:
An Auditing Perspective", PoPETs 2024, LDP-Auditor):

1. On a *selection* sample from each input, every threshold event ``{out ≥ τ}`` and
   ``{out ≤ τ}`` (τ over the pooled sample's quantiles) is scored in both orders by the
   bound of step 2; the best event and order win.
2. On a fresh *evaluation* sample, the chosen event's probabilities under the two
   inputs get Clopper–Pearson intervals at ``α/2`` each, and
   ``ε_lb = ln((p̲_a − δ) / p̄_b)``: with probability ≥ 1 − α, every (ε, δ)-DP mechanism
   has ε ≥ ε_lb (DP bounds ``P[E | a] ≤ e^ε P[E | b] + δ`` for every event E).

Choosing the event on a separate sample keeps the evaluation's intervals valid.

3. The game's *power* on the chosen event (:func:`power`): the exact probability,
   summed over the two binomial counts, that a fresh evaluation of that event proves
   more than a given ε. :meth:`Audit.power` takes the event's two probabilities at the
   pessimistic ends of their 1 − 1e-3 intervals from the evaluation sample, so the
   figure it returns is a lower bound on the event's power (at that confidence).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta, binom

Sampler = Callable[[float, int], np.ndarray]  # (input, n) -> n independent outputs

ALPHA = 1e-7  # chance that a sound mechanism's audit reports ε_lb above its ε
CANDIDATES = 400  # thresholds tried on the selection sample
ESTIMATE_ALPHA = 1e-3  # the intervals the power figure takes its probabilities from
TAIL_SDS = 12.0  # binomial counts further than this many sd from the mean carry < 1e-30


@dataclass(frozen=True)
class Audit:
    """What one game found: the bound, the event that gave it and its two frequencies."""

    epsilon_lb: float
    event: str
    p_a: float
    p_b: float
    n: int = 0  # evaluation draws per input
    delta: float = 0.0

    def power(self, epsilon: float) -> float:
        """A lower bound on the chance that this event, evaluated afresh, proves ε_lb > ``epsilon``.

        The event's probabilities are taken at the pessimistic ends of their
        ``1 − ESTIMATE_ALPHA`` Clopper–Pearson intervals from this evaluation (p_a low,
        p_b high: the power falls as either moves that way), then :func:`power`.
        """
        hits = np.array([round(self.p_a * self.n), round(self.p_b * self.n)])
        low, high = clopper_pearson(hits, self.n, ESTIMATE_ALPHA)
        return power(float(low[0]), float(high[1]), self.n, epsilon, delta=self.delta)


def clopper_pearson(hits: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Clopper–Pearson interval of a binomial proportion, ``alpha/2`` each side."""
    hits = np.asarray(hits, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        low = np.where(hits > 0, beta.ppf(alpha / 2, hits, n - hits + 1), 0.0)
        high = np.where(hits < n, beta.ppf(1 - alpha / 2, hits + 1, n - hits), 1.0)
    return np.nan_to_num(low), np.nan_to_num(high, nan=1.0)


def bound(hits_a: np.ndarray, hits_b: np.ndarray, n: int, delta: float, alpha: float) -> np.ndarray:
    """``ln((p̲_a − δ)/p̄_b)``, 0 where the lower end does not clear δ."""
    low_a, _ = clopper_pearson(hits_a, n, alpha)
    _, high_b = clopper_pearson(hits_b, n, alpha)
    gain = np.maximum(low_a - delta, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(gain > 0, np.log(gain / high_b), 0.0)


def _count_range(p: float, n: int) -> np.ndarray:
    """The binomial(n, p) counts within ``TAIL_SDS`` standard deviations of the mean."""
    sd = math.sqrt(max(n * p * (1 - p), 1.0))
    low = max(0, math.floor(n * p - TAIL_SDS * sd))
    high = min(n, math.ceil(n * p + TAIL_SDS * sd))
    return np.arange(low, high + 1)


def power(
    p_a: float, p_b: float, n: int, epsilon: float, *, delta: float = 0.0, alpha: float = ALPHA
) -> float:
    """P[ε_lb > ``epsilon``] for one event of probabilities ``p_a``, ``p_b``, n draws each.

    Exact binomial tails: ε_lb > ε iff ``p̄_b(h_b) < (p̲_a(h_a) − δ)·e^{−ε}``, and p̄_b
    grows with h_b, so for each count h_a the passing h_b are 0..m(h_a) and the power
    is ``Σ_{h_a} P[H_a = h_a]·P[H_b ≤ m(h_a)]``. Counts of h_a beyond 12 sd (mass
    < 1e-30) count as failures, so the figure never overstates the power.
    """
    ha, hb = _count_range(p_a, n), _count_range(p_b, n)
    low_a, _ = clopper_pearson(ha, n, alpha)
    _, high_b = clopper_pearson(hb, n, alpha)
    limit = (low_a - delta) * math.exp(-epsilon)
    passing = hb[0] - 1 + np.searchsorted(high_b, limit, side="left")
    p_pass_b = np.where(limit > 0, binom.cdf(passing, n, p_b), 0.0)
    return float(np.sum(binom.pmf(ha, n, p_a) * p_pass_b))


def _hits(sorted_out: np.ndarray, tau: np.ndarray, upper: bool) -> np.ndarray:
    """How many outputs are ≥ τ (``upper``) or ≤ τ, for each τ."""
    if upper:
        return sorted_out.size - np.searchsorted(sorted_out, tau, side="left")
    return np.searchsorted(sorted_out, tau, side="right")


def _select(
    out_0: np.ndarray, out_1: np.ndarray, delta: float, alpha: float
) -> tuple[float, bool, bool]:
    """The threshold, side (upper?) and order (input 0 as ``a``?) scoring best on this sample."""
    pooled = np.concatenate([out_0, out_1])
    taus = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, CANDIDATES)))
    s0, s1 = np.sort(out_0), np.sort(out_1)
    best = (-math.inf, 0.0, True, True)
    for upper in (True, False):
        h0, h1 = _hits(s0, taus, upper), _hits(s1, taus, upper)
        for zero_first, (ha, hb) in ((True, (h0, h1)), (False, (h1, h0))):
            scores = bound(ha, hb, out_0.size, delta, alpha)
            i = int(np.argmax(scores))
            if scores[i] > best[0]:
                best = (float(scores[i]), float(taus[i]), upper, zero_first)
    return best[1], best[2], best[3]


def audit(
    sample: Sampler,
    inputs: tuple[float, float],
    n_select: int,
    n_eval: int,
    *,
    delta: float = 0.0,
    alpha: float = ALPHA,
) -> Audit:
    """The ε lower bound this game proves for ``sample`` on neighbouring ``inputs``."""
    x0, x1 = inputs
    tau, upper, zero_first = _select(sample(x0, n_select), sample(x1, n_select), delta, alpha)
    ea, eb = (sample(x0, n_eval), sample(x1, n_eval))
    if not zero_first:
        ea, eb = eb, ea
    ha = int(_hits(np.sort(ea), np.array([tau]), upper)[0])
    hb = int(_hits(np.sort(eb), np.array([tau]), upper)[0])
    lb = float(bound(np.array([ha]), np.array([hb]), n_eval, delta, alpha)[0])
    event = f"out {'≥' if upper else '≤'} {tau:.6g}"
    return Audit(max(lb, 0.0), event, ha / n_eval, hb / n_eval, n_eval, delta)
