"""The horizontal job file (`[hfl]` TOML): training, mechanism, privacy and party settings."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from privfl.config.core import JobFile, finite, read_toml, write_toml
from privfl.config.relay import RelayConfig, check_relay
from privfl.config.schema import build, check_keys, convert, require_table
from privfl.errors import ConfigError

DATASETS = ("digits", "mnist", "fmnist", "cifar10")
MECHANISMS = ("none", "pnpm", "duchi", "pm", "gaussian", "laplace-topk", "gaussian-topk")
PURE_LDP = ("pnpm", "duchi", "pm", "laplace-topk")
DELTA_REPORTS = ("laplace-topk", "gaussian-topk")  # report the update on k coordinates
DEVICES = ("auto", "cpu", "cuda")
LOCAL_DP = ("none", "dpsgd", "fsdp")  # private local training (sample-level DP of a client's rows)
AGGREGATIONS = ("mean", "trimmed-mean", "median")  # how the aggregator combines valid reports
CLIPPED_UPDATES = ("none", "pnpm")  # mechanisms whose clients L2-clip their update (update_clip)


# What `privfl hfl run-local` runs when neither a job file nor the command line chooses a
# privacy setting: DP-SGD on every client (sample-level DP, RDP accountant) over 10
# clients of 134 rows (unless --clients says otherwise): a row of a larger client is
# sampled less often, so the same noise buys a smaller ε and the run learns more than
# with 20 clients of 67 rows. Chosen by measurement on the horizontal demo
# (docs/results-hfl.md, "private by default").
PRIVATE_DEFAULT: dict[str, Any] = {"local_dp": "dpsgd", "local_noise": 1.0, "clients": 10}
PRIVACY_KEYS = ("mechanism", "local_dp", "local_noise")


@dataclass(frozen=True, slots=True)
class HflConfig:
    """One horizontal experiment. Defaults: digits, 20 IID clients, no noise."""

    dataset: str = "digits"
    data_dir: str = ""
    clients: int = 20
    rounds: int = 10
    local_epochs: int = 5
    lr: float = 0.5
    batch_size: int = 16
    fraction: float = 1.0  # K-of-N: the aggregator samples round(fraction·N) clients per round
    participation: float = 1.0  # p: each client joins a round with probability p ...
    dropout: float = 0.0  # ... and then drops out with probability q: β = p(1 − q)
    mechanism: str = "none"
    epsilon: float = 1.0  # per weight (pnpm/duchi/pm), per client per round (others)
    delta: float = 1e-5
    topk_fraction: float = 0.1  # α: k = α·d coordinates for the *-topk mechanisms
    topk_public: bool = True  # choose the k indices from the last global update (public)
    clip_norm: float = 5.0  # C of NbAFL's clipping (gaussian)
    range_radius: float = 0.0  # duchi/pm: layer range [c − r, c + r]; 0 = adaptive per layer
    delta_radius: float = 0.05  # *-topk: updates clipped to [−r, r] per coordinate
    server_noise: bool = False  # NbAFL's downlink noise σ_D (gaussian only)
    fedprox_mu: float = 0.0
    dirichlet: float = 0.0  # 0 = IID; > 0 = Dirichlet(α) label skew
    device: str = "auto"
    seed: int = 0
    # population studies: > 0 = every client holds this many rows drawn with replacement
    # (derived per client on demand; clients may outnumber the rows); 0 = a partition
    client_rows: int = 0
    batched: bool = True  # train a round's clients as one stacked computation (plain SGD)
    fused_mlp: bool = True  # batched MLP clients: hand-written backward fused with the step
    batch_clients: int = 0  # clients per stacked computation; 0 = auto (by model size)
    epsilon_budget: float = math.inf  # stop before the total ε per client would exceed it
    shuffler: bool = False
    min_reports: int = 0  # Shuffler pads to this many reports with dummies (0 = n·β)
    min_valid_reports: int = 1  # a round with fewer valid, in-range reports stops the run
    weight_bound: float = 100.0  # none/pnpm: clients clip weights to [−b, b] (a known range)
    # none/pnpm: clients clip their update w − w_global to this L2 norm and the aggregator
    # refuses a report beyond it; 0 = derived from the model (half the initial model's
    # norm, docs/security.md), inf = no update clip (only weight_bound)
    update_clip: float = 0.0
    aggregation: str = "trimmed-mean"  # mean | trimmed-mean | median (coordinate-wise)
    # secure aggregation (SecAgg+, privfl.learning.secagg): the aggregator sees only the
    # sums of groups of ``secagg_group`` clients (0 = one group: the round's sum) and
    # combines the group means by ``aggregation``; each client adds its share of Skellam
    # noise so that every group sum carries z = ``ddp_noise`` (in units of update_clip)
    secure_aggregation: bool = False
    secagg_group: int = 4
    # secure aggregation with a bound per client (privfl.learning.bounded): two
    # non-colluding servers (the aggregator and the Shuffler's role) hold additive shares,
    # refuse a client that cannot prove ‖x‖ small, and each adds Skellam noise of
    # z = ``ddp_noise``; one report per round (no groups, ``secagg_group`` unused)
    secagg_bounds: bool = False
    ddp_noise: float = 0.0
    trim_fraction: float = 0.1  # trimmed-mean: drop ⌊f·asked clients⌋ reports a side, per coord.
    slot_seconds: float = 1.0  # t_i of the Shuffler's adaptive window
    round_timeout: float = 60.0  # a client that misses it is dropped for the round
    timeout_seconds: float = 60.0  # longest wait for a silent peer outside rounds
    test_size: float = 0.25
    # private local training (issue 7): DP-SGD or FSDP instead of plain SGD on the client
    local_dp: str = "none"
    local_noise: float = 1.0  # noise multiplier z of each local step
    local_clip: float = 1.0  # per-sample clip C (FSDP: used when its adaptive clip is off)
    fsdp_rank: int = 50  # FSDP's Funk-SVD rank k
    # research only: privacy noise and coins derived from the job seed (reproducible, so
    # NOT private: whoever holds the job file regenerates the noise); outputs say so
    seeded_noise: bool = False

    def __post_init__(self) -> None:
        _check(self.dataset in DATASETS, f"dataset must be one of {', '.join(DATASETS)}")
        _check(self.mechanism in MECHANISMS, f"mechanism must be one of {', '.join(MECHANISMS)}")
        _check(self.device in DEVICES, "device must be auto, cpu or cuda")
        _check(
            self.clients >= 1 and self.rounds >= 1 and self.local_epochs >= 1,
            "clients, rounds and local_epochs must be >= 1",
        )
        _check(0 < self.fraction <= 1, "fraction must lie in (0, 1]")
        _check(
            0 < self.participation <= 1 and 0 <= self.dropout < 1,
            "participation in (0, 1], dropout in [0, 1)",
        )
        _check(self.epsilon > 0 and 0 < self.delta < 1, "epsilon must be > 0 and delta in (0, 1)")
        _check(0 < self.topk_fraction <= 1, "topk_fraction must lie in (0, 1]")
        _check(self.lr > 0 and self.batch_size >= 1, "lr must be > 0 and batch_size >= 1")
        _check(
            self.clip_norm > 0 and self.range_radius >= 0 and self.delta_radius > 0,
            "clip_norm, delta_radius > 0, range_radius >= 0",
        )
        _check(
            self.fedprox_mu >= 0 and self.dirichlet >= 0, "fedprox_mu and dirichlet must be >= 0"
        )
        _check(self.local_dp in LOCAL_DP, f"local_dp must be one of {', '.join(LOCAL_DP)}")
        _check(
            self.local_noise > 0 and self.local_clip > 0 and self.fsdp_rank >= 1,
            "local_noise, local_clip > 0 and fsdp_rank >= 1",
        )
        _check(
            self.local_dp == "none" or self.fedprox_mu == 0,
            "local_dp cannot be combined with fedprox_mu (the prox term is not clipped)",
        )
        _check(
            0 <= self.min_valid_reports <= max(1, round(self.fraction * self.clients)),
            "min_valid_reports must lie in 0..round(fraction·clients) (the clients asked)",
        )
        _check(
            self.client_rows >= 0 and self.batch_clients >= 0,
            "client_rows and batch_clients must be >= 0",
        )
        _check(
            self.client_rows == 0 or self.dirichlet == 0,
            "client_rows > 0 draws IID rows; set dirichlet = 0 or client_rows = 0",
        )
        _check(self.weight_bound > 0, "weight_bound must be > 0")
        _check(self.update_clip >= 0, "update_clip must be >= 0 (0 = derived, inf = off)")
        _check(
            self.aggregation in AGGREGATIONS,
            f"aggregation must be one of {', '.join(AGGREGATIONS)}",
        )
        _check(0 <= self.trim_fraction < 0.5, "trim_fraction must lie in [0, 0.5)")
        _check(
            not self.server_noise or self.aggregation == "mean",
            "server_noise is calibrated to the mean's sensitivity: set aggregation = 'mean'",
        )
        _check(
            self.secagg_group >= 0 and self.ddp_noise >= 0,
            "secagg_group and ddp_noise must be >= 0",
        )
        _check(
            not self.secure_aggregation or (self.mechanism == "none" and not self.shuffler),
            "secure_aggregation sums clipped updates: set mechanism = 'none' and shuffler = false",
        )
        _check(
            not self.secagg_bounds or self.secure_aggregation,
            "secagg_bounds checks each client inside secure aggregation: set "
            "secure_aggregation = true",
        )
        _check(
            not self.secure_aggregation or math.isfinite(self.update_clip),
            "secure_aggregation quantizes updates to update_clip: it must be finite",
        )
        _check(self.epsilon_budget > 0, "epsilon_budget must be > 0 (inf = no cap)")
        _check(
            self.slot_seconds > 0 and self.round_timeout > 0 and self.timeout_seconds > 0,
            "timeouts must be > 0",
        )

    @property
    def beta(self) -> float:
        """Seed 003's participation probability ``β = p(1 − q)``."""
        return self.participation * (1 - self.dropout)

    @property
    def sample_rate(self) -> float:
        """Expected share of the clients that report in a round (the public K-of-N times β)."""
        return self.fraction * self.beta

    @property
    def secret_rate(self) -> float:
        """The sampling rate that is secret from the aggregator, hence may amplify (else 1).

        Only each client's own CSPRNG coin (β = p(1 − q)) qualifies, and only when a
        Shuffler hides who reported; the K-of-N sample is public (job seed).
        """
        if self.shuffler and not self.seeded_noise and self.beta < 1:
            return self.beta
        return 1.0


