"""The Server: holds the Paillier private key, decrypts masked values only, judges convergence.

It never holds data. What it decrypts is masked by the requesting party with a mask
uniform over Z_n, so every value it sees is uniformly random — except the epoch's
Taylor loss, which it is meant to see to decide when to stop.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from privfl.crypto.encoding import decode
from privfl.crypto.packing import packed_length
from privfl.crypto.paillier import PrivateKey, generate_keypair
from privfl.errors import ProtocolError
from privfl.parties import checkpoint
from privfl.parties.common import PartyContext, big, check_hello, check_rows
from privfl.protocol.messages import (
    Decrypted,
    DecryptRequest,
    EpochResult,
    Finish,
    Hello,
    Kind,
    Loss,
)
from privfl.protocol.messages import PublicKey as PublicKeyMsg

log = logging.getLogger("privfl.server")
SCORE_REQUESTS_PER_EPOCH = 2  # evaluation on the test rows, flipback on the training rows


@dataclass
class ServerState:
    """What the Server tracks between messages."""

    key: PrivateKey
    features: dict[str, int]  # gradient length each party may ask to decrypt
    rows: int
    max_epochs: int
    tolerance: float
    divergence_factor: float
    losses: list[float] = field(default_factory=list)
    batch_loss: list[tuple[float, int]] = field(default_factory=list)
    next_loss: tuple[int, int] = (0, 0)
    gradient_requests: set[tuple[str, int, int]] = field(default_factory=set)
    score_requests: dict[int, int] = field(default_factory=dict)


def on_decrypt(state: ServerState, sender: str, host: str, msg: DecryptRequest) -> Decrypted:
    """Decrypt a masked vector after checking the sender may ask for it (one per batch)."""
    if msg.purpose == "gradient":
        key = (sender, msg.epoch, msg.batch)
        expected = packed_length(state.features[sender], state.key.public_key.n)
        if key in state.gradient_requests or len(msg.values) != expected:
            raise ProtocolError(f"{sender} asked for an unexpected gradient decryption {key}")
        state.gradient_requests.add(key)
    else:
        used = state.score_requests.get(msg.epoch, 0)
        # Score requests are packed: at most one split's rows, slots(n) per residue.
        most = packed_length(state.rows, state.key.public_key.n)
        if sender != host or used >= SCORE_REQUESTS_PER_EPOCH or len(msg.values) > most:
            raise ProtocolError(f"{sender} asked for an unexpected score decryption")
        state.score_requests[msg.epoch] = used + 1
    plain = state.key.decrypt(msg.values.values)
    return Decrypted(epoch=msg.epoch, batch=msg.batch, purpose=msg.purpose, values=big(plain))


def on_loss(state: ServerState, msg: Loss) -> EpochResult | None:
    """Accumulate a batch's loss; after the epoch's last batch, decide whether to stop."""
    if (msg.epoch, msg.batch) != state.next_loss:
        raise ProtocolError(
            f"loss for epoch/batch {(msg.epoch, msg.batch)}, expected {state.next_loss}"
        )
    (plain,) = state.key.decrypt(msg.value.values)
    n = state.key.public_key.n
    value = float(decode([plain], msg.scale_bits, n)[0]) / msg.denominator
    rows = msg.denominator // 8  # the Host sends [[8·b·L]]
    state.batch_loss.append((value * rows, rows))
    if msg.batch + 1 < msg.n_batches:
        state.next_loss = (msg.epoch, msg.batch + 1)
        return None
    total = sum(v for v, _ in state.batch_loss) / sum(r for _, r in state.batch_loss)
    state.batch_loss.clear()
    state.losses.append(total)
    state.next_loss = (msg.epoch + 1, 0)
    stop, reason = verdict(state)
    return EpochResult(epoch=msg.epoch, loss=total, stop=stop, reason=reason)


def verdict(state: ServerState) -> tuple[bool, str]:
    """Stop on divergence, on a loss change below tolerance, or after the last epoch."""
    losses = state.losses
    if not math.isfinite(losses[-1]) or losses[-1] > state.divergence_factor * losses[0]:
        return True, "diverged"
    if len(losses) >= 2 and abs(losses[-1] - losses[-2]) < state.tolerance:
        return True, "converged"
    if len(losses) >= state.max_epochs:
        return True, "max_epochs"
    return False, ""


def handshake(ctx: PartyContext) -> ServerState:
    """Make the key pair, hear every party's Hello, send each the public key."""
    job = ctx.job
    public, private, reloaded = checkpoint.server_key(
        ctx, lambda bits: generate_keypair(bits, job.obfuscation)
    )
    log.info(
        "%s a %d-bit Paillier key pair (%s obfuscation; private key stays here)",
        "reloaded" if reloaded else "generated",
        public.bits,
        public.obfuscation,
    )
    hellos = ctx.channel.gather(Kind.HELLO, ctx.peers)
    features: dict[str, int] = {}
    rows = 0
    for sender, hello in hellos.items():
        assert isinstance(hello, Hello)
        check_hello(ctx, sender, hello)
        features[sender] = hello.features
        rows = max(rows, hello.rows)
    host_hello = hellos[job.host]
    assert isinstance(host_hello, Hello)
    for sender in job.guests:  # every guest's rows line up with the Host's
        guest_hello = hellos[sender]
        assert isinstance(guest_hello, Hello)
        check_rows(sender, guest_hello.rows_digest, host_hello.rows_digest, "the host's")
    ctx.channel.broadcast(ctx.peers, PublicKeyMsg(n=public.n, bits=public.bits, h_s=public.h_s))
    t = job.training
    state = ServerState(
        key=private,
        features=features,
        rows=rows,
        max_epochs=t.epochs,
        tolerance=t.tolerance,
        divergence_factor=t.divergence_factor,
    )
    checkpoint.resume_server(ctx, state, reloaded)
    return state


def run_server(ctx: PartyContext) -> dict[str, object]:
    """Serve decryptions and epoch verdicts until the Host finishes the session."""
    state = handshake(ctx)
    host = ctx.job.host
    decrypted = 0
    while True:
        env = ctx.channel.expect({Kind.DECRYPT_REQUEST, Kind.LOSS, Kind.FINISH}, ctx.peers)
        body = env.body
        if isinstance(body, DecryptRequest):
            ctx.channel.send(env.sender, on_decrypt(state, env.sender, host, body), body.epoch)
            decrypted += len(body.values)
        elif isinstance(body, Loss) and env.sender == host:
            result = on_loss(state, body)
            if result is not None:
                checkpoint.save_server(ctx, state, result)
                log.info(
                    "epoch %d: Taylor loss %.6f %s", result.epoch + 1, result.loss, result.reason
                )
                ctx.channel.send(host, result, result.epoch)
        elif isinstance(body, Finish) and env.sender == host:
            log.info("host finished the session after %d epochs (%s)", body.epochs, body.reason)
            checkpoint.forget_server_key(ctx)
            return {"epochs": len(state.losses), "decrypted_values": decrypted}
        else:
            raise ProtocolError(f"{env.sender} may not send {env.header.kind} to the server")
