"""The Guest: holds feature columns only; sends encrypted scores, gets a masked gradient back."""

from __future__ import annotations

import enum
import logging
import secrets
from dataclasses import dataclass, field

import numpy as np

from privfl import pulse
from privfl.crypto import packing
from privfl.crypto.encoding import DATA_BITS, LOSS_BITS, VALUE_BITS, decode, encode, to_exponents
from privfl.crypto.engine import POOL, Engine
from privfl.crypto.guest_masks import GuestMasks, label
from privfl.crypto.paillier import PublicKey, unmask
from privfl.crypto.pools import NoisePool
from privfl.data.views import PartyData
from privfl.errors import ProtocolError
from privfl.learning import glm as glms
from privfl.learning.glm import Glm
from privfl.learning.kinds.logistic import Logistic
from privfl.learning.taylor import batch_sizes, learning_rate
from privfl.parties import checkpoint
from privfl.parties.session import PartyContext
from privfl.parties.vertical.batches import job_least_batch
from privfl.parties.vertical.gradients import class_matvec, unflatten
from privfl.parties.vertical.handshake import announce, receive_guest_key, rows_digest, save_model
from privfl.parties.vertical.joint_plan import PlanCheck, commit, guest_exchange, own_share
from privfl.protocol import fresh
from privfl.protocol.messages import (
    Batch,
    CrossTerm,
    Decrypted,
    DecryptRequest,
    Finish,
    Forward,
    Kind,
    Message,
    Residual,
    ScoreRequest,
    Scores,
)

log = logging.getLogger("privfl.guest")


class Stage(enum.Enum):
    """Where a guest is within a batch; each stage accepts a fixed set of kinds."""

    IDLE = "idle"
    AWAIT_RESIDUAL = "await_residual"
    AWAIT_GRADIENT = "await_gradient"
    DONE = "done"


ACCEPTS: dict[Stage, set[Kind]] = {
    Stage.IDLE: {Kind.BATCH, Kind.SCORE_REQUEST, Kind.FINISH},
    Stage.AWAIT_RESIDUAL: {Kind.RESIDUAL},
    Stage.AWAIT_GRADIENT: {Kind.DECRYPTED},
}
# What the peers hear a busy guest do (privfl/pulse.py), by the message it answers.
STEPS: dict[type, str] = {
    Batch: "encrypting scores",
    Residual: "computing its encrypted gradient",
    Decrypted: "updating its weights",
    ScoreRequest: "encrypting evaluation scores",
}


@dataclass
class GuestState:
    """A guest's weights and what it remembers between the steps of one batch."""

    data: PartyData
    key: PublicKey
    theta: np.ndarray  # (features, k)
    l2: float
    noise: NoisePool
    glm: Glm = field(default_factory=Logistic)
    x_exp: np.ndarray = field(init=False)
    stage: Stage = Stage.IDLE
    batch: Batch | None = None
    z: np.ndarray | None = None
    masks: list[int] = field(default_factory=list)
    least_batch: int = 1  # the fewest rows a Batch may have (batches.job_least_batch)
    plan: PlanCheck | None = None  # the jointly drawn plan every Batch must follow
    score_noise: float = 0.0  # training.score_noise: σ added to every training score sent
    score_rng: np.random.Generator = field(
        default_factory=lambda: np.random.default_rng(secrets.randbits(128))
    )
    # What we send the Host, masked to cancel in its sum over guests (crypto/guest_masks.py);
    # None: no masks (one guest, or a test that builds the state by hand).
    zero_sum: GuestMasks | None = None

    def __post_init__(self) -> None:
        self.x_exp = to_exponents(self.data.x_train, DATA_BITS)

    def rows(self) -> slice | np.ndarray:
        assert self.batch is not None
        return slice(None) if self.batch.indices is None else self.batch.indices


