"""The job file: one TOML document every party reads, validated into frozen dataclasses."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from privfl.config.core import JobFile, canonical, read_toml, write_toml
from privfl.config.relay import RelayConfig, check_relay
from privfl.config.schema import build, require_table
from privfl.errors import ConfigError
from privfl.models.registry import KINDS, UNPROTECTED_READS, kind_named

ROLES = ("server", "host", "guest")
PSI_METHODS = ("rsa", "ecdh")
LOCAL_KEYS = ("data", "id_column", "label_column", "features")  # may differ between sites
# Top-level keys each site sets for itself (its patience, its memory): not fingerprinted.
# Each site's own: its patience (timeout_seconds: no progress for this long; the grace),
# its memory, its way to the others. Not fingerprinted: --resume may change them.
LOCAL_JOB_KEYS = ("timeout_seconds", "liveness_grace_seconds", "max_buffered_mib", "relay")
MAX_GRACE_SECONDS = 60.0
MIN_SECURE_KEY_BITS = 2048
MIN_TEST_KEY_BITS = 256
# A site's largest id set in the PSI: also how many guessed ids a deviating peer could test.
DEFAULT_MAX_IDS = 10_000
OBFUSCATIONS = ("standard", "djn")
DEFAULT_BUFFERED_MIB = 256


@dataclass(frozen=True, slots=True)
class PartySpec:
    """One party of the job: its role and the endpoint its inbox listens on."""

    name: str
    role: str
    endpoint: str = ""  # where its inbox listens; "" only with via = "relay"
    columns: tuple[int, ...] = ()  # demo data: which columns of the bundled table it holds
    # This site's own CSV (local settings: left out of the job fingerprint, see LOCAL_KEYS).
    data: str = ""
    id_column: str = ""
    label_column: str = ""
    features: tuple[str, ...] = ()
    # How many feature columns it trains on (every party agrees: in the fingerprint). The
    # Server sizes its gradient decryptions by it; 0 = len(columns) (the demo's split).
    feature_count: int = 0
    # The most ids this site brings to the PSI; peers refuse larger sets (docs/security.md).
    max_ids: int = DEFAULT_MAX_IDS
    # "relay": reach every peer through the relay and listen on no port (config/relay.py)
    via: str = ""

    @property
    def declared_features(self) -> int:
        """The agreed feature count (bias not included); 0 when the job does not say."""
        return self.feature_count or len(self.columns)


@dataclass(frozen=True, slots=True)
class TrainingConfig:
    """Optimisation settings every party applies to its own weights."""

    epochs: int = 30
    learning_rate: float = 0.3
    lr_decay: float = 0.02  # lr_e = learning_rate / (1 + lr_decay * e)
    l2: float = 0.1  # λ; gradient (1/b)(Xᵀd + λθ), bias not penalised
    batch_size: int = 0  # 0 = full batch
    allow_small_batches: bool = False
    tolerance: float = 1e-6  # stop when the Taylor loss changes less than this
    divergence_factor: float = 2.0  # stop with an error when loss − first > (factor − 1)·|first|
    # Each guest adds N(0, score_noise²) from its OS CSPRNG to every training score it sends
    # (docs/security.md, the deviating Host): a Host that singles rows out reads them only to
    # about this. 0 = off, and then the model equals its plaintext twin. In the job only
    # when set, so older fingerprints are unchanged.
    score_noise: float = 0.0


MODEL_KINDS = tuple(KINDS)  # the registry's (models/registry.py)
# The bundled demo tables (data/views.py), the model each suits, and each kind's default.
DATASETS = ("breast_cancer", "diabetes", "wine", "digits", "counts")
DATASET_TASK = {
    "breast_cancer": "logistic",
    "diabetes": "linear",
    "wine": "multiclass",
    "digits": "multiclass",
    "counts": "poisson",
}
DEFAULT_DATASET = {
    "logistic": "breast_cancer",
    "linear": "diabetes",
    "multiclass": "wine",
    "poisson": "counts",
    "secureboost": "breast_cancer",
}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Which vertical model the job trains, and the hyper-parameters only that model reads.

    The GLMs (logistic, linear, poisson, multiclass) take their optimiser settings from
    ``[training]``; SecureBoost takes the tree settings below. A job without a ``[model]``
    table trains logistic regression, and its fingerprint is the one it always had.
    """

    kind: str = "logistic"
    # multiclass (one-vs-rest): how many classes; 0 = as many as the Host's labels hold
    classes: int = 0
    # SecureBoost (docs/security.md: what each party learns)
    trees: int = 10
    depth: int = 3
    learning_rate: float = 0.3
    bins: int = 32
    l2: float = 1.0  # λ on leaf weights
    gamma: float = 0.0  # least gain a split must bring
    min_child_weight: float = 1.0  # least Σh in a child
    subsample: float = 1.0  # fraction of rows per tree
    colsample: float = 1.0  # fraction of each party's features per tree
    early_stopping_rounds: int = 0  # 0 = train every tree
    # "hidden" (the default): a guest learns no rows of a node another party split;
    # "shared": every guest learns every node's rows, and with them most training labels
    # (docs/security.md "Vertical SecureBoost"; docs/protocol.md §6.9; its cost:
    # docs/performance.md). Always in a SecureBoost job's file and fingerprint.
    instance_space: str = "hidden"
    # the guest checks the Host's ciphertexts with zero-knowledge proofs (docs/security.md,
    # "Host check"; docs/performance.md: its cost)
    host_check: bool = False
    # linear / poisson: clipping bounds of the Laplace label mechanism (label_dp.epsilon);
    # equal bounds (the default) = no bounds given. Written to the job only when set.
    label_low: float = 0.0
    label_high: float = 0.0
    # poisson: the Host's column of exposures (log taken as the offset; not a feature).
    exposure: str = ""
    # multiclass: the residual's sigmoid, "taylor" (second order, any number of guests),
    # "separable" (learning/separable.py, one guest) or "auto" (separable when it can).
    sigmoid: str = "auto"


