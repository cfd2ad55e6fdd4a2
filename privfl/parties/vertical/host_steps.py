"""The Host: holds features and the label column; runs label DP, coordinates, evaluates.

The Host is the only party that ever holds labels. It flips them once with
randomized response before training and from then on keeps only the flipped ones:
its state has no field for the true training labels, so nothing later — flipback
included — can read them.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import InitVar, asdict, dataclass, field, replace
from typing import Any

import numpy as np

from privfl.config.vertical import JobConfig, TrainingConfig
from privfl.crypto import packing
from privfl.crypto.encoding import (
    DATA_BITS,
    LOSS_BITS,
    VALUE_BITS,
    decode,
    encode,
    loss_denominator,
    to_exponents,
)
from privfl.crypto.paillier import PublicKey, unmask
from privfl.crypto.pools import NoisePool
from privfl.data.views import PartyData
from privfl.errors import ConfigError, ProtocolError
from privfl.learning import glm as glms
from privfl.learning import start as starts
from privfl.learning.glm import Glm
from privfl.learning.kinds.base import add_all
from privfl.learning.kinds.logistic import Logistic
from privfl.learning.taylor import sigmoid
from privfl.mechanisms.label_dp import (
    flip_probability,
    flipback,
    laplace_labels,
    private_generator,
    randomized_response,
)
from privfl.parties.label_draws import LabelDraw
from privfl.parties.vertical.facts import run_facts
from privfl.parties.vertical.gradients import class_matvec, unflatten
from privfl.protocol import fresh
from privfl.protocol.messages import (
    CrossTerm,
    Decrypted,
    DecryptRequest,
    Forward,
    Loss,
    Residual,
    Scores,
)

log = logging.getLogger("privfl.host")
NOISE_NOTE = {
    False: "flips drawn from the OS CSPRNG (256-bit seed from secrets), not from the job",
    True: "seeded noise — not private (a caller's seeded generator, for experiments)",
}


@dataclass(frozen=True, slots=True)
class FlipReport:
    """What randomized response did to the training labels (goes into the outputs)."""

    epsilon: float
    probability: float
    flipped: int
    rows: int
    mechanism: str = "randomized response"  # or "laplace" (regression labels), "none"
    laplace_scale: float = 0.0
    spent: tuple[float, ...] = ()  # ε of every label draw of this job (label_draws.py)

    @property
    def total_epsilon(self) -> float:
        """The label ε the job has spent: the sum over its draws (sequential composition)."""
        return math.fsum(self.spent) if self.spent else self.epsilon


@dataclass
class HostState:
    """The Host's weights (bias last), its flipped labels and the caches flipback needs."""

    data: PartyData  # y_train is None here: only the flipped labels below are kept
    key: PublicKey
    guests: list[str]
    labels: np.ndarray
    flip: FlipReport
    l2: float
    noise: NoisePool  # obfuscators, computed ahead by workers while the Host waits
    seeded_noise: bool = False  # the flips came from a caller's seeded generator: not private
    least_batch: int = 1  # fewest rows a batch may have (parties/batches.py)
    plan_seed: bytes = b""  # the batch plan's joint seed (parties/vertical/joint_plan.py)
    plan_attempt: int = 0  # which of the seed's plans the Host's columns unpin
    glm: Glm = field(default_factory=Logistic)
    theta: np.ndarray = field(init=False)  # (features + bias, k)
    start: np.ndarray = field(init=False)  # the private initial θ (learning/start.py)
    x_train: np.ndarray = field(init=False)
    x_test: np.ndarray = field(init=False)
    x_exp: np.ndarray = field(init=False)
    penalised: np.ndarray = field(init=False)
    z_cache: list[int] = field(init=False)  # latest [[Σ_g z_g]] per training row
    zh_cache: np.ndarray = field(init=False)  # z_H of the same forward pass
    drawn: np.ndarray = field(init=False)  # the labels as randomized response left them
    flipped_back: int = 0
    start_rng: InitVar[np.random.Generator | None] = None  # None: the OS CSPRNG
    training: InitVar[TrainingConfig | None] = None  # the warm-up's rate and λ

    def __post_init__(
        self, start_rng: np.random.Generator | None, training: TrainingConfig | None
    ) -> None:
        ones = np.ones((self.data.x_train.shape[0], 1))
        self.x_train = np.hstack([self.data.x_train, ones])
        self.x_test = np.hstack([self.data.x_test, np.ones((self.data.x_test.shape[0], 1))])
        self.x_exp = to_exponents(self.x_train, DATA_BITS)
        self.penalised = np.r_[np.ones(self.data.x_train.shape[1]), 0.0]  # no L2 on the bias
        self.z_cache = [0] * len(self.labels)
        self.zh_cache = np.zeros(len(self.labels))
        self.drawn = self.labels.copy()  # every start gets the job's one draw (label_draws)
        rows = self.data.x_train.shape[0]
        self.offset_train = (
            np.zeros(rows) if self.data.offset_train is None else self.data.offset_train
        )
        self.offset_test = (
            np.zeros(len(self.x_test)) if self.data.offset_test is None else self.data.offset_test
        )
        # A start no guest knows: from zero the first residual is 2 − 4y, and a guest
        # solves its first gradient for the batch's labels (learning/start.py).
        self.start = starts.host_start(
            self.glm,
            self.x_train,
            self.labels,
            offset=self.offset_train,
            penalised=self.penalised,
            training=training or TrainingConfig(),
            rng=start_rng if start_rng is not None else private_generator(),
        )
        self.theta = self.start.copy()