def check_networked(config: HflConfig) -> None:
    """Refuse what the networked roles do not run yet (the bound check inside secure
    aggregation: in-process only; SecAgg+ itself runs networked, protocol v5)."""
    _check(
        not config.secagg_bounds,
        "secagg_bounds runs in the in-process simulator (privfl.runs.simulate) only; "
        "the networked roles have no messages for its second server yet: set "
        "secagg_bounds = false (secure_aggregation alone runs networked)",
    )


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(f"invalid hfl setting: {message}")


@dataclass(frozen=True, slots=True)
class HflParty:
    """A party of a distributed horizontal job: role, endpoint (listeners only), logical clients."""

    name: str
    role: str  # aggregator | shuffler | clients
    endpoint: str = ""  # the aggregator and the Shuffler listen; client hosts only connect out
    first_client: int = 0
    num_clients: int = 0
    via: str = ""  # "relay": reach every peer through the relay, listen on no port


@dataclass(frozen=True, slots=True)
class HflJob(JobFile[HflParty]):
    """A horizontal job file: the experiment, the session and who takes part.

    Its fingerprint hashes the whole job as the file holds it (:func:`to_dict`: the
    session, the key folder, every ``[hfl]`` setting and every party), in the canonical
    encoding of the vertical mode (docs/protocol.md §6.7).
    """

    session: str
    config: HflConfig = field(default_factory=HflConfig)
    parties: dict[str, HflParty] = field(default_factory=dict)
    keys_dir: str = "keys"
    project: str = ""  # the approved project whose site budgets it spends; "" = none
    relay: RelayConfig = field(default_factory=RelayConfig)  # site-local: not fingerprinted
    source: Path | None = None

    def __post_init__(self) -> None:
        check_relay(self.parties.values(), self.relay)

    def canonical_data(self) -> dict[str, Any]:
        """The whole job as the file holds it (:func:`to_dict`), without the site-local
        ``[relay]`` table."""
        data = to_dict(self)
        data.pop("relay", None)
        return data


