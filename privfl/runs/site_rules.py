"""A job checked against a site policy: the first rule it breaks, as one line.

Pure functions of the job, the policy and the peers' public-key fingerprints: nothing
here reads data or opens a socket, so a party runs them before either. Every refusal
names the rule as ``(policy.toml [table] key)`` so the office and the data scientist
find it; the line starts with ``policy:``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from privfl.config.horizontal import HflJob
from privfl.config.policy import SitePolicy
from privfl.config.vertical import JobConfig
from privfl.errors import ConfigError
from privfl.learning.secureboost import node_floor
from privfl.models.registry import kind_of

# A broken rule: what the job does, and the policy key it breaks ("label_dp max_epsilon").
Breach = tuple[str, str]


def refuse(policy: SitePolicy, breach: Breach) -> ConfigError:
    """The one-line error of a broken rule."""
    what, key = breach
    table, _, name = key.partition(" ")
    where = f"[{table}] {name}" if name else f"[{table}]"
    return ConfigError(f"policy: {what} ({policy.file} {where})")


def check_vertical(job: JobConfig, policy: SitePolicy, peer_keys: Mapping[str, str | None]) -> None:
    """Raise the first rule a vertical job breaks; ``peer_keys``: peer → key fingerprint."""
    for breach in vertical_breaches(job, policy, peer_keys):
        raise refuse(policy, breach)


def check_hfl(job: HflJob, policy: SitePolicy, peer_keys: Mapping[str, str | None]) -> None:
    """Raise the first rule a horizontal job breaks; ``peer_keys`` as for the vertical."""
    for breach in hfl_breaches(job, policy, peer_keys):
        raise refuse(policy, breach)


def vertical_breaches(
    job: JobConfig, policy: SitePolicy, peer_keys: Mapping[str, str | None]
) -> Iterator[Breach]:
    """Every rule of ``policy`` a vertical job breaks, in the order the file lists them."""
    yield from project_breaches(job.project, policy)
    yield from label_breaches(job.label_dp.epsilon, policy)
    kinds = policy.models.kinds
    if kinds and job.model.kind not in kinds:
        yield (
            f"model kind {job.model.kind!r} is not allowed at this site; allowed: "
            f"{', '.join(kinds)}",
            "models kinds",
        )
    least = policy.keys.min_bits
    if least and job.key_bits < least:
        yield (
            f"a {job.key_bits}-bit Paillier key is below this site's minimum {least}",
            "keys min_bits",
        )
    if least and job.data.psi == "rsa" and job.data.psi_key_bits < least:
        yield (
            f"a {job.data.psi_key_bits}-bit RSA key for the PSI is below this site's "
            f"minimum {least}",
            "keys min_bits",
        )
    allowed = policy.keys.obfuscations
    if allowed and job.obfuscation not in allowed:
        yield (
            f"obfuscation {job.obfuscation!r} is not allowed at this site; allowed: "
            f"{', '.join(allowed)}",
            "keys obfuscations",
        )
    yield from training_breaches(job, policy)
    yield from psi_breaches(job, policy)
    yield from peer_breaches(policy, peer_keys)


def project_breaches(project: str, policy: SitePolicy) -> Iterator[Breach]:
    """A site with approved projects runs only jobs that name one of them."""
    approved = sorted(policy.projects)
    if approved and not project:
        yield (
            f"the job names no project; this site runs only {', '.join(approved)}: "
            'set project = "…" in the job file',
            "projects",
        )
    elif approved and project not in policy.projects:
        yield (
            f"project {project!r} is not approved at this site; approved: {', '.join(approved)}",
            "projects",
        )


def label_breaches(epsilon: float, policy: SitePolicy) -> Iterator[Breach]:
    """Label ε outside the site's range (ε = inf, no label DP, exceeds any finite maximum)."""
    limits = policy.label_dp
    if epsilon > limits.max_epsilon:
        yield (
            f"label ε {epsilon:g} exceeds this site's maximum {limits.max_epsilon:g}",
            "label_dp max_epsilon",
        )
    if epsilon < limits.min_epsilon:
        yield (
            f"label ε {epsilon:g} is below this site's minimum {limits.min_epsilon:g}",
            "label_dp min_epsilon",
        )