def forward(state: GuestState, msg: Batch) -> Forward:
    """Encrypt this batch's partial scores ``z_g = X_g θ_g`` (all k per row) as the kind
    encodes them (``Glm.forward_plain``: Poisson adds ``exp(z_g)``, the separable sigmoid
    sends its basis), and ``Σ z_g²``.
    """
    check_indices(msg, len(state.x_exp), state.least_batch)
    if state.plan is not None:
        state.plan.check(msg.epoch, msg.batch, msg.indices)
    state.batch = msg
    rows = state.rows()
    z = (state.data.x_train[rows] @ state.theta).ravel()
    if state.score_noise > 0:  # the deviating Host's reads (docs/security.md): OS CSPRNG
        z = z + state.score_rng.normal(0.0, state.score_noise, z.shape)
    state.z = z
    n = state.key.n
    where = (msg.epoch, msg.batch)
    scores = encrypt(state, masked(state, "forward", where, state.glm.forward_plain(z, n)))
    squares = encrypt(state, masked(state, "squares", where, encode([float(z @ z)], LOSS_BITS, n)))
    state.stage = Stage.AWAIT_RESIDUAL
    return Forward(epoch=msg.epoch, batch=msg.batch, scores=scores, sum_squares=squares)


def check_indices(msg: Batch, rows: int, least: int) -> None:
    """Refuse a Batch before encrypting anything for it (docs/protocol.md §6.2).

    Every index a distinct training row: a repeated index would make us encrypt one
    ciphertext per copy (8 KiB of indices, 1,000 encryptions). At least ``least`` rows
    (``batches.job_least_batch``): a smaller batch lets the Host solve its own gradient
    for our scores.
    """
    if msg.indices is None:
        return
    idx = msg.indices
    if len(idx) and (idx.min() < 0 or idx.max() >= rows):
        raise ProtocolError(f"batch indices outside the {rows} training rows: refused")
    if len(np.unique(idx)) != len(idx):
        raise ProtocolError(
            f"a Batch of {len(idx)} indices repeats {len(idx) - len(np.unique(idx))} of them; "
            "every index must be a distinct training row: refused"
        )
    if len(idx) < least:
        raise ProtocolError(
            f"a Batch of {len(idx)} rows is under the job's least batch of {least} rows "
            "(docs/protocol.md §6.2): the host could solve its gradient for our scores; refused"
        )


def backward(state: GuestState, msg: Residual) -> tuple[DecryptRequest, CrossTerm | None]:
    """``[[X_gᵀ 4d]]``, masked then re-randomised, for the Server; the loss cross term for the Host.

    Every ciphertext sent is re-randomised last (crypto.fresh).
    """
    assert state.batch is not None and state.z is not None
    x = state.x_exp[state.rows()]
    k = state.glm.outputs
    if len(msg.residual) != x.shape[0] * k:
        raise ProtocolError(
            f"residual has {len(msg.residual)} values, the batch {x.shape[0]} rows × {k}"
        )
    products = class_matvec(state.noise, state.key, x, list(msg.residual.values), k)
    grad = packing.pack(state.key, products)
    masked, state.masks = fresh.mask(state.key, grad, take(state, len(grad)))
    request = DecryptRequest(epoch=msg.epoch, batch=msg.batch, purpose="gradient", values=masked)
    cross = None
    if msg.others is not None:
        value = fresh.rerandomize(state.key, cross_term(state, msg), take(state, 1))
        cross = CrossTerm(epoch=msg.epoch, batch=msg.batch, value=value)
    state.stage = Stage.AWAIT_GRADIENT
    return request, cross


