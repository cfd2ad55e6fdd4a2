"""A horizontal round under grouped secure aggregation with distributed DP.

Robust rules (trimmed mean, median) need many values per coordinate, but secure
aggregation shows the aggregator only sums. The compromise: the round's clients are
split at random (OS CSPRNG) into groups of ``secagg_group``; each group is summed by
SecAgg+ (:mod:`privfl.learning.secagg`) and the aggregator combines the **group means**
by the job's rule. A deviating client can move only its own group's mean (by at most
``2B/m`` in L2 for a group of ``m``, as every in-range report), and the median or
trimmed mean over groups bounds what a minority of groups can do.

Privacy trade-off: each group sum is revealed, not only the round's sum; it carries the
group's Skellam noise (``z`` in units of the update bound), so each member's central ε is
booked per group release (:class:`~privfl.mechanisms.skellam.SkellamAccountant`), under
the assumption that the other members add their noise shares. Smaller groups give more
robustness and less hiding in the crowd; ``secagg_group = 0`` is one group (the sum).
"""

from __future__ import annotations

import logging
import random
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privfl.config.horizontal import HflConfig
from privfl.learning import bounded, secagg
from privfl.learning.fedavg import Setup, noise_source
from privfl.mechanisms import skellam
from privfl.mechanisms.noise import NoiseSource

DISTRIBUTED_ASSUMPTIONS = (
    "central ε per client at δ of the job plus the noise sampler's distance "
    "(delta_distributed), worst client, over every group sum it was in "
    "(Skellam RDP, add/remove-one client); assumes the other members of its groups add "
    "their noise shares and the aggregator does not collude with them; no amplification"
)