def init_state(
    data: PartyData,
    key: PublicKey,
    guests: list[str],
    job: JobConfig,
    label_rng: np.random.Generator | None = None,
    noise: NoisePool | None = None,
    drawn: LabelDraw | None = None,
) -> HostState:
    """Take the job's one label draw (ε-label-DP) and drop the true training labels.

    ``drawn``: the job's draw, saved and reused on every start (parties/label_draws.py);
    without it the labels are drawn here, by :func:`draw_labels` with ``label_rng``.
    The Host's initial weights (learning/start.py) come from ``label_rng`` too: by
    default a generator seeded from the OS CSPRNG, never from the job's public ``seed``;
    a caller's seeded one makes them reproducible and the run not private.
    ``noise``: the obfuscator pool (default: computed inline, no worker processes).
    """
    if data.y_train is None or data.y_test is None:
        raise ConfigError("the host needs the label column")
    glm = glms.glm_of(job)
    if drawn is None:
        labels, info = draw_labels(data, job, label_rng)
        drawn = LabelDraw(labels, info, (job.label_dp.epsilon,), reused=False)
    info = dict(drawn.info)
    seeded = bool(info.pop("seeded"))
    return HostState(
        data=replace(data, y_train=None),
        key=key,
        guests=guests,
        labels=drawn.labels,
        flip=replace(FlipReport(**info), spent=drawn.epsilons),
        l2=job.training.l2,
        noise=noise or NoisePool(key.n, 1, key.h_s),
        seeded_noise=seeded,
        glm=glm,
        start_rng=label_rng,  # seeded: the start too is reproducible (and not private)
        training=job.training,
    )