def config_dict(config: HflConfig) -> dict[str, Any]:
    """The settings as plain data (±inf as the strings "inf"/"-inf")."""
    data: dict[str, Any] = finite(asdict(config))
    return data


def config_from_dict(data: dict[str, Any]) -> HflConfig:
    """Validated ``[hfl]`` settings; a mistake is a one-line ConfigError naming the key."""
    return build(HflConfig, data, "hfl")


def to_dict(job: HflJob) -> dict[str, Any]:
    """The job as plain TOML-ready data (without its source path): what the file holds."""
    project = {"project": job.project} if job.project else {}  # unset: old fingerprints
    data = {
        **project,
        "session": job.session,
        "keys_dir": job.keys_dir,
        "hfl": config_dict(job.config),
        "parties": {n: party_table(p) for n, p in job.parties.items()},
    }
    if job.relay != RelayConfig():
        data["relay"] = asdict(job.relay)
    return data


def party_table(party: HflParty) -> dict[str, Any]:
    """One party's table; ``via`` only when set (a direct job's fingerprint is unchanged)."""
    return {k: v for k, v in asdict(party).items() if k != "name" and (k != "via" or v)}


def save_hfl_job(job: HflJob, path: Path) -> None:
    write_toml(to_dict(job), path)


JOB_KEYS = ("session", "project", "keys_dir", "hfl", "parties", "relay")
"""The top-level keys of a horizontal job file (``[hfl]`` holds :class:`HflConfig`)."""


