"""How the aggregator combines a round's valid reports: mean, trimmed mean or median.

Pure maths over a ``[reports, dims]`` tensor, apart from orchestration (Flower keeps
its ``aggregate.py`` the same way). Coordinate-wise rules, after Yin et al. 2018
("Byzantine-robust distributed learning: towards optimal statistical rates"):

- ``mean``: FedAvg. One report moves it by ``‖r − r'‖ / n``; with reports clipped to
  ``‖Δ‖ ≤ B`` that is at most ``2B/n`` in L2, so a few clients can still steer it a
  little every round.
- ``trimmed-mean``: per coordinate, drop the ``⌊f·N⌋`` smallest and largest values and
  average the rest, ``N`` the clients asked. ``m ≤ ⌊f·N⌋`` deviating clients can move a
  coordinate no further than the honest values' own spread.
- ``median``: per coordinate (mean of the two middle values when ``n`` is even).
  Robust to any minority, but noisier than the mean on honest, noisy reports.

The trim counts the clients asked, not the reports: a deviating client reports every
round, honest ones may not (participation coins, dropouts), and under secure aggregation
a report is a group's mean, of which a deviating client moves the one it is in. Counting
reports trimmed none of 8 reports, or of 5 group means, at the default 0.1: silently
the mean.

Each is post-processing of the reports: the clients' ε (what the ledger books per
report) is the same whichever rule the aggregator runs.
"""

from __future__ import annotations

import torch

AGGREGATION_NOTES = {
    "mean": "plain mean (FedAvg); one report moves it by at most 2·update_clip / n",
    "trimmed-mean": "coordinate-wise trimmed mean; robust to up to ⌊trim_fraction·n⌋ "
    "deviating reports per coordinate (n the clients asked; under secure aggregation it "
    "drops as many group means)",
    "median": "coordinate-wise median; robust to any minority of deviating reports",
}


def trimmed_count(reports: int, fraction: float, clients: int = 0) -> int:
    """Reports dropped at each end, leaving at least one: ``⌊f·clients⌋``, the deviating
    clients among the ``clients`` asked (0: one client per report, ``⌊f·n⌋``)."""
    return min(int(fraction * (clients or reports)), (reports - 1) // 2)


def combine(
    reports: torch.Tensor, rule: str, trim_fraction: float = 0.1, clients: int = 0
) -> torch.Tensor:
    """Combine ``reports`` (``[n, dims]``, n ≥ 1) by ``rule``: the round's aggregate.
    ``clients``: how many clients were asked for them (the trim counts those; 0 = n)."""
    n = reports.shape[0]
    if rule == "mean" or n <= 2:  # with one or two reports every rule is the mean
        return reports.mean(dim=0)
    ordered = reports.sort(dim=0).values
    if rule == "median":
        return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    if rule == "trimmed-mean":
        cut = trimmed_count(n, trim_fraction, clients)
        return ordered[cut : n - cut].mean(dim=0)
    raise ValueError(f"unknown aggregation rule {rule!r}")