# SecureBoost's hyper-parameters in [model], with the help `init vfl` and `run-local` show
# (their defaults come from ModelConfig itself).
BOOST_HELP = {
    "trees": "Number of trees.",
    "depth": "Depth of each tree.",
    "learning_rate": "Shrinkage of each tree's leaf weights.",
    "bins": "Quantile bins per feature (candidate thresholds).",
    "l2": "L2 penalty λ on leaf weights.",
    "gamma": "Least gain a split must bring.",
    "min_child_weight": "Least Σh (hessian sum) in a child.",
    "subsample": "Fraction of rows per tree.",
    "colsample": "Fraction of each party's features per tree.",
    "early_stopping_rounds": "Stop after this many trees without improvement; 0 = train all.",
    "instance_space": "hidden: only the Host learns a node's rows; shared: every guest "
    "does, and reads most training labels from them (docs/security.md).",
    "host_check": "Guests check the Host's ciphertexts with zero-knowledge proofs (costly).",
}
# ModelConfig keys left out of the job file (and its fingerprint) while at their default.
MODEL_OPTIONAL_KEYS = (
    "label_low",
    "label_high",
    "exposure",
    "sigmoid",
    "instance_space",
    "host_check",
)
INSTANCE_SPACES = ("shared", "hidden")
SIGMOIDS = ("auto", "taylor", "separable")
MULTICLASS_BATCH = 64
"""Batch size ``init``/``run-local`` give a separable multiclass job that sets none."""
REGRESSION_KINDS = ("linear", "poisson")


