"""What the Server may decrypt: the protocol state that bounds every decryption (docs/security.md).

The Server is a decryption oracle for whoever can reach it, so it decrypts only
what the protocol needs at the point it has reached, with lengths fixed by the job
file and the row count every party announced — never by what the requester claims:

* a **gradient**: one request per party per batch, for the current (epoch, batch)
  only, of exactly ``⌈features·k / slots(n)⌉`` ciphertexts, ``features`` being the
  count the job declares for that party (plus the Host's bias) and ``k`` the model's
  outputs per row (``model.classes`` for multiclass, else 1: ``glm.outputs_of``);
* **scores** (Host only): the test split once per epoch, the training split only at
  a flipback epoch (logistic only), each of exactly its packed length ``⌈rows·k / slots⌉``
  (one request when predicting);
* the **loss** (Host only): one per batch, decoded with the protocol's own scale and
  denominator ``8·b`` for the current batch's ``b`` rows.

Anything else raises :class:`Refused`; the driver (``server.py``) audits it and aborts
the session naming the party. Pure bookkeeping: no I/O, no keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from privfl.config.vertical import JobConfig
from privfl.crypto.encoding import LOSS_BITS as LOSS_BITS
from privfl.crypto.encoding import loss_denominator
from privfl.crypto.packing import packed_length
from privfl.data.views import split_rows
from privfl.errors import ConfigError, ProtocolError
from privfl.learning.glm import glm_of, outputs_of
from privfl.learning.taylor import batch_sizes
from privfl.parties.vertical.batches import job_least_batch
from privfl.protocol.messages import DecryptRequest, Hello, Loss


class Refused(ProtocolError):
    """A party asked the Server for a decryption the protocol state does not allow."""


@dataclass(frozen=True, slots=True)
class Allowance:
    """Lengths and counts the job and the agreed Hellos fix for the whole session."""

    host: str
    gradient_length: dict[str, int]  # packed ciphertexts per gradient request, per party
    batch_sizes: tuple[int, ...]  # rows of each batch of an epoch
    score_length: dict[str, int]  # packed ciphertexts of a score request, per split
    flipback_every: int  # 0: never (also with label DP off)
    max_epochs: int


@dataclass
class Position:
    """Where the session is: the batch in progress and the epoch whose scores are due."""

    epoch: int = 0
    batch: int = 0
    asked: set[str] = field(default_factory=set)  # parties whose gradient request is in
    loss_in: bool = False
    closed: bool = False  # the last epoch's batches are over
    final: bool = False  # the Server said stop: the epoch in progress is the last
    scoring: int | None = None  # the epoch just judged, whose score requests may come
    stop: bool = False  # the verdict on that epoch
    scored: set[str] = field(default_factory=set)  # splits decrypted for it


def feature_counts(job: JobConfig) -> dict[str, int]:
    """Every Host's and Guest's agreed feature count; ConfigError naming one the job lacks."""
    counts = {}
    for name, spec in job.parties.items():
        if spec.role == "server":
            continue
        if not spec.declared_features:
            raise ConfigError(
                f"the job does not say how many feature columns party {name} has: add "
                f"feature_count = N under [parties.{name}] in every site's job.toml "
                "(privfl init vfl --feature-count NAME=N writes it)"
            )
        counts[name] = spec.declared_features
    return counts


def agreed_rows(hellos: dict[str, Hello], host: str) -> tuple[int, int]:
    """``(rows, train_rows)`` every party announced; refuses (naming them) those that differ."""
    want = (hellos[host].rows, hellos[host].train_rows)
    odd = {
        name: (h.rows, h.train_rows) for name, h in hellos.items() if (h.rows, h.train_rows) != want
    }
    if odd:
        said = ", ".join(f"{name} {rows}/{train}" for name, (rows, train) in sorted(odd.items()))
        raise Refused(
            f"{', '.join(sorted(odd))} announced other row counts than the host's "
            f"{want[0]} rows / {want[1]} training rows ({said}): every party must hold the "
            "same rows"
        )
    return want


def check_features(job: JobConfig, hellos: dict[str, Hello]) -> None:
    """Each Hello's feature count equals the job's (the Host adds its bias column)."""
    declared = feature_counts(job)
    for name, hello in hellos.items():
        want = declared[name] + (1 if name == job.host else 0)
        if hello.features != want:
            raise Refused(
                f"{name} announced {hello.features} features, the job declares {want}"
                f"{' (with the bias)' if name == job.host else ''}: refused"
            )


def split_sizes(rows: int, test_size: float, seed: int) -> tuple[int, int]:
    """Training and test rows of the agreed split (the rule of ``data.views.split_view``)."""
    try:
        train, test = split_rows(rows, test_size, seed)
    except ConfigError as exc:
        raise Refused(f"{rows} rows cannot be split into training and test rows") from exc
    return len(train), len(test)


def training_allowance(job: JobConfig, hellos: dict[str, Hello], n: int) -> Allowance:
    """What a training session may decrypt, from the job and the agreed Hellos."""
    check_features(job, hellos)
    rows, train = agreed_rows(hellos, job.host)
    if train:  # said by every party alike (an id-keyed split cannot be derived here)
        test = rows - train
    else:
        train, test = split_sizes(rows, job.data.test_size, job.data.split_seed)
    declared = feature_counts(job)
    # The Host's plan: same sizes, the same too-short last batch folded (batches.py).
    sizes = batch_sizes(train, job.training.batch_size, job_least_batch(job, train))
    dp = job.label_dp
    glm = glm_of(job)  # from the job file, never from a peer
    k = glm.outputs
    flipback = glm.flipback and math.isfinite(dp.epsilon)
    return Allowance(
        host=job.host,
        gradient_length={
            name: packed_length((count + (1 if name == job.host else 0)) * k, n)
            for name, count in declared.items()
        },
        batch_sizes=tuple(sizes),
        score_length={"train": packed_length(train * k, n), "test": packed_length(test * k, n)},
        flipback_every=dp.flipback_every if flipback else 0,
        max_epochs=job.training.epochs,
    )


def prediction_allowance(job: JobConfig, hellos: dict[str, Hello], n: int) -> Allowance:
    """A prediction session: one score request for every announced row, nothing else."""
    rows, _ = agreed_rows(hellos, job.host)
    k = outputs_of(job.model)
    return Allowance(job.host, {}, (), {"test": packed_length(rows * k, n)}, 0, 0)


def check_gradient(allow: Allowance, at: Position, sender: str, msg: DecryptRequest) -> None:
    """One gradient request per party, for the batch in progress, of the party's length."""
    if sender not in allow.gradient_length:
        raise Refused(f"{sender} asked for a gradient decryption, which it never needs")
    where = (msg.epoch, msg.batch)
    if at.closed or where != (at.epoch, at.batch):
        now = "none: training is over" if at.closed else f"epoch {at.epoch} batch {at.batch}"
        raise Refused(
            f"{sender} asked for a gradient decryption of epoch {msg.epoch} batch "
            f"{msg.batch}; the batch in progress is {now}"
        )
    if sender in at.asked:
        raise Refused(
            f"{sender} asked twice for a gradient decryption of epoch {msg.epoch} batch {msg.batch}"
        )
    want = allow.gradient_length[sender]
    if len(msg.values) != want:
        raise Refused(
            f"{sender} asked to decrypt {len(msg.values)} gradient ciphertexts; its "
            f"features pack into {want}"
        )
    at.asked.add(sender)
    at.scoring = None if at.scoring is not None and msg.epoch > at.scoring else at.scoring
    advance(allow, at)