def cross_term(state: GuestState, msg: Residual) -> list[int]:
    """``[[Σ z_g·others]]`` for the Host's loss, masked to cancel over guests.

    ``others`` is the other guests' masked scores, ``Z − z_g − M_g``: we add back
    ``Σ M_g·z_g`` for the mask of ours that the Host's sum left out.
    """
    assert state.z is not None and msg.others is not None
    key, n = state.key, state.key.n
    z_exp = to_exponents(state.z, DATA_BITS).tolist()
    product = key.dot(msg.others.values, z_exp)
    if state.zero_sum is not None and state.zero_sum.seeds:
        sent = state.glm.forward_length(len(state.z) // state.glm.outputs)
        forward = state.zero_sum.masks(n, label("forward", msg.epoch, msg.batch), sent)
        ours = sum(m * int(e) for m, e in zip(forward[-len(z_exp) :], z_exp, strict=True))
        product = key.add_plain([product], [ours % n])[0]
    correction = masked(state, "cross", (msg.epoch, msg.batch), [0])
    return key.add_plain([product], correction)


def masked(
    state: GuestState, message: str, where: tuple[int, int | str], plain: list[int]
) -> list[int]:
    """``plain + M_g`` mod n for ``message`` at ``where`` (epoch, batch or split); a mask is
    drawn once per label, so a request that would reuse one is refused."""
    if state.zero_sum is None:
        return plain
    try:
        return state.zero_sum.add(state.key.n, label(message, *where), plain)
    except ValueError as exc:
        raise ProtocolError(f"{exc}: the host asked twice for the same {message}; refused") from exc


def apply_gradient(state: GuestState, msg: Decrypted, lr: float) -> None:
    """Remove our mask, add our own L2 term, take one SGD step."""
    assert state.z is not None
    n = state.key.n
    plain = packing.unpack(unmask(msg.values.values, state.masks, n), state.theta.size, n)
    x_t_r = unflatten(decode(plain, LOSS_BITS, state.key.n), state.theta.shape)
    penalised = np.ones(state.theta.shape[0])
    rows = len(state.z) // state.glm.outputs
    state.theta = state.theta - lr * state.glm.gradient(
        x_t_r, state.theta, rows, state.l2, penalised
    )
    state.stage = Stage.IDLE


def scores(state: GuestState, msg: ScoreRequest) -> Scores:
    """Encrypted partial scores for every row of a split, packed (the Host learns only sums)."""
    x = state.data.x_test if msg.split == "test" else state.data.x_train
    z = (x @ state.theta).ravel()
    n = state.key.n
    packed = packing.pack_plain(encode(z, VALUE_BITS, n), n)
    values = encrypt(state, masked(state, "scores", (msg.epoch, msg.split), packed))
    return Scores(epoch=msg.epoch, split=msg.split, scores=values)


def encrypt(state: GuestState, plain: list[int]) -> fresh.Fresh:
    """Encrypt with pooled obfuscators, and start computing as many for next time."""
    return fresh.encrypt(state.key, plain, take(state, len(plain)))


def take(state: GuestState, count: int) -> list[int]:
    """``count`` pooled obfuscators; the workers start on as many for next time."""
    noise = state.noise.take(count)
    state.noise.prefetch(count)
    return noise


def run_guest(
    ctx: PartyContext, data: PartyData, workers: int = 1, engine: Engine = POOL
) -> dict[str, object]:
    """Answer the Host batch by batch until it finishes the session; save our own weights.

    ``workers`` (0 = one per core) on this machine or the party's Ray cluster (``engine``).
    """
    job, channel = ctx.job, ctx.channel
    host, server = job.host, job.server
    glm = glms.glm_of(job)
    digest = rows_digest(ctx, data.train_ids, data.test_ids)
    share = own_share(ctx)
    announce(
        ctx,
        "guest",
        data.rows,
        data.x_train.shape[1],
        [server, host],
        digest,
        len(data.x_train),
        commit(job.session, ctx.name, share),
    )
    key, relayed, zero_sum = receive_guest_key(ctx)
    seed = guest_exchange(ctx, share, relayed)
    noise = engine.pool(key.n, workers, key.h_s)
    # The first batch needs this many (scores, Σz², a cross term, the packed gradient,
    # the packed test scores); the workers start on them now. One batch ahead, never
    # the whole epoch: in mini-batches the queue then holds one batch's obfuscators.
    k = glm.outputs
    least = job_least_batch(job, len(data.x_train))
    batch = max(batch_sizes(len(data.x_train), job.training.batch_size, least))
    gradient = packing.packed_length(data.x_train.shape[1] * k, key.n)
    test = packing.packed_length(len(data.x_test) * k, key.n)
    noise.prefetch(batch * k + 2 + gradient + test)
    state = GuestState(
        data=data,
        key=key,
        theta=np.zeros((data.x_train.shape[1], k)),
        l2=job.training.l2,
        noise=noise,
        glm=glm,
        least_batch=least,
        plan=PlanCheck(
            host,
            seed,
            len(data.x_train),
            job.training.batch_size,
            least,
            free=job.training.allow_small_batches,
        ),
        score_noise=job.training.score_noise,
        zero_sum=zero_sum,
    )
    try:
        resume_guest(ctx, state)
        while state.stage is not Stage.DONE:
            sender = server if state.stage is Stage.AWAIT_GRADIENT else host
            env = channel.expect(ACCEPTS[state.stage], {sender})
            with pulse.step(STEPS.get(type(env.body), "computing")):
                replies = step(state, env.body, learning_rate(job.training, env.header.round))
            for peer, reply in replies:
                channel.send(host if peer == "host" else server, reply, env.header.round)
            after_guest_step(ctx, state, env.body)
    finally:
        noise.close()
    save_model(ctx, "guest", data.feature_names, state.theta, data.mean, data.scale)
    weights = state.theta[:, 0] if k == 1 else state.theta
    return {"weights": weights.tolist()}


def step(state: GuestState, body: Message, lr: float) -> list[tuple[str, Message]]:
    """Dispatch one accepted message; returns (``"host"``/``"server"``, reply) pairs."""
    if isinstance(body, Batch):
        return [("host", forward(state, body))]
    if isinstance(body, Residual):
        request, cross = backward(state, body)
        return [("server", request)] + ([("host", cross)] if cross else [])
    if isinstance(body, Decrypted):
        apply_gradient(state, body, lr)
        return []
    if isinstance(body, ScoreRequest):
        return [("host", scores(state, body))]
    if isinstance(body, Finish):
        log.info("host finished the session after %d epochs (%s)", body.epochs, body.reason)
        state.stage = Stage.DONE
        return []
    raise ProtocolError(f"a guest does not handle {type(body).__name__}")


def resume_guest(ctx: PartyContext, state: GuestState) -> None:
    """Agree, and restore the guest's weights."""
    completed = checkpoint.agree(ctx)
    if completed:
        record = checkpoint.load(ctx, completed)
        saved = np.array(record["theta"], dtype=np.float64)
        state.theta = saved.reshape(state.theta.shape)
        seed = record.get("plan_seed")
        if state.plan is not None and seed is not None and seed != state.plan.seed.hex():
            raise ProtocolError(
                f"{state.plan.host}'s resumed session draws another batch plan than the run it "
                "resumes (a new seed share): every epoch must repeat the same batches "
                "(docs/protocol.md §6.1a): refused"
            )
        batches = record.get("plan_batches")
        if state.plan is not None and isinstance(batches, dict):
            state.plan.restore(batches)


def after_guest_step(ctx: PartyContext, state: GuestState, body: Message) -> None:
    """Checkpoint once the gradient of an epoch's last batch is applied."""
    batch = state.batch
    if isinstance(body, Decrypted) and batch is not None and batch.batch == batch.n_batches - 1:
        record: dict[str, object] = {"theta": state.theta.tolist()}
        if state.plan is not None:
            record["plan_seed"] = state.plan.seed.hex()
            record["plan_batches"] = state.plan.record()
        checkpoint.save(ctx, batch.epoch + 1, record)