def training_breaches(job: JobConfig, policy: SitePolicy) -> Iterator[Breach]:
    """Epochs of a GLM; trees, depth and node size of SecureBoost."""
    caps, boost, model = policy.training, policy.secureboost, job.model
    if kind_of(job).is_glm:  # trained in epochs; the tree kind in trees
        if caps.max_epochs and job.training.epochs > caps.max_epochs:
            yield (
                f"{job.training.epochs} epochs exceed this site's maximum {caps.max_epochs}",
                "training max_epochs",
            )
        yield from glm_breaches(job, policy)
        return
    spaces = boost.instance_spaces
    if spaces and model.instance_space not in spaces:
        yield (
            f"instance_space {model.instance_space!r} is not allowed at this site; allowed: "
            f"{', '.join(spaces)}",
            "secureboost instance_spaces",
        )
    if caps.max_trees and model.trees > caps.max_trees:
        yield (
            f"{model.trees} trees exceed this site's maximum {caps.max_trees}",
            "training max_trees",
        )
    if boost.max_depth and model.depth > boost.max_depth:
        yield (
            f"tree depth {model.depth} exceeds this site's maximum {boost.max_depth}",
            "secureboost max_depth",
        )
    floor = node_floor(model.min_child_weight)
    if floor < boost.min_node_rows:
        yield (
            f"min_child_weight {model.min_child_weight:g} lets a node hold {floor} rows, fewer "
            f"than this site's minimum {boost.min_node_rows}: set model.min_child_weight >= "
            f"{boost.min_node_rows / 4:g}",
            "secureboost min_node_rows",
        )


def glm_breaches(job: JobConfig, policy: SitePolicy) -> Iterator[Breach]:
    """A GLM's batch size below the site's floor; flipback where the site forbids it."""
    least, batch = policy.training.min_batch_size, job.training.batch_size
    if least and batch and batch < least:  # 0 is the full batch
        yield (
            f"batch_size {batch} is below this site's minimum {least} (small batches let a "
            "guest solve for residuals)",
            "training min_batch_size",
        )
    every = job.label_dp.flipback_every
    if not policy.label_dp.allow_flipback and every and math.isfinite(job.label_dp.epsilon):
        yield (
            f"flipback every {every} epochs is not allowed at this site: set "
            "label_dp.flipback_every = 0",
            "label_dp allow_flipback",
        )


def psi_breaches(job: JobConfig, policy: SitePolicy) -> Iterator[Breach]:
    """A party allowed to bring more ids to the PSI than this site's cap."""
    cap = policy.psi.max_set_size
    for spec in job.parties.values():
        if cap and spec.role != "server" and spec.max_ids > cap:
            yield (
                f"parties.{spec.name}.max_ids {spec.max_ids} exceeds this site's PSI maximum {cap}",
                "psi max_set_size",
            )


def peer_breaches(policy: SitePolicy, peer_keys: Mapping[str, str | None]) -> Iterator[Breach]:
    """A peer whose public key is not among the fingerprints the site allows."""
    allowed = {f.lower() for f in policy.peers.allowed}
    if not allowed:
        return
    for peer, found in sorted(peer_keys.items()):
        if found is None:
            yield (
                f"no public key of peer {peer} to check against the allowed peers",
                "peers allowed",
            )
        elif found.lower() not in allowed:
            yield (
                f"peer {peer}'s public key (fingerprint {found}) is not allowed at this site",
                "peers allowed",
            )


def hfl_breaches(
    job: HflJob, policy: SitePolicy, peer_keys: Mapping[str, str | None]
) -> Iterator[Breach]:
    """Every rule of ``policy`` a horizontal job breaks."""
    cfg, caps = job.config, policy.training
    yield from project_breaches(job.project, policy)
    mechanisms = policy.models.mechanisms
    if mechanisms and cfg.mechanism not in mechanisms:
        yield (
            f"mechanism {cfg.mechanism!r} is not allowed at this site; allowed: "
            f"{', '.join(mechanisms)}",
            "models mechanisms",
        )
    if cfg.seeded_noise:
        yield (
            "seeded_noise = true draws the privacy noise from the public job seed, so its ε "
            "protects nothing; no site policy accepts it",
            "models mechanisms",
        )
    if caps.max_rounds and cfg.rounds > caps.max_rounds:
        yield (
            f"{cfg.rounds} rounds exceed this site's maximum {caps.max_rounds}",
            "training max_rounds",
        )
    if caps.max_epochs and cfg.local_epochs > caps.max_epochs:
        yield (
            f"{cfg.local_epochs} local epochs exceed this site's maximum {caps.max_epochs}",
            "training max_epochs",
        )
    budget = policy.projects.get(job.project)
    if budget and math.isfinite(budget.max_epsilon) and not math.isfinite(cfg.epsilon_budget):
        yield (
            f"hfl.epsilon_budget is inf, so no run ε can be booked against project "
            f"{job.project!r} (at most {budget.max_epsilon:g}): set a finite epsilon_budget",
            f"projects.{job.project} max_epsilon",
        )
    yield from peer_breaches(policy, peer_keys)