def check_scores(allow: Allowance, at: Position, sender: str, msg: DecryptRequest) -> str:
    """A score request of the Host for the epoch just judged; returns the split it is for."""
    if sender != allow.host:
        raise Refused(f"{sender} asked for a score decryption; only the host evaluates")
    if at.scoring is None or msg.epoch != at.scoring or msg.batch != 0:
        raise Refused(
            f"{sender} asked for a score decryption at epoch {msg.epoch}, when none is due"
        )
    due = ["test"]
    every = allow.flipback_every
    if every and (at.scoring + 1) % every == 0 and not at.stop:
        due.insert(0, "train")  # the Host flips back before it evaluates
    fits = [s for s in due if s not in at.scored and allow.score_length[s] == len(msg.values)]
    if not fits:
        lengths = ", ".join(f"{s}: {allow.score_length[s]}" for s in due if s not in at.scored)
        raise Refused(
            f"{sender} asked to decrypt {len(msg.values)} score ciphertexts at epoch "
            f"{msg.epoch}; still due: {lengths or 'nothing'}"
        )
    at.scored.add(fits[0])
    return fits[0]


def check_loss(allow: Allowance, at: Position, sender: str, msg: Loss) -> int:
    """The Host's loss of the batch in progress at the protocol's scale; returns its rows."""
    if sender != allow.host:
        raise Refused(f"{sender} sent a loss; only the host does")
    if at.closed or (msg.epoch, msg.batch) != (at.epoch, at.batch) or at.loss_in:
        raise Refused(
            f"{sender} sent a loss for epoch {msg.epoch} batch {msg.batch}; the batch "
            f"in progress is epoch {at.epoch} batch {at.batch}"
        )
    rows = allow.batch_sizes[at.batch]
    expected = (len(allow.batch_sizes), loss_denominator(rows), LOSS_BITS)
    if (msg.n_batches, msg.denominator, msg.scale_bits) != expected:
        raise Refused(
            f"{sender} sent a loss of {msg.n_batches} batches, denominator "
            f"{msg.denominator} and scale 2^{msg.scale_bits}; the protocol's are "
            f"{expected[0]}, {expected[1]} and 2^{expected[2]}"
        )
    at.loss_in = True
    at.scoring = None if at.scoring is not None and msg.epoch > at.scoring else at.scoring
    advance(allow, at)
    return rows


def judged(at: Position, epoch: int, stop: bool) -> None:
    """The epoch's verdict is out: its score requests are due; after a stop, no new batch."""
    at.scoring, at.stop, at.scored = epoch, stop, set()
    if stop:
        at.final = True
        at.closed = at.closed or at.epoch > epoch  # every request of its last batch is in


def advance(allow: Allowance, at: Position) -> None:
    """Once the loss and every party's gradient of the batch are in, open the next batch."""
    if not (at.loss_in and at.asked == set(allow.gradient_length)):
        return
    at.asked, at.loss_in = set(), False
    at.batch += 1
    if at.batch == len(allow.batch_sizes):
        at.epoch, at.batch = at.epoch + 1, 0
        at.closed = at.closed or at.final or at.epoch >= allow.max_epochs
