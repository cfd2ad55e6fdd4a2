"""The Server: holds the Paillier private key, decrypts masked values only, judges convergence.

It never holds data. What it decrypts is masked by the requesting party with a mask
uniform over Z_n, so every value it sees is uniformly random — except the epoch's
Taylor loss, which it is meant to see to decide when to stop. It decrypts only what
the protocol state allows (``server_rules.py``); any other request is written to the
audit log as refused and ends the session with an error naming the party that sent it.
The private key lives in this process only: it is never written to disk. With
``--workers`` (2 or more) or ``--engine ray`` its decryptions are split over its own
workers: processes on this machine, or (``--ray-private-key``) the actors of its own
institution's Ray cluster (docs/security.md, docs/deploy.md §11).
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field, replace

from privfl import pulse
from privfl.config.vertical import JobConfig
from privfl.crypto import guest_masks
from privfl.crypto.encoding import LOSS_BITS, decode, loss_denominator
from privfl.crypto.engine import POOL, Engine
from privfl.crypto.paillier import PrivateKey, generate_keypair, private_primes
from privfl.crypto.pools import NoisePool, decrypt_split
from privfl.errors import ProtocolError
from privfl.parties import checkpoint
from privfl.parties.session import PartyContext
from privfl.parties.vertical import server_rules as rules
from privfl.parties.vertical.handshake import big, check_hello, check_rows
from privfl.parties.vertical.joint_plan import encode_pairs, require_commit
from privfl.parties.vertical.keyproof import prove_key
from privfl.parties.vertical.server_rules import Allowance, Position
from privfl.protocol.channel import Envelope
from privfl.protocol.messages import (
    Decrypted,
    DecryptRequest,
    EpochResult,
    Finish,
    Hello,
    Kind,
    Loss,
    Message,
    PublicKeyMessage,
)

log = logging.getLogger("privfl.server")


@dataclass
class ServerState:
    """What the Server tracks between messages."""

    key: PrivateKey
    allow: Allowance
    tolerance: float
    divergence_factor: float
    at: Position = field(default_factory=Position)
    losses: list[float] = field(default_factory=list)
    batch_loss: list[tuple[float, int]] = field(default_factory=list)
    pool: NoisePool | None = None  # the decryption workers (None: in this process)


def on_decrypt(state: ServerState, sender: str, msg: DecryptRequest) -> Decrypted:
    """Decrypt a masked vector once the rules allow it (see ``server_rules``)."""
    if msg.purpose == "gradient":
        rules.check_gradient(state.allow, state.at, sender, msg)
    else:
        rules.check_scores(state.allow, state.at, sender, msg)
    plain = decrypt_split(state.key, state.pool, msg.values.values)
    return Decrypted(epoch=msg.epoch, batch=msg.batch, purpose=msg.purpose, values=big(plain))


def on_loss(state: ServerState, sender: str, msg: Loss) -> EpochResult | None:
    """Accumulate a batch's loss; after the epoch's last batch, decide whether to stop."""
    rows = rules.check_loss(state.allow, state.at, sender, msg)
    (plain,) = state.key.decrypt(msg.value.values)
    n = state.key.public_key.n
    # The protocol's own scale and denominator 8·b, never the sender's (checked equal).
    value = float(decode([plain], LOSS_BITS, n)[0]) / loss_denominator(rows)
    state.batch_loss.append((value * rows, rows))
    if msg.batch + 1 < len(state.allow.batch_sizes):
        return None
    total = sum(v for v, _ in state.batch_loss) / sum(r for _, r in state.batch_loss)
    state.batch_loss.clear()
    state.losses.append(total)
    stop, reason = verdict(state)
    rules.judged(state.at, msg.epoch, stop)
    return EpochResult(epoch=msg.epoch, loss=total, stop=stop, reason=reason)


def verdict(state: ServerState) -> tuple[bool, str]:
    """Stop on divergence, on a loss change below tolerance, or after the last epoch."""
    losses = state.losses
    # Grown by the factor over the first loss's magnitude: a Poisson loss (no log y! term)
    # may be negative, and `last > factor · first` then held at the first epoch itself.
    grown = losses[-1] - losses[0] > (state.divergence_factor - 1) * abs(losses[0])
    if not math.isfinite(losses[-1]) or grown:
        return True, "diverged"
    if len(losses) >= 2 and abs(losses[-1] - losses[-2]) < state.tolerance:
        return True, "converged"
    if len(losses) >= state.allow.max_epochs:
        return True, "max_epochs"
    return False, ""


def handshake(ctx: PartyContext, predicting: bool) -> ServerState:
    """Make the key pair, hear every party's Hello, send each the public key (and each
    guest of two or more its pairwise mask seeds, fresh from the OS CSPRNG)."""
    job = ctx.job
    if not predicting:
        rules.feature_counts(job)  # a job without them fails here, before anyone waits
    remove_legacy_key(ctx)
    public, private = generate_keypair(job.key_bits, job.obfuscation)
    log.info(
        "generated a %d-bit Paillier key pair (%s obfuscation; the private key stays in memory)",
        public.bits,
        public.obfuscation,
    )
    hellos: dict[str, Hello] = {}
    for sender, hello in ctx.channel.gather(Hello, ctx.peers).items():
        check_hello(ctx, sender, hello)
        hellos[sender] = hello
    for sender in job.guests:  # every guest's rows line up with the Host's
        check_rows(sender, hellos[sender].rows_digest, hellos[job.host].rows_digest, "the host's")
    make = rules.prediction_allowance if predicting else rules.training_allowance
    allow = make(job, hellos, public.n)
    commits = "" if predicting else plan_commits(job, hellos)
    proof = prove_key(private, session=job.session, kind=Kind.PUBLIC_KEY, sender=ctx.name)
    key = PublicKeyMessage(
        n=public.n, bits=public.bits, h_s=public.h_s, plan_commits=commits, proof=proof
    )
    seeds = guest_masks.draw_seeds(job.guests)  # none with one guest
    for peer in ctx.peers:  # each guest's seeds in its own message: the Host gets none
        mine = guest_masks.seeds_of(peer, seeds) if peer in job.guests else {}
        ctx.channel.send(peer, replace(key, mask_seeds=guest_masks.encode_seeds(mine)))
    t = job.training
    state = ServerState(
        key=private, allow=allow, tolerance=t.tolerance, divergence_factor=t.divergence_factor
    )
    if predicting:
        state.at = Position(closed=True, scoring=0, stop=True)
    else:
        resume_server(ctx, state)
    return state


def plan_commits(job: JobConfig, hellos: dict[str, Hello]) -> str:
    """Every data party's batch-plan commitment, relayed to all (docs/protocol.md §6.1a):
    the Host cannot show a guest other commitments than its peers sent us."""
    order = [job.host, *job.guests]
    return encode_pairs({p: require_commit(p, hellos[p].plan_commit) for p in order})


def decryption_pool(engine: Engine, key: PrivateKey, workers: int) -> NoisePool | None:
    """The Server's decryption workers: none (its own process) unless ``workers`` >= 2 or
    the engine is Ray (``workers`` 0: every CPU). No obfuscator workers: the Server never
    encrypts."""
    if engine.kind == "ray" and not engine.private_on_cluster:
        # Its primes stay on this machine: Ray would only hand the blocks back to local
        # processes, so those processes are the pool, and no idle actor is started.
        engine, workers = POOL, workers or os.cpu_count() or 1
    if engine.kind == "pool" and workers < 2:
        return None
    n = key.public_key.n
    return engine.pool(n, workers, primes=private_primes(key), noise=False)


def run_server(
    ctx: PartyContext, predicting: bool = False, *, workers: int = 1, engine: Engine = POOL
) -> dict[str, object]:
    """Serve decryptions and epoch verdicts until the Host finishes the session.

    ``predicting``: a prediction session, where the Host may ask for one score
    decryption (every row it scores) and nothing else. ``workers``/``engine``: where
    the decryptions of long vectors run (:func:`decryption_pool`).
    """
    state = handshake(ctx, predicting)
    state.pool = decryption_pool(engine, state.key, workers)
    try:
        return serve_until_finished(ctx, state)
    finally:
        if state.pool is not None:
            state.pool.close()


def serve_until_finished(ctx: PartyContext, state: ServerState) -> dict[str, object]:
    """The Server's loop: one reply per accepted message until the Host's Finish."""
    decrypted = 0
    while True:
        env = ctx.channel.expect({Kind.DECRYPT_REQUEST, Kind.LOSS, Kind.FINISH}, ctx.peers)
        try:
            with pulse.step(f"decrypting for {env.sender}"):
                reply = serve(ctx, state, env)
        except ProtocolError:
            ctx.channel.refuse(env)
            raise
        if isinstance(env.body, Finish):
            log.info("host finished the session: %d epochs (%s)", env.body.epochs, env.body.reason)
            return {"epochs": len(state.losses), "decrypted_values": decrypted}
        if isinstance(env.body, DecryptRequest):
            decrypted += len(env.body.values)
        if reply is not None:
            ctx.channel.send(env.sender, reply, env.header.round)


def serve(ctx: PartyContext, state: ServerState, env: Envelope) -> Message | None:
    """The reply to one accepted message (None: nothing to send yet)."""
    body = env.body
    if isinstance(body, DecryptRequest):
        return on_decrypt(state, env.sender, body)
    if isinstance(body, Loss):
        result = on_loss(state, env.sender, body)
        if result is not None:
            save_server(ctx, state, result)
            log.info("epoch %d: Taylor loss %.6f %s", result.epoch + 1, result.loss, result.reason)
        return result
    if isinstance(body, Finish) and env.sender == state.allow.host:
        return None
    raise rules.Refused(f"{env.sender} may not send {env.header.kind} to the server")


def remove_legacy_key(ctx: PartyContext) -> None:
    """Delete a Paillier key file an older privfl left in the checkpoint folder."""
    path = checkpoint.folder(ctx) / checkpoint.LEGACY_KEY_FILE
    if path.exists():
        path.unlink(missing_ok=True)
        log.warning("removed %s: an older privfl kept the Paillier key there; no longer", path)


def resume_server(ctx: PartyContext, state: ServerState) -> None:
    """Agree on where to resume, restore the loss history (under this run's fresh key)."""
    if not ctx.checkpoints:
        return
    completed = checkpoint.agree(ctx)
    if completed:
        state.losses = [float(v) for v in checkpoint.load(ctx, completed)["losses"]]
        state.at.epoch = completed
        state.at.closed = completed >= state.allow.max_epochs


def save_server(ctx: PartyContext, state: ServerState, result: EpochResult) -> None:
    """The Server's loss history after an epoch's verdict."""
    if not ctx.checkpoints:
        return
    checkpoint.save(ctx, result.epoch + 1, {"losses": state.losses})
