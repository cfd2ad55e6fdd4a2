"""The site policy file: limits a site's governance office sets on every job it runs.

The policy is site-local: never part of the shared job, never fingerprinted, never sent.
Every party checks the job against it (runs/site_rules.py) before it reads data or
sends a protocol message. A table or key left out sets no limit. Read with the job
file's schema machinery (config/schema.py), so a typo gets the same did-you-mean.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privfl.config.horizontal import MECHANISMS
from privfl.config.schema import build, require_table, suggest
from privfl.config.vertical import INSTANCE_SPACES, MODEL_KINDS, OBFUSCATIONS
from privfl.errors import ConfigError

ENV_VAR = "PRIVFL_POLICY"
SYSTEM_PATH = Path("/etc/privfl/policy.toml")
DEFAULT_LEDGER = "ledger.json"  # next to the policy file


@dataclass(frozen=True, slots=True)
class LabelDPLimits:
    """``[label_dp]``: the range of label ε this site accepts (vertical)."""

    min_epsilon: float = 0.0
    max_epsilon: float = math.inf
    allow_flipback: bool = True  # false: jobs must set label_dp.flipback_every = 0


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """``[models]``: the vertical model kinds and horizontal mechanisms allowed (empty = any)."""

    kinds: tuple[str, ...] = ()
    mechanisms: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PredictionLimits:
    """``[prediction]``: the most ``vfl predict`` sessions of one job at this party; 0 = any."""

    max_sessions: int = 0


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """``[keys]``: the least Paillier (and RSA-PSI) modulus size (0 = the job's own rule)
    and the obfuscation modes allowed (empty = any)."""

    min_bits: int = 0
    obfuscations: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TrainingLimits:
    """``[training]``: the most epochs (GLM; HFL local epochs), trees and rounds, the
    least GLM batch size (a full batch always passes); 0 = no limit."""

    max_epochs: int = 0
    max_trees: int = 0
    max_rounds: int = 0
    min_batch_size: int = 0


@dataclass(frozen=True, slots=True)
class BoostLimits:
    """``[secureboost]``: deepest tree and fewest rows a node (a leaf too) may hold (0 =
    none); the instance-space modes allowed (empty = any)."""

    max_depth: int = 0
    min_node_rows: int = 0
    instance_spaces: tuple[str, ...] = ()


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
    prediction: PredictionLimits = field(default_factory=PredictionLimits)
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
    "prediction": PredictionLimits,
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
    return normalised(policy)


def normalised(policy: SitePolicy) -> SitePolicy:
    """Names in lists as privfl spells them (matched case-insensitively, checked first)."""
    replace = dataclasses.replace
    models, keys, boost = policy.models, policy.keys, policy.secureboost
    return replace(
        policy,
        models=replace(
            models,
            kinds=canonical(models.kinds, MODEL_KINDS),
            mechanisms=canonical(models.mechanisms, MECHANISMS),
        ),
        keys=replace(keys, obfuscations=canonical(keys.obfuscations, OBFUSCATIONS)),
        secureboost=replace(
            boost, instance_spaces=canonical(boost.instance_spaces, INSTANCE_SPACES)
        ),
    )


def canonical(names: tuple[str, ...], known: tuple[str, ...]) -> tuple[str, ...]:
    by_lower = {k.lower(): k for k in known}
    return tuple(by_lower[n.lower()] for n in names)


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
    check_names(policy.keys.obfuscations, OBFUSCATIONS, "keys.obfuscations")
    check_names(policy.secureboost.instance_spaces, INSTANCE_SPACES, "secureboost.instance_spaces")
    if not policy.ledger:
        raise ConfigError("ledger must name a file (relative to the policy file)")


def check_names(names: tuple[str, ...], known: tuple[str, ...], key: str) -> None:
    """Refuse a name privfl does not know, case aside (a typo would otherwise allow
    nothing), with the closest known name."""
    lower = {k.lower(): k for k in known}
    for name in names:
        if name.lower() not in lower:
            close = difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.6)
            hint = f"; did you mean {lower[close[0]]!r}?" if close else ""
            raise ConfigError(f"{key}: {name!r} is not one of {', '.join(known)}{hint}")


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
