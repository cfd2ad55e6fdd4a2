"""The site policy file: limits a site's governance office sets on every job it runs.

The policy is site-local: never part of the shared job, never fingerprinted, never sent.
Every party checks the job against it (runs/site_rules.py) before it reads data or
sends a protocol message. A table or key left out sets no limit. Read with the job
file's schema machinery (config/schema.py), so a typo gets the same did-you-mean.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privfl.config.horizontal import MECHANISMS
from privfl.config.schema import build, require_table, suggest
from privfl.config.vertical import MODEL_KINDS
from privfl.errors import ConfigError

ENV_VAR = "PRIVFL_POLICY"
SYSTEM_PATH = Path("/etc/privfl/policy.toml")
DEFAULT_LEDGER = "ledger.json"  # next to the policy file


@dataclass(frozen=True, slots=True)
class LabelDPLimits:
    """``[label_dp]``: the range of label ε this site accepts (vertical)."""

    min_epsilon: float = 0.0
    max_epsilon: float = math.inf


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """``[models]``: the vertical model kinds and horizontal mechanisms allowed (empty = any)."""

    kinds: tuple[str, ...] = ()
    mechanisms: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """``[keys]``: the least Paillier (and RSA-PSI) modulus size; 0 = the job's own rule."""

    min_bits: int = 0


@dataclass(frozen=True, slots=True)
class TrainingLimits:
    """``[training]``: the most epochs (GLM; HFL local epochs), trees and rounds; 0 = no cap."""

    max_epochs: int = 0
    max_trees: int = 0
    max_rounds: int = 0


@dataclass(frozen=True, slots=True)
class BoostLimits:
    """``[secureboost]``: deepest tree and fewest rows a node (a leaf too) may hold; 0 = none."""

    max_depth: int = 0
    min_node_rows: int = 0


@dataclass(frozen=True, slots=True)
class PsiLimits:
    """``[psi]``: fewest shared ids a run may train on; most ids any party may bring."""

    min_intersection: int = 0
    max_set_size: int = 0


@dataclass(frozen=True, slots=True)
class PeerLimits:
    """``[peers]``: fingerprints of the public keys this site talks to (empty = any)."""

    allowed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProjectBudget:
    """``[projects.NAME]``: an approved project and the ε this site may spend on it in all."""

    name: str
    max_epsilon: float = math.inf


@dataclass(frozen=True, slots=True)
class SitePolicy:
    """One site's policy file; ``source`` is where it was read from."""

    ledger: str = DEFAULT_LEDGER  # relative to the policy file's folder
    label_dp: LabelDPLimits = field(default_factory=LabelDPLimits)
    models: ModelLimits = field(default_factory=ModelLimits)
    keys: KeyLimits = field(default_factory=KeyLimits)
    training: TrainingLimits = field(default_factory=TrainingLimits)
    secureboost: BoostLimits = field(default_factory=BoostLimits)
    psi: PsiLimits = field(default_factory=PsiLimits)
    peers: PeerLimits = field(default_factory=PeerLimits)
    projects: dict[str, ProjectBudget] = field(default_factory=dict)
    source: Path | None = None

    @property
    def file(self) -> str:
        """The policy's file name, as refusals cite it."""
        return self.source.name if self.source else "policy.toml"

    def ledger_path(self) -> Path:
        """The site ledger this policy's runs are booked in."""
        base = self.source.parent if self.source else Path.cwd()
        return base / self.ledger


TABLES: dict[str, type] = {
    "label_dp": LabelDPLimits,
    "models": ModelLimits,
    "keys": KeyLimits,
    "training": TrainingLimits,
    "secureboost": BoostLimits,
    "psi": PsiLimits,
    "peers": PeerLimits,
}
TOP_KEYS = ("ledger", "projects", *TABLES)


def policy_from_dict(data: dict[str, Any], source: Path | None = None) -> SitePolicy:
    """A validated policy from its TOML tables; a mistake is one line naming the key."""
    data = dict(require_table(data, "the policy"))
    for key in data:
        if key not in TOP_KEYS:
            raise ConfigError(f"unknown key {key} in the policy file{suggest(key, TOP_KEYS)}")
    projects = {
        str(name): build(ProjectBudget, table, f"projects.{name}", name=str(name))
        for name, table in require_table(data.pop("projects", {}), "projects").items()
    }
    sections: dict[str, Any] = {
        key: build(cls, data.pop(key, {}), key) for key, cls in TABLES.items()
    }
    policy = build(SitePolicy, data, "", projects=projects, source=source, **sections)
    check_ranges(policy)
    return policy


def check_ranges(policy: SitePolicy) -> None:
    """Refuse limits that contradict themselves or could never be met."""
    eps = policy.label_dp
    if math.isnan(eps.min_epsilon) or eps.min_epsilon < 0 or not eps.min_epsilon <= eps.max_epsilon:
        raise ConfigError("label_dp: need 0 <= min_epsilon <= max_epsilon")
    numbers = [getattr(getattr(policy, t), f) for t in TABLES for f in _int_fields(TABLES[t])]
    if any(n < 0 for n in numbers):
        raise ConfigError("limits must be >= 0 (0 sets no limit)")
    for project in policy.projects.values():
        if math.isnan(project.max_epsilon) or project.max_epsilon < 0:
            raise ConfigError(f"projects.{project.name}.max_epsilon must be >= 0 or inf")
    check_names(policy.models.kinds, MODEL_KINDS, "models.kinds")
    check_names(policy.models.mechanisms, MECHANISMS, "models.mechanisms")
    if not policy.ledger:
        raise ConfigError("ledger must name a file (relative to the policy file)")


def check_names(names: tuple[str, ...], known: tuple[str, ...], key: str) -> None:
    """Refuse a name privfl does not know (a typo would otherwise allow nothing)."""
    for name in names:
        if name not in known:
            raise ConfigError(f"{key}: {name!r} is not one of {', '.join(known)}")


def _int_fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.type in (int, "int")]


def load_policy(path: Path) -> SitePolicy:
    """Read and validate a policy file; a missing or malformed one is a one-line ConfigError."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"policy file {path} not found; give the site's policy file") from exc
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read policy file {path}: {exc}") from exc
    try:
        return policy_from_dict(data, source=path.resolve())
    except ConfigError as exc:
        raise ConfigError(f"policy file {path}: {exc}") from exc


def find_policy(option: Path | None) -> Path | None:
    """Where this party's policy is: ``--policy``, else ``$PRIVFL_POLICY``, else the system
    file if it exists; None when the site has none."""
    if option is not None:
        return option
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    return SYSTEM_PATH if SYSTEM_PATH.is_file() else None