BOUNDED_ASSUMPTIONS = (
    "central ε per client at δ of the job plus the noise sampler's distance "
    "(delta_distributed), worst client, over every round it passed the "
    "bound check; assumes the second server (the Shuffler's role) adds its Skellam noise "
    "and does not collude with the aggregator; no amplification"
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RoundInput:
    """What a secure round starts from: the clients' reports and what they were sent."""

    setup: Setup
    clients: list[int]
    reports: list[torch.Tensor]
    global_weights: torch.Tensor
    round_: int
    source: NoiseSource

    def parts(
        self,
    ) -> tuple[Setup, list[int], list[torch.Tensor], torch.Tensor, int, NoiseSource]:
        return (
            self.setup, self.clients, self.reports, self.global_weights, self.round_, self.source
        )  # fmt: skip


def random_groups(
    clients: list[int], size: int, rng: random.Random | None = None
) -> list[list[int]]:
    """``clients`` in random groups of ``size`` or ``size + 1`` (0 = one group), shuffled by
    ``rng`` (default: the OS CSPRNG, so nobody can arrange who hides whom)."""
    order = list(clients)
    (rng or secrets.SystemRandom()).shuffle(order)
    count = max(1, len(order) // size) if size else 1
    return [sorted(order[g::count]) for g in range(count)] if order else []


def smallest_group(clients: int, size: int) -> int:
    """The smallest group :func:`random_groups` makes of ``clients`` (``size`` as there):
    what a host may expect when it sees ``clients`` advertised."""
    return clients // max(1, clients // size) if size else clients


def round_groups(config: HflConfig, clients: list[int], round_: int) -> list[list[int]]:
    """The round's groups: from the OS CSPRNG, or (research runs with ``seeded_noise``)
    from the job, reproducibly."""
    seeded = random.Random(f"{config.seed}|{round_}") if config.seeded_noise else None
    return random_groups(clients, config.secagg_group, seeded)


def client_input(
    update: torch.Tensor, bound: float, noise_multiplier: float, group: int, source: NoiseSource
) -> np.ndarray:
    """A client's secure-aggregation input: its quantized update plus its Skellam share."""
    # float32 as it is (client_share divides in float64, exactly): no float64 copy first
    plain = update.detach().cpu()
    values = (plain if plain.dtype in (torch.float32, torch.float64) else plain.double()).numpy()
    variance = skellam.client_variance(noise_multiplier, values.size, group)
    return skellam.client_share(values, bound, variance, source)


def secure_group_reports(
    inputs: dict[int, np.ndarray],
    groups: list[list[int]],
    global_weights: torch.Tensor,
    bound: float,
    context: bytes,
) -> tuple[list[torch.Tensor], list[list[int]]]:
    """Each group summed by SecAgg+; returns each group's mean as a weight report
    (``θ + grid·sum/m``) and the members whose inputs made it into each sum."""
    reports, survivors = [], []
    for index, group in enumerate(groups):
        members = {c: inputs[c] for c in group if c in inputs}
        if not members:
            continue
        if len(members) == 1:  # SecAgg needs a neighbour; a lone input is refused, not shown
            continue
        total, alive = secagg.run_round(members, context + index.to_bytes(4, "big"))
        reports.append(group_report(total, len(alive), global_weights, bound))
        survivors.append(alive)
    return reports, survivors


def group_report(
    total: np.ndarray, members: int, global_weights: torch.Tensor, bound: float
) -> torch.Tensor:
    """A group's unmasked signed sum as a weight report: ``θ + grid·sum/m``."""
    mean = torch.from_numpy(total * skellam.grid_step(bound) / members)
    return global_weights + mean.to(dtype=global_weights.dtype, device=global_weights.device)


def noise_group(config_group: int, clients: int) -> int:
    """The group size each client draws its Skellam share for: ``secagg_group``, or every
    client of the round when that is 0 (one group)."""
    return config_group or max(1, clients)


def book_groups(
    accountant: skellam.SkellamAccountant,
    released: list[list[int]],
    noise: float,
    dims: int,
    size: int,
) -> None:
    """Book every member of each released group sum (its noise: the members' shares)."""
    variance = skellam.client_variance(noise, dims, size)
    share_tv = skellam.share_distance(variance, dims)  # the table sampler's, per share
    for members in released:
        accountant.book(members, len(members) * variance, len(members) * share_tv)


def secure_round(round_in: RoundInput, accountant: skellam.SkellamAccountant) -> list[torch.Tensor]:
    """The round's reports as the aggregator sees them under secure aggregation: one
    noisy mean per group; every member of a released group sum is booked."""
    setup, clients, reports, global_weights, round_, source = round_in.parts()
    cfg = setup.config
    bound = setup.calib.update_clip
    size = noise_group(cfg.secagg_group, len(clients))
    inputs = {
        c: client_input(
            r - global_weights, bound, cfg.ddp_noise, size, noise_source(cfg, source, round_, c, 5)
        )
        for c, r in zip(clients, reports, strict=True)
    }
    groups = round_groups(cfg, clients, round_)
    context = f"privfl-hfl|seed {cfg.seed}|round {round_}".encode()  # networked: the session
    group_reports, alive = secure_group_reports(inputs, groups, global_weights, bound, context)
    book_groups(accountant, alive, cfg.ddp_noise, setup.dims, size)
    return group_reports


def bounded_round(
    round_in: RoundInput, accountant: skellam.SkellamAccountant
) -> list[torch.Tensor]:
    """The round under two-server secure aggregation with a bound per client
    (:mod:`privfl.learning.bounded`): the noisy mean of the clients that proved
    ``‖x‖`` small, as one report; the others are refused and logged, never opened."""
    setup, clients, reports, global_weights, round_, source = round_in.parts()
    cfg, dims = setup.config, setup.dims
    limit = bounded.threshold(skellam.l2_sensitivity(dims))
    inputs = {
        c: skellam.quantize(
            (r - global_weights).double().cpu().numpy(),
            setup.calib.update_clip,
            skellam.stream(noise_source(cfg, source, round_, c, 5)),
        )
        for c, r in zip(clients, reports, strict=True)
    }
    shares = {c: bounded.split(x) for c, x in inputs.items()}  # sent before R exists
    rows = bounded.projection(secrets.randbits(128), dims)  # the servers' joint coins
    proofs = {
        c: bounded.proof_shares(*bounded.prove_bound(x, rows, limit, False))
        for c, x in inputs.items()
    }
    valid = _bounded_check(shares, proofs, rows, limit, dims)
    refused = sorted(set(inputs) - set(valid))
    if refused:
        log.warning("round %d: clients %s failed the bound check; left out", round_, refused)
    if not valid:
        return []
    variance = (cfg.ddp_noise * skellam.l2_sensitivity(dims)) ** 2
    sums = []
    for server in (0, 1):  # each server sums its shares and adds its own noise
        summed = np.sum([shares[c][server] for c in valid], axis=0)
        noise = noise_source(cfg, source, round_, -1 - server, 6)
        summed[:, 0] += skellam.skellam(dims, variance, skellam.stream(noise))
        sums.append(summed)
    # against the aggregator: the second server's noise (one share of the whole variance)
    accountant.book(valid, variance, skellam.share_distance(variance, dims))
    mean = bounded.total(*sums) * skellam.grid_step(setup.calib.update_clip) / len(valid)
    update = torch.from_numpy(mean).to(dtype=global_weights.dtype, device=global_weights.device)
    return [global_weights + update]


def _bounded_check(
    shares: dict[int, tuple[np.ndarray, np.ndarray]],
    proofs: dict[int, tuple[bounded.Share, bounded.Share]],
    rows: np.ndarray,
    limit: int,
    dims: int,
) -> list[int]:
    """The clients whose shares are well formed and whose proof both servers accept."""
    formed = [c for c, pair in shares.items() if all(bounded.well_formed(s, dims) for s in pair)]
    projected = [bounded.project(rows, [shares[c][server] for c in formed]) for server in (0, 1)]
    coins = bounded.challenge(limit.bit_length())
    valid = []
    for index, c in enumerate(formed):
        try:
            answers = [
                bounded.verify_share(projected[s][index], proofs[c][s], coins, limit, s == 0)
                for s in (0, 1)
            ]
        except ValueError:
            continue
        if bounded.accept(*answers):
            valid.append(c)
    return valid


def network_context(session: str, round_: int, group: int) -> bytes:
    """What a networked group's keys and masks are bound to: the session, round and group."""
    return f"privfl-hfl|{session}|round {round_}".encode() + group.to_bytes(4, "big")


def distributed_extra(accountant: skellam.SkellamAccountant, bounds: bool) -> dict[str, Any]:
    """The run summary's distributed-DP entries: central ε, its δ and its assumptions."""
    return {
        "epsilon_distributed": accountant.epsilon(),
        "delta_distributed": accountant.delta_booked(),
        "epsilon_distributed_assumptions": BOUNDED_ASSUMPTIONS
        if bounds
        else DISTRIBUTED_ASSUMPTIONS,
    }