def draw_labels(
    data: PartyData, job: JobConfig, label_rng: np.random.Generator | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """One draw of the training labels' noise and its report, as label_draws saves it.

    The noise comes from ``label_rng``: by default a generator seeded from the OS
    CSPRNG (never from the job's public ``seed``). A caller's seeded generator makes
    the noise reproducible and the run not private; the report (and the summary) say so.
    """
    if data.y_train is None:
        raise ConfigError("the host needs the label column")
    glm = glms.glm_of(job)
    rng = label_rng if label_rng is not None else private_generator()
    check_labels(glm, data.y_train)
    noisy, report = private_labels(glm, job, data.y_train, rng)
    info = {k: v for k, v in asdict(report).items() if k != "spent"}
    return noisy, {**info, "seeded": label_rng is not None}


def check_labels(glm: Glm, labels: np.ndarray) -> None:
    """Labels the model can take: 0/1, classes 0..k-1, counts >= 0 (regression: any)."""
    glm.check_labels(labels)


def private_labels(
    glm: Glm, job: JobConfig, labels: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, FlipReport]:
    """The labels the Host trains on: randomized response (k-ary for multiclass) or, for
    regression, the Laplace mechanism on labels clipped to the job's bounds."""
    eps = job.label_dp.epsilon
    if glm.regression:
        if not math.isfinite(eps):
            return labels.astype(np.float64), FlipReport(eps, 0.0, 0, len(labels), "none")
        low, high = job.model.label_low, job.model.label_high
        noisy, scale = laplace_labels(labels, eps, low, high, rng)
        log.info(
            "label DP: ε=%s, Laplace scale %.6g on labels clipped to [%g, %g]",
            eps,
            scale,
            low,
            high,
        )
        return noisy, FlipReport(eps, 0.0, 0, len(labels), "laplace", scale)
    noisy = randomized_response(labels, eps, rng, num_classes=glm.label_classes)
    probability = flip_probability(eps, glm.label_classes)
    report = FlipReport(
        epsilon=eps,
        probability=probability,
        flipped=int((noisy != labels).sum()),
        rows=len(noisy),
    )
    log.info(
        "label DP: ε=%s, flip probability %.6f, %d of %d labels flipped",
        eps,
        report.probability,
        report.flipped,
        report.rows,
    )
    return noisy, report


def take(state: HostState, count: int) -> list[int]:
    """``count`` obfuscators from the pool; its workers start on as many for next time."""
    noise = state.noise.take(count)
    state.noise.prefetch(count)
    return noise


def batch_obfuscations(state: HostState, rows: int) -> int:
    """Fresh obfuscations one batch of ``rows`` costs the Host.

    A residual per guest, with two or more guests each one's ``others`` too, the
    packed gradient and the loss.
    """
    guests = len(state.guests)
    per_guest = rows * state.glm.outputs * (2 if guests > 1 else 1)
    return guests * per_guest + packing.packed_length(state.theta.size, state.key.n) + 1


def combine(
    state: HostState, rows: slice | np.ndarray, forwards: dict[str, Forward]
) -> tuple[list[int], list[int]]:
    """``[[r]]`` and ``[[Z]]`` (the kind's rule, learning/kinds), both for the Host's own use.

    Neither may leave the Host as it is: ``[[4d]] = [[Z]] · (1 + n·offset)`` divided by
    the guests' own ciphertexts would show the offset. :func:`residuals` re-randomises.
    """
    glm = state.glm
    size = len(state.labels[rows])
    expected = glm.forward_length(size)
    for guest, fwd in forwards.items():
        if len(fwd.scores) != expected:
            raise ProtocolError(
                f"{guest} sent {len(fwd.scores)} scores for a batch of {size} rows; the "
                f"{glm.kind} model takes {expected}"
            )
    z_host = state.x_train[rows] @ state.theta
    y = glm.targets(state.labels[rows])
    scores = [forwards[g].scores.values for g in state.guests]
    residual, total = glm.encrypted_residual(state.key, scores, z_host, y, state.offset_train[rows])
    if glm.flipback:  # flipback's caches
        idx = np.arange(len(state.labels))[rows]
        for i, row in enumerate(idx):
            state.z_cache[row] = total[i]
        state.zh_cache[idx] = z_host[:, 0]
    return residual, total


def forward_length(glm: Glm, rows: int) -> int:
    """Ciphertexts in one guest's Forward (the kind's rule, docs/protocol.md §6.8)."""
    return glm.forward_length(rows)


def residuals(
    state: HostState, epoch: int, batch: int, residual: list[int], forwards: dict[str, Forward]
) -> dict[str, Residual]:
    """Each guest's Residual: its own re-randomisation of ``[[4d]]`` and of its ``others``."""
    key = state.key
    out: dict[str, Residual] = {}
    for guest, others in others_of(state, forwards).items():
        mine = fresh.rerandomize(key, residual, take(state, len(residual)))
        extra = None if others is None else fresh.rerandomize(key, others, take(state, len(others)))
        out[guest] = Residual(epoch, batch, mine, extra)
    return out


def others_of(state: HostState, forwards: dict[str, Forward]) -> dict[str, list[int] | None]:
    """For each guest the encrypted sum of the *other* guests' scores (None with one guest)."""
    if len(state.guests) == 1:
        return {state.guests[0]: None}
    result: dict[str, list[int] | None] = {}
    for guest in state.guests:
        others = [forwards[g].scores.values for g in state.guests if g != guest]
        result[guest] = add_all(state.key, others)
    return result


def assemble_loss(
    state: HostState,
    rows: slice | np.ndarray,
    total: list[int],
    forwards: dict[str, Forward],
    crosses: dict[str, CrossTerm],
    epoch: int,
    batch: tuple[int, int],
) -> Loss:
    """``[[8b·L]]`` at 2^LOSS_BITS: the kind's terms (learning/kinds) summed, its plain
    part added, re-randomised.

    ``ΣZ²`` comes from each guest's ``[[Σz_g²]]`` and, with several guests, their cross
    terms; the kinds that need it read it.
    """
    key, glm = state.key, state.glm
    y = glm.targets(state.labels[rows])
    z_host = state.x_train[rows] @ state.theta
    squares = [fwd.sum_squares.values[0] for fwd in forwards.values()]
    squares += [c.value.values[0] for c in crosses.values()]  # Σ_rows Z² in all
    scores = [forwards[g].scores.values for g in state.guests]
    offset = state.offset_train[rows]
    parts, plain = glm.encrypted_loss(key, total, scores, squares, z_host, y, offset)
    value = key.add_plain([key.sum(parts)], encode([plain], LOSS_BITS, key.n))
    return Loss(
        epoch=epoch,
        batch=batch[0],
        n_batches=batch[1],
        value=fresh.rerandomize(key, value, take(state, 1)),
        denominator=loss_denominator(len(y)),
        scale_bits=LOSS_BITS,
    )


def own_gradient(
    state: HostState, rows: slice | np.ndarray, residual: list[int]
) -> tuple[fresh.Fresh, list[int]]:
    """``[[X_Hᵀ 4d + R]]`` (masked, then re-randomised) and the mask ``R`` to remove later."""
    products = class_matvec(state.noise, state.key, state.x_exp[rows], residual, state.glm.outputs)
    grad = packing.pack(state.key, products)
    return fresh.mask(state.key, grad, take(state, len(grad)))


def apply_gradient(
    state: HostState, decrypted: Decrypted, masks: list[int], lr: float, b: int
) -> None:
    """Unmask, add the L2 term (not on the bias), one SGD step."""
    n = state.key.n
    plain = packing.unpack(unmask(decrypted.values.values, masks, n), state.theta.size, n)
    x_t_r = unflatten(decode(plain, LOSS_BITS, n), state.theta.shape)
    step = state.glm.gradient(x_t_r, state.theta, b, state.l2, state.penalised)
    state.theta = state.theta - lr * step


def apply_flipback(state: HostState, guest_scores: np.ndarray, fraction: float) -> int:
    """Flip back the noisy labels the current model disagrees with most; returns how many.

    Reads only the flipped labels and the joint scores of the last forward pass.
    Over the whole run, at most as many labels differ from the draw as randomized
    response is expected to have flipped (a public number): each flipback epoch may
    change only what earlier ones left of that cap, so several epochs together cannot
    rewrite more labels than the noise did (docs/protocol.md §13).
    """
    probs = sigmoid(state.zh_cache + guest_scores)
    expected = round(state.flip.probability * len(state.labels))
    left = expected - int(np.count_nonzero(state.labels != state.drawn))
    new = flipback(state.labels, probs, fraction, max_flips=left)
    changed = int((new != state.labels).sum())
    state.labels = new
    state.flipped_back += changed
    return changed


def masked_request(
    state: HostState, ciphertexts: list[int], epoch: int, packed: bool = False
) -> tuple[DecryptRequest, list[int]]:
    """Ask the Server for ``[[v]]`` packed, under a fresh uniform mask (it learns nothing of v).

    Masked, then re-randomised by the Host like everything it sends (crypto.fresh).
    """
    if not packed:
        ciphertexts = packing.pack(state.key, ciphertexts)
    masked, masks = fresh.mask(state.key, ciphertexts, take(state, len(ciphertexts)))
    return DecryptRequest(epoch=epoch, batch=0, purpose="scores", values=masked), masks


def unmask_scores(
    state: HostState, decrypted: Decrypted, masks: list[int], rows: int, terms: int = 1
) -> np.ndarray:
    """The plain ``Σ_g z_g`` of ``rows`` rows behind a masked, packed score request.

    ``terms``: how many packed vectors were summed (the guests' Scores), 1 if the Host
    packed the summed ciphertexts itself.
    """
    n = state.key.n
    plain = packing.unpack(unmask(decrypted.values.values, masks, n), rows, n, terms)
    return decode(plain, VALUE_BITS, n)


def sum_scores(state: HostState, replies: dict[str, Scores], rows: int) -> list[int]:
    """``Σ_g [[z_g]]`` over every guest's packed Scores reply, checking their lengths."""
    vectors = []
    expected = packing.packed_length(rows, state.key.n)
    for guest, reply in replies.items():
        if len(reply.scores) != expected:
            raise ProtocolError(
                f"{guest} sent {len(reply.scores)} packed scores, expected {expected}"
            )
        vectors.append(reply.scores.values)
    return add_all(state.key, vectors)


def summary_of(
    job: JobConfig, state: HostState, records: list[dict[str, Any]], wall: float, reason: str
) -> dict[str, Any]:
    """The run's summary.json (the final epoch's metrics, history, and the privacy ledger)."""
    last = records[-1]
    glm = state.glm
    metrics: dict[str, Any] = {k: finite(v) for k, v in last.items() if k not in RECORD_KEYS}
    metrics = glm.summary_metrics(metrics)
    return {
        **metrics,
        "model": model_summary(job, glm),
        "dataset": job.data.dataset,
        "loss_history": [r["loss"] for r in records],
        "loss_note": glm.loss_note,
        "epoch_seconds": [r["seconds"] for r in records],
        "label_epsilon": finite_or_inf(state.flip.total_epsilon),
        "label_draws": len(state.flip.spent) or 1,
        "flip": {
            "mechanism": state.flip.mechanism,
            "count": state.flip.flipped,
            "probability": state.flip.probability,
            "rows": state.flip.rows,
            "noise": NOISE_NOTE[state.seeded_noise],
            **({"laplace_scale": state.flip.laplace_scale} if state.flip.laplace_scale else {}),
        },
        "flipback": {
            "every": job.label_dp.flipback_every,
            "fraction": job.label_dp.flipback_fraction,
            "flipped_back": state.flipped_back,
        },
        "privacy": ledger(job, state),
        "epochs": len(records),
        "max_epochs": job.training.epochs,
        "learning_rate": job.training.learning_rate,
        "l2": job.training.l2,
        "batch_size": job.training.batch_size,
        **run_facts(
            job,
            wall=wall,
            reason=reason,
            train_rows=len(state.labels),
            test_rows=len(state.x_test),
        ),
    }


RECORD_KEYS = ("epoch", "loss", "flipped_back", "lr", "seconds")


def model_summary(job: JobConfig, glm: Glm) -> dict[str, Any]:
    """Every hyper-parameter of the trained model, for summary.json."""
    m, t = job.model, job.training
    out: dict[str, Any] = {"kind": m.kind, **asdict(t), **glm.summary_fields(m)}
    out["label_epsilon"] = job.label_dp.epsilon if math.isfinite(job.label_dp.epsilon) else "inf"
    return out


def ledger(job: JobConfig, state: HostState) -> dict[str, Any]:
    """What the privacy guarantee is, for whom, and what each party learns."""
    draws = len(state.flip.spent) or 1
    return {
        "label_dp": {
            "mechanism": state.glm.mechanism,
            "epsilon": finite_or_inf(state.flip.total_epsilon),
            "unit": "per training label, for the whole run, against the guests and the server",
            "draws": draws,
            "composition": (
                "one label draw, saved and reused on every start of the job"
                if draws == 1
                else f"{draws} label draws of ε = {job.label_dp.epsilon:g} each "
                "(--redraw-labels): ε is their sum (sequential composition)"
            ),
            "flipback": "post-processing of the flipped labels and the model: no extra epsilon",
            "noise": NOISE_NOTE[state.seeded_noise],
        },
        "server_sees": "masked gradients and masked scores (uniform over Z_n), the loss per batch",
        "guests_see": "encrypted residuals, re-randomised by the Host for each guest; "
        "their own masked-then-unmasked gradient",
        "host_sees": "the guests' summed partial scores on test rows each epoch and on "
        "training rows at flipback epochs (never a single guest's, with 2+ guests)",
    }


def finite_or_inf(value: float) -> float | str:
    """JSON-safe ε: infinity becomes "inf"."""
    return value if math.isfinite(value) else "inf"


def finite(value: float) -> float | None:
    """JSON-safe: NaN becomes null."""
    return None if isinstance(value, float) and math.isnan(value) else value


def elapsed(start: float) -> float:
    """Seconds since ``start`` (monotonic), rounded for the outputs."""
    return round(time.monotonic() - start, 3)