def load_hfl_job(path: Path) -> HflJob:
    """Read a horizontal job file; a missing or malformed one is a ConfigError naming the key."""
    data = read_toml(path, "`privfl hfl run-local` writes one in its run directory")
    try:
        return hfl_from_dict(data, path.resolve())
    except ConfigError as exc:
        raise ConfigError(f"job file {path}: {exc}") from exc


def hfl_from_dict(data: dict[str, Any], source: Path | None = None) -> HflJob:
    """An HflJob from a job file's tables (:func:`to_dict`'s inverse)."""
    check_keys(data, JOB_KEYS, "")
    for key in ("session", "project", "keys_dir"):
        if key in data:
            convert(data[key], str, key)
    if "session" not in data:
        raise ConfigError("session is missing; the job file must set it")
    parties = {
        str(name): build(HflParty, spec, f"parties.{name}", name=str(name))
        for name, spec in require_table(data.get("parties", {}), "parties").items()
    }
    return HflJob(
        session=data["session"],
        config=config_from_dict(data.get("hfl", {})),
        parties=parties,
        keys_dir=data.get("keys_dir", "keys"),
        project=data.get("project", ""),
        relay=build(RelayConfig, data.get("relay", {}), "relay"),
        source=source,
    )


def with_settings(config: HflConfig, **changes: Any) -> HflConfig:
    """A copy with the non-None changes applied (command-line overrides)."""
    return replace(config, **{k: v for k, v in changes.items() if v is not None})