@dataclass(frozen=True, slots=True)
class LabelDPConfig:
    """Randomized response on the Host's labels and the flipback post-processing."""

    # Logistic's default (other kinds': models/registry.py). Randomized response keeps a
    # label with probability e^ε/(1+e^ε), 0.82 at 1.5; chosen from docs/results.md ("The
    # GLMs' default label ε"): the smallest ε whose held-out accuracy and AUC on breast
    # cancer stay within 1.5 points and 0.015 of the plaintext run's (200 draws).
    epsilon: float = 1.5
    flipback_every: int = 5  # 0 disables flipback
    flipback_fraction: float = 0.02


@dataclass(frozen=True, slots=True)
class DataConfig:
    """Where the rows come from and how the held-out split is drawn."""

    dataset: str = "breast_cancer"
    test_size: float = 0.25
    split_seed: int = 0
    psi: str = "ecdh"  # private set intersection with an id column: "ecdh" (ristretto255) or "rsa"
    psi_key_bits: int = 2048  # RSA modulus of the blind-signature PSI (psi = "rsa" only)


@dataclass(frozen=True, slots=True)
class JobConfig(JobFile[PartySpec]):
    """Everything a party needs to take part in one training session."""

    session: str
    parties: dict[str, PartySpec]
    key_bits: int = MIN_SECURE_KEY_BITS
    allow_weak_keys: bool = False
    timeout_seconds: float = 120.0
    # A peer whose connection is gone (exited, killed, frozen past the heartbeat
    # timeout) for this long ends the run, however long timeout_seconds is.
    liveness_grace_seconds: float = 3.0  # protocol/liveness.py: DEFAULT_GRACE_SECONDS
    seed: int = 0
    keys_dir: str = "keys"
    obfuscation: str = "standard"  # "djn": short-exponent obfuscation (docs/performance.md)
    # Per peer, MiB of received messages a party holds before it is ready for them; more
    # is an error naming the peer. A local limit: not in the fingerprint.
    max_buffered_mib: int = DEFAULT_BUFFERED_MIB
    training: TrainingConfig = field(default_factory=TrainingConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    label_dp: LabelDPConfig = field(default_factory=LabelDPConfig)
    data: DataConfig = field(default_factory=DataConfig)
    # The approved project whose site budgets this run spends (docs/deploy.md, Governance);
    # "" = none named. In the fingerprint when set, so every party books the same project.
    project: str = ""
    relay: RelayConfig = field(default_factory=RelayConfig)  # site-local: not fingerprinted
    source: Path | None = None  # the file it was read from, to resolve keys_dir

    def __post_init__(self) -> None:
        validate(self)

    @property
    def server(self) -> str:
        return self.names("server")[0]

    @property
    def host(self) -> str:
        return self.names("host")[0]

    @property
    def guests(self) -> list[str]:
        return self.names("guest")

    def canonical_data(self) -> dict[str, Any]:
        """:func:`canonical_data`: what :func:`canonical_job` encodes."""
        return canonical_data(self)


def canonical_job(job: JobConfig) -> bytes:
    """The job's canonical encoding (docs/protocol.md §2.1): what the fingerprint hashes.

    Every key of the job after defaults are filled, without the site-local keys of
    ``LOCAL_JOB_KEYS`` and ``LOCAL_KEYS``, as RFC 8785 JSON (sorted keys, no whitespace,
    UTF-8, numbers in their shortest ECMAScript form, so ``120`` and ``120.0`` encode
    alike); ±∞ (only
    ``label_dp.epsilon`` may be ∞) becomes the string ``"inf"`` / ``"-inf"``.
    """
    return canonical(canonical_data(job))


def canonical_data(job: JobConfig) -> dict[str, Any]:
    """The job's data :func:`canonical_job` encodes: defaults filled, site-local keys dropped."""
    data = to_dict(job)
    for key in LOCAL_JOB_KEYS:
        data.pop(key, None)
    for spec in data["parties"].values():
        for key in LOCAL_KEYS:
            spec.pop(key, None)
        if spec["role"] != "server":  # the Server trains no weights
            spec.setdefault("feature_count", 0)
    return data


def check_key_bits(bits: int, allow_weak: bool) -> None:
    """Refuse keys under 2048 bits unless weak keys were explicitly allowed."""
    if bits < MIN_TEST_KEY_BITS:
        raise ConfigError(f"key size {bits} is below {MIN_TEST_KEY_BITS} bits, which never works")
    if bits < MIN_SECURE_KEY_BITS and not allow_weak:
        raise ConfigError(
            f"key size {bits} is below {MIN_SECURE_KEY_BITS} bits and insecure; "
            "pass --allow-weak-keys (tests only) or use --key-bits 2048"
        )


def validate(job: JobConfig) -> None:
    """Check the roles, numbers and ranges of a job; raise ConfigError naming the field."""
    check_key_bits(job.key_bits, job.allow_weak_keys)
    if job.obfuscation not in OBFUSCATIONS:
        raise ConfigError(
            f"obfuscation must be one of {', '.join(OBFUSCATIONS)}, got {job.obfuscation!r}"
        )
    roles = [p.role for p in job.parties.values()]
    for p in job.parties.values():
        if p.role not in ROLES:
            raise ConfigError(f"party {p.name!r} has role {p.role!r}; roles are {', '.join(ROLES)}")
        if p.feature_count < 0 or (
            p.feature_count and p.columns and p.feature_count != len(p.columns)
        ):
            raise ConfigError(
                f"party {p.name!r}: feature_count {p.feature_count} disagrees with its "
                f"{len(p.columns)} demo columns; drop one of them"
            )
        if p.max_ids < 1:
            raise ConfigError(f"parties.{p.name}.max_ids must be at least 1, got {p.max_ids}")
        if not p.endpoint and not p.via:
            raise ConfigError(
                f"parties.{p.name}.endpoint is missing; [parties.{p.name}] must set it "
                '(or via = "relay", to open no port)'
            )
    check_relay(job.parties.values(), job.relay)
    if roles.count("server") != 1 or roles.count("host") != 1 or roles.count("guest") < 1:
        raise ConfigError("a job needs exactly one server, one host and at least one guest")
    t = job.training
    if t.epochs < 1 or t.learning_rate <= 0 or t.l2 < 0 or t.batch_size < 0:
        raise ConfigError("training: epochs >= 1, learning_rate > 0, l2 >= 0, batch_size >= 0")
    if not (math.isfinite(t.score_noise) and t.score_noise >= 0):
        raise ConfigError(f"training.score_noise must be finite and >= 0, got {t.score_noise}")
    eps = job.label_dp.epsilon
    if math.isnan(eps) or eps < 0:
        raise ConfigError("label_dp.epsilon must be >= 0 or inf")
    if not 0 <= job.label_dp.flipback_fraction <= 1 or job.label_dp.flipback_every < 0:
        raise ConfigError("label_dp: flipback_fraction in [0, 1], flipback_every >= 0")
    if not 0 < job.data.test_size < 1:
        raise ConfigError("data.test_size must lie strictly between 0 and 1")
    if job.timeout_seconds <= 0:
        raise ConfigError("timeout_seconds must be positive")
    if job.max_buffered_mib < 1:
        raise ConfigError("max_buffered_mib must be at least 1")
    if not 0 < job.liveness_grace_seconds <= MAX_GRACE_SECONDS:
        raise ConfigError(
            f"liveness_grace_seconds must lie in (0, {MAX_GRACE_SECONDS:g}]; 3 suits most sites"
        )
    validate_model(job.model)
    if job.model.sigmoid == "separable" and roles.count("guest") != 1:
        raise ConfigError(
            "model.sigmoid = separable takes exactly one guest: the Host multiplies that "
            "guest's basis ciphertexts by its own coefficients, and Paillier cannot multiply "
            'two guests\' ciphertexts; use sigmoid = "taylor" (or "auto") with several guests'
        )
    if job.model.kind == "poisson" and roles.count("guest") > 1:
        raise ConfigError(
            "Poisson regression takes exactly one guest: the Host multiplies the guest's "
            "[[exp(z_G)]] by its own plaintext exp(z_H + offset), and Paillier cannot "
            "multiply two guests' ciphertexts"
        )
    if (
        job.model.kind in REGRESSION_KINDS
        and math.isfinite(eps)
        and not job.model.label_low < job.model.label_high
    ):
        raise ConfigError(unbounded_regression(job.model.kind, eps))
    if job.data.psi not in PSI_METHODS:
        raise ConfigError(f"data.psi is {job.data.psi!r}; choose one of {', '.join(PSI_METHODS)}")
    if job.data.psi == "rsa":
        check_key_bits(job.data.psi_key_bits, job.allow_weak_keys)


def unbounded_regression(kind: str, epsilon: float) -> str:
    """Why a regression job with a finite label ε and no label bounds is refused: both ways out.

    Label DP on real labels needs public bounds, which privfl cannot invent; training
    without it must be the job's explicit choice (``label_dp.epsilon = inf``), since a
    deviating guest then reads what ``UNPROTECTED_READS`` says (docs/security.md).
    """
    default = kind_default(kind, "label_dp.epsilon")
    asked = (
        "needs the labels' public bounds or an explicit choice to train without label DP"
        if epsilon == default
        else f"with label_dp.epsilon = {epsilon:g} needs the labels' public bounds"
    )
    return (
        f"{kind} regression {asked}: set model.label_low < model.label_high (--label-low/"
        f"--label-high) for label DP at ε {epsilon:g}, or label_dp.epsilon = inf "
        f"(--label-epsilon inf) to train without it, where a deviating guest reads "
        f"{UNPROTECTED_READS[kind]} (docs/security.md)"
    )


def sigmoid_of(job: JobConfig) -> str:
    """The residual the job's classifier uses: ``[model] sigmoid`` with auto resolved.

    Separable needs exactly one guest (the Host multiplies that guest's basis
    ciphertexts by its own coefficients; Paillier cannot multiply two guests'
    ciphertexts), so auto means separable for multiclass with one guest, else Taylor.
    Logistic keeps Taylor under auto: on its tasks it matches centralised LR already.
    """
    chosen = job.model.sigmoid
    if chosen == "auto":
        return "separable" if job.model.kind == "multiclass" and len(job.guests) == 1 else "taylor"
    return chosen


def validate_model(model: ModelConfig) -> None:
    """Check ``[model]``: a known kind and hyper-parameters in their ranges."""
    reads = kind_named(model.kind).reads
    if model.classes < 0 or model.classes == 1:
        raise ConfigError("model.classes must be 0 (from the labels) or at least 2")
    if model.sigmoid not in SIGMOIDS:
        raise ConfigError(
            f"model.sigmoid is {model.sigmoid!r}; choose one of {', '.join(SIGMOIDS)}"
        )
    if model.sigmoid == "separable" and model.kind != "multiclass":
        raise ConfigError(
            'model.sigmoid = "separable" is for kind = "multiclass"; logistic regression uses '
            "the Taylor residual (leave sigmoid out)"
        )
    if model.kind == "multiclass" and model.classes < 2:
        raise ConfigError(
            "model.kind = multiclass needs model.classes >= 2 in the job file: every party, "
            "the Server included, sizes its messages by it"
        )
    if not (math.isfinite(model.label_low) and math.isfinite(model.label_high)):
        raise ConfigError("model.label_low and model.label_high must be finite")
    if model.label_low > model.label_high:
        raise ConfigError("model.label_low must not exceed model.label_high")
    if "trees" in reads:
        validate_trees(model)


def validate_trees(model: ModelConfig) -> None:
    """SecureBoost's keys (a GLM job hashes them as the spec says, but never reads them)."""
    if model.trees < 1 or model.depth < 1 or model.bins < 2 or model.learning_rate <= 0:
        raise ConfigError("model: trees >= 1, depth >= 1, bins >= 2, learning_rate > 0")
    if model.l2 < 0 or model.gamma < 0 or model.min_child_weight < 0:
        raise ConfigError("model: l2, gamma and min_child_weight must be >= 0")
    if not (0 < model.subsample <= 1 and 0 < model.colsample <= 1):
        raise ConfigError("model: subsample and colsample must lie in (0, 1]")
    if model.early_stopping_rounds < 0:
        raise ConfigError("model.early_stopping_rounds must be >= 0")
    if model.instance_space not in INSTANCE_SPACES:
        raise ConfigError(
            f"model.instance_space must be one of {', '.join(INSTANCE_SPACES)}, "
            f"not {model.instance_space[:40]!r}"
        )


def to_dict(job: JobConfig) -> dict[str, Any]:
    """The job as plain TOML-ready data (without its source path).

    A SecureBoost job has no ``[training]`` table: trees take every setting from
    ``[model]``, so the table is neither written nor fingerprinted.
    """
    extra: dict[str, Any] = (
        {}
        if job.max_buffered_mib == DEFAULT_BUFFERED_MIB
        else {"max_buffered_mib": job.max_buffered_mib}
    )
    if job.project:  # a job without a project keeps its old fingerprint
        extra["project"] = job.project
    if job.relay != RelayConfig():
        extra["relay"] = asdict(job.relay)
    if job.model != ModelConfig():  # a job without [model] keeps its old fingerprint
        model = asdict(job.model)
        default = ModelConfig()
        for key in MODEL_OPTIONAL_KEYS:  # absent while unset: older fingerprints unchanged
            if model[key] == getattr(default, key) and not always_written(job.model, key):
                del model[key]
        extra["model"] = model
    return {
        **extra,
        "session": job.session,
        "key_bits": job.key_bits,
        "allow_weak_keys": job.allow_weak_keys,
        "timeout_seconds": job.timeout_seconds,
        "liveness_grace_seconds": job.liveness_grace_seconds,
        "seed": job.seed,
        "keys_dir": job.keys_dir,
        "obfuscation": job.obfuscation,
        **({"training": training_dict(job.training)} if KINDS[job.model.kind].training else {}),
        "label_dp": asdict(job.label_dp),
        "data": asdict(job.data),
        "parties": {n: party_dict(p) for n, p in job.parties.items()},
    }


def always_written(model: ModelConfig, key: str) -> bool:
    """A key a kind reads whose default changed: written even at its default.

    ``instance_space`` was ``"shared"`` when a SecureBoost job left it out, and is
    ``"hidden"`` now: writing it keeps the fingerprint of a job file from meaning two
    protocols (a party of an older privfl refuses the job rather than run another mode).
    """
    return key == "instance_space" and key in kind_named(model.kind).reads


def with_kind_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """The job's tables with its kind's own defaults for the keys its file leaves out.

    The dataclasses hold the GLMs' defaults; a kind whose defaults differ names them in
    the registry (models/registry.py ``defaults``, e.g. SecureBoost's label ε). Every
    such key is in the job's canonical form, so the fingerprint says the value used.
    """
    model = data.get("model")
    kind = model.get("kind", ModelConfig().kind) if isinstance(model, dict) else ModelConfig().kind
    if kind not in KINDS:
        return data  # validate_model names the unknown kind
    out = dict(data)
    for dotted, value in KINDS[kind].defaults.items():
        table, key = dotted.split(".")
        section = out.get(table, {})
        if isinstance(section, dict) and key not in section:
            out[table] = {**section, key: value}
    return out


def kind_default(kind: str, dotted: str) -> Any:
    """The value ``table.key`` takes in a job of ``kind`` that does not set it."""
    table, key = dotted.split(".")
    if dotted in KINDS[kind].defaults:
        return KINDS[kind].defaults[dotted]
    return getattr(TABLES[table](), key)


def switch_kind(job: JobConfig, kind: str) -> JobConfig:
    """The job with ``kind``'s defaults where it holds the defaults of its current kind.

    What ``init vfl --model`` and ``run-local --model`` start from: a setting the job file
    chose (anything but its own kind's default) is kept.
    """
    return replace(job, **kind_tables(job, kind))


def kind_tables(job: JobConfig, kind: str) -> dict[str, Any]:
    """The tables ``switch_kind`` changes (``model`` always), not yet a validated job.

    A caller that completes the job for ``kind`` first (a regression's label bounds, a
    multiclass job's classes) takes these and replaces the job once, at the end.
    """
    old = job.model.kind
    tables: dict[str, Any] = {"model": replace(job.model, kind=kind)}
    if kind == old:
        return tables
    for dotted in sorted({*KINDS[kind].defaults, *KINDS[old].defaults}):
        table, key = dotted.split(".")
        if getattr(getattr(job, table), key) == kind_default(old, dotted):
            current = tables.get(table, getattr(job, table))
            tables[table] = replace(current, **{key: kind_default(kind, dotted)})
    return tables


def training_dict(training: TrainingConfig) -> dict[str, Any]:
    """The ``[training]`` table; ``score_noise`` only when set (old fingerprints unchanged)."""
    table = asdict(training)
    if table["score_noise"] == 0.0:
        del table["score_noise"]
    return table


def party_dict(spec: PartySpec) -> dict[str, Any]:
    """One party's table; the local data keys only when set (old job files stay unchanged)."""
    table: dict[str, Any] = {
        "role": spec.role,
        "endpoint": spec.endpoint,
        "columns": list(spec.columns),
    }
    if spec.role != "server":  # the Server takes no part in the PSI
        table["max_ids"] = spec.max_ids
    for key in LOCAL_KEYS:
        value = getattr(spec, key)
        if value:
            table[key] = list(value) if isinstance(value, tuple) else value
    if spec.feature_count:
        table["feature_count"] = spec.feature_count
    if spec.via:  # written only when set: a direct job's fingerprint is unchanged
        table["via"] = spec.via
    return table


TABLES: dict[str, type] = {
    "training": TrainingConfig,
    "model": ModelConfig,
    "label_dp": LabelDPConfig,
    "data": DataConfig,
    "relay": RelayConfig,
}
"""The job's tables besides ``[parties]``, each read into its dataclass by config/schema.py."""


def from_dict(data: dict[str, Any], source: Path | None = None) -> JobConfig:
    """Build a validated JobConfig; a mistake is a one-line ConfigError naming the key."""
    try:
        return _from_dict(data, source)
    except ConfigError as exc:
        where = f"job file {source}: " if source else ""
        raise ConfigError(f"{where}{exc}") from exc


def _from_dict(data: dict[str, Any], source: Path | None) -> JobConfig:
    """:func:`from_dict` without the file name in its errors."""
    data = with_kind_defaults(dict(require_table(data, "the job")))
    if "parties" not in data:
        raise ConfigError(
            "the [parties] table is missing: add one [parties.NAME] table per party "
            "(role and endpoint), or write a kit with `privfl init vfl`"
        )
    parties = {
        str(name): build(PartySpec, spec, f"parties.{name}", name=str(name))
        for name, spec in require_table(data.pop("parties"), "parties").items()
    }
    sections: dict[str, Any] = {
        key: build(cls, data.pop(key, {}), key) for key, cls in TABLES.items()
    }
    return build(JobConfig, data, "", parties=parties, source=source, **sections)


def load_job(path: Path) -> JobConfig:
    """Read and validate a job file; a missing or malformed file is a ConfigError."""
    data = read_toml(path, "create one with `privfl init vfl`")
    return from_dict(data, source=path.resolve())


def save_job(job: JobConfig, path: Path) -> None:
    """Write the job as TOML."""
    write_toml(to_dict(job), path)


def with_overrides(job: JobConfig, **training: Any) -> JobConfig:
    """A copy of the job with some training fields replaced."""
    return replace(job, training=replace(job.training, **training))
