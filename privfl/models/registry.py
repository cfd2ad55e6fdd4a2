"""One registry of model kinds, as Opacus registers its accountants: a dict and a lookup.

Each entry names everything that differs between kinds: the ``[model]`` keys it reads,
whether it reads ``[training]``, its GLM object (learning/kinds: encoding, residual, loss,
flipback), the function each party runs, its end-of-run report, its prediction, its
plot, its centralised references and its conformance scripts. Adding a model kind is
one new module and one line in ``KINDS``; nothing outside this module and the job
parser (config/vertical.py) compares kind names.

Functions are named ``"module:attribute"`` and imported when used, so this table sits
below every layer it names (a job parser can read it without importing a party).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from privfl.errors import ConfigError

TREE_KEYS = (
    "trees",
    "depth",
    "learning_rate",
    "bins",
    "l2",
    "gamma",
    "min_child_weight",
    "subsample",
    "colsample",
    "early_stopping_rounds",
    "instance_space",
    "host_check",
)
"""The ``[model]`` keys only SecureBoost reads (the GLMs' rates are ``[training]``'s)."""


@dataclass(frozen=True, slots=True)
class ModelKind:
    """One model kind: what it reads, and the functions that train, report and check it."""

    name: str
    title: str  # as the CLI names it in one line
    reads: tuple[str, ...]  # the [model] keys besides `kind` it reads (and validates)
    label_type: str  # "binary", "class" (0..k-1) or "real": how a CSV's labels are read
    headline: str  # the test metric plots and tables lead with
    report_metrics: tuple[str, ...]  # the metrics of the end-of-run line
    reference: str  # the centralised model of its objective
    party: str  # (ctx, data, RoleOptions) -> result, every role of a training session
    predict: str  # the `vfl predict` command's body for this kind
    report: str  # (summary, references, out) -> the end-of-run table
    plot: str  # (job, records, path, references): the Host's training.png
    references: str  # (job) -> centralised references of a demo run
    glm: str | None = None  # (outputs, sigmoid) -> learning.kinds.Glm; None: not a GLM
    training: bool = True  # reads [training] (which is then in its fingerprint)
    rounds: tuple[str, str, str] = ("training", "epochs", "epoch")  # table, key, unit
    # role -> script of a training session; "predict:<role>" -> of a prediction session
    conformance: Mapping[str, str] = field(default_factory=dict)
    # "table.key" -> the value a job of this kind gets when its file leaves the key out
    # (config.vertical.with_kind_defaults); the dataclasses' defaults are logistic's.
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_glm(self) -> bool:
        """Trained by the vertical GLM protocol (docs/protocol.md §6.2, §6.8)."""
        return self.glm is not None

    def load(self, ref: str) -> Any:
        """The function or class ``ref`` (``"module:attribute"``) names."""
        module, _, attribute = ref.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def rounds_of(self, job: Any) -> tuple[int, str]:
        """How many rounds the job trains at most, and their unit (epoch or tree)."""
        table, key, unit = self.rounds
        return int(getattr(getattr(job, table), key)), unit


_V = "privfl.parties.vertical"
_KIT = "privfl.tools.conformance"
_GLM_KIT = {  # the GLM scripts: each reads the kind's known answers; "predict:<role>" keys
    # check a prediction session (`privfl conformance --session predict`)
    "guest": f"{_KIT}.guest:guest_script",
    "host": f"{_KIT}.host:host_script",
    "server": f"{_KIT}.server:server_script",
    "predict:guest": f"{_KIT}.predict:predict_guest_script",
    "predict:host": f"{_KIT}.predict:predict_host_script",
    "predict:server": f"{_KIT}.predict_server:predict_server_script",
}
_REGRESSION = ("rmse", "mae", "r2")
BOOST_DEFAULTS = {
    # Randomized response once before the first tree; every tree, split and partition a
    # guest sees is post-processing of it, so 2 is the per-label ε of the whole run.
    # Chosen from docs/results.md ("SecureBoost's default label DP"): with the Σh floor
    # below, held-out AUC 0.9922 on breast cancer (plaintext 0.9998) and 0.7622 on the
    # bench's synthetic table (plaintext 0.7538), 20 draws each; ε = 1.5 misses.
    "label_dp.epsilon": 2.0,
    # Σh >= 4 per child (so >= 16 rows a node): leaves that average out the flips.
    "model.min_child_weight": 4.0,
}
"""SecureBoost's defaults that differ from logistic's (``instance_space`` is ModelConfig's)."""
MULTICLASS_DEFAULTS = {
    # k-ary randomized response once before training (keep e^ε/(k − 1 + e^ε): 0.91 with
    # 3 classes). Chosen from docs/results.md ("The GLMs' default label ε"): the smallest
    # ε whose held-out accuracy on the demo's table (wine) is within 1.5 points of the
    # plaintext run's (20 draws); 10 classes cost more (digits: 4.9 points; 0.9 at ε = 5).
    "label_dp.epsilon": 3.0,
}
"""Multiclass's defaults that differ from logistic's."""
REGRESSION_DEFAULTS = {
    # The Laplace mechanism's ε when the job gives public label bounds and no ε. Without
    # bounds there is no label DP, and a job must say so: label_dp.epsilon = inf
    # (config.vertical.validate refuses a job with neither; UNPROTECTED_READS says why).
    "label_dp.epsilon": 8.0,
}
"""Linear and Poisson regression's defaults that differ from logistic's."""
UNPROTECTED_READS = {
    "linear": "z_H − y of every training row over a run (z_H the Host's own early fit): "
    "the labels, blurred only by that fit's error",
    "poisson": "every training count exactly (a crafted forward separates it from the "
    "Host's exposure multiplier)",
}
"""What a deviating guest reads of a regression job without label DP (docs/security.md)."""


def glm_kind(
    name: str,
    title: str,
    reads: tuple[str, ...],
    label_type: str,
    metrics: tuple[str, ...],
    reference: str,
    table: str = "glm_table",
    kit: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> ModelKind:
    """A GLM kind's entry: its module ``learning/kinds/<name>.py`` and the GLM functions."""
    return ModelKind(
        name,
        title,
        reads,
        label_type,
        headline=metrics[0],
        report_metrics=metrics,
        reference=reference,
        party=f"{_V}.roles:run_glm_role",
        predict="privfl.cli.predict:predict_glm",
        report=f"privfl.runs.tables:{table}",
        plot=f"{_V}.host:draw_training",
        references="privfl.runs.references:glm_references",
        glm=f"privfl.learning.kinds.{name}:make",
        conformance=kit or {},
        defaults=defaults or {},
    )


KINDS: dict[str, ModelKind] = {
    kind.name: kind
    for kind in (
        glm_kind(
            "logistic", "logistic regression", (), "binary", ("accuracy", "f1", "auc"),
            "LogisticRegression", "logistic_table", _GLM_KIT,
        ),
        glm_kind(
            "linear", "linear regression", ("label_low", "label_high"), "real", _REGRESSION,
            "Ridge", kit=_GLM_KIT, defaults=REGRESSION_DEFAULTS,
        ),
        glm_kind(
            "poisson", "Poisson regression", ("label_low", "label_high", "exposure"), "real",
            ("deviance", *_REGRESSION), "PoissonRegressor", kit=_GLM_KIT,
            defaults=REGRESSION_DEFAULTS,
        ),
        glm_kind(
            "multiclass", "multiclass logistic regression", ("classes", "sigmoid"), "class",
            ("accuracy", "precision", "recall", "f1"), "LogisticRegression", kit=_GLM_KIT,
            defaults=MULTICLASS_DEFAULTS,
        ),
        ModelKind(
            "secureboost", "SecureBoost", TREE_KEYS, "binary", "auc",
            ("accuracy", "f1", "auc"), "HistGradientBoosting",
            party=f"{_V}.secureboost.run:run_boost_role",
            predict="privfl.cli.predict:predict_boost",
            report=f"{_V}.secureboost.report:report_table",
            plot=f"{_V}.secureboost.report:draw_training",
            references="privfl.runs.references:booster_references",
            training=False,
            rounds=("model", "trees", "tree"),
            defaults=BOOST_DEFAULTS,
            conformance={
                "guest": f"{_KIT}.boost_guest:boost_guest_script",
                "host": f"{_KIT}.boost_host:boost_host_script",
                "server": f"{_KIT}.boost_server:boost_server_script",
                "predict:guest": f"{_KIT}.boost_predict:boost_predict_guest_script",
                "predict:host": f"{_KIT}.boost_predict:boost_predict_host_script",
                "predict:server": f"{_KIT}.boost_server:boost_predict_server_script",
            },
        ),
    )
}  # fmt: skip
"""Every model kind a job may name in ``[model] kind``, by name."""

DEFAULT_KIND = "logistic"
"""The kind of a job without ``[model]`` (and of a model.json that names none)."""


def kind_named(name: str) -> ModelKind:
    """The registry entry of ``name``; ConfigError naming the known kinds otherwise."""
    try:
        return KINDS[name]
    except KeyError:
        raise ConfigError(
            f"model.kind is {name[:40]!r}; choose one of {', '.join(KINDS)}"
        ) from None


def kind_of(job: Any) -> ModelKind:
    """The entry of a job's ``[model] kind`` (anything with ``.model.kind``)."""
    return kind_named(job.model.kind)


def model_entry(kind: str, **details: Any) -> dict[str, Any]:
    """model.json's ``model`` object, ``{"kind", ...}``: where every kind's file names it."""
    return {"kind": kind, **details}


def kind_of_file(data: dict[str, Any]) -> str | None:
    """The kind a model.json names: ``model.kind`` (a SecureBoost file written before
    the registry had it at the top level); None for a file that names none."""
    model = data.get("model")
    if isinstance(model, dict) and isinstance(model.get("kind"), str):
        return str(model["kind"])
    top = data.get("kind")
    return top if isinstance(top, str) else None
