"""The PSI stage before training or prediction: the Host and each guest align rows by id.

Round trip per guest (ECDH over ristretto255, the default; RSA in brackets):

1. guest → Host ``PsiHello``: method, [its fresh RSA public key, e a prime > N], how
   many ids it holds (at most its ``max_ids`` in the job, else refused);
2. Host → guest ``PsiQuery``: ``[a]H(x)`` [``H(x)·r^e``] for each Host id (pseudorandom
   [uniform]: the guest learns only how many ids the Host holds, at most its cap);
3. guest → Host ``PsiAnswer``: ``[b]`` of the query [signed], same order, and the
   guest's own ``[b]H(y)`` [tags] in a random order;
4. Host → guest ``PsiResult``: positions, in that shuffled list, of the ids that
   **every** party holds, in the agreed order.

The Host learns which of its own ids each guest holds; a guest learns only which of its
own ids are in the final intersection; the Server takes no part and learns nothing.
Neither side can test an id it did not put in its own (capped) set: doing so needs
the other side's secret scalar [RSA key]. Every size is checked against the job's caps
and every value against its group before any work is done on it.

The agreed order is the keyed hash of the id (:func:`agreed_key`), which tells nobody
anything beyond the intersection.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from typing import Any

import numpy as np

from privfl.crypto import psi_ecdh as ecdh
from privfl.crypto import psi_rsa as rsa
from privfl.data.tables import IdTable, split_and_standardise
from privfl.data.views import PartyData
from privfl.errors import ConfigError, ProtocolError
from privfl.parties.files import write_json
from privfl.parties.session import PartyContext
from privfl.parties.vertical.handshake import big
from privfl.protocol.messages import PsiAnswer, PsiHello, PsiQuery, PsiResult

log = logging.getLogger("privfl.psi")
# What the Host keeps between its query and a guest's answer: the guest's RSA key and
# the blinding factors, or its own ECDH scalar.
HostSecret = tuple[rsa.RsaPublic, list[int]] | ecdh.Secret


def align(ctx: PartyContext, table: IdTable) -> IdTable:
    """The rows of ``table`` whose ids every party holds, in the order all parties agree."""
    began = time.monotonic()
    me = ctx.job.party(ctx.name)
    role = me.role
    if role != "server" and len(table.ids) > me.max_ids:
        raise ConfigError(
            f"this site holds {len(table.ids)} ids, more than its max_ids of {me.max_ids}; "
            f"raise [parties.{ctx.name}] max_ids in the job file (every site needs the same file)"
        )
    if role == "host":
        shared = host_side(ctx, table)
    elif role == "guest":
        shared = guest_side(ctx, table)
    else:
        raise ConfigError("the server takes no part in the intersection")
    log.info(
        "private set intersection (%s): %d of our %d ids are shared by every party (%.1f s)",
        ctx.job.data.psi,
        len(shared.ids),
        len(table.ids),
        time.monotonic() - began,
    )
    if not shared.ids:
        raise ConfigError(
            "the parties share no id; check that every --id-column holds the same kind of ids"
        )
    if len(shared.ids) < ctx.min_shared:  # a small group: each row weighs more in the model
        raise ConfigError(
            f"policy: the intersection holds {len(shared.ids)} ids, fewer than this site's "
            f"minimum {ctx.min_shared} (site policy [psi] min_intersection)"
        )
    return shared


def context(ctx: PartyContext) -> bytes:
    """Domain separation: tags of one session mean nothing in another."""
    return f"privfl-psi/{ctx.job.data.psi}/{ctx.job.session}".encode()


def guest_side(ctx: PartyContext, table: IdTable) -> IdTable:
    """Sign (RSA) or exponentiate (ECDH) the Host's query, show our tags, learn the result."""
    job, channel = ctx.job, ctx.channel
    method = job.data.psi
    if method == "rsa":
        signer = rsa.generate(job.data.psi_key_bits)
        hello = PsiHello("rsa", signer.public.n, signer.public.e, len(table.ids))
    else:
        secret = ecdh.new_secret()
        hello = PsiHello("ecdh", 0, 0, len(table.ids))
    channel.send(job.host, hello)
    query = channel.expect_body(PsiQuery, {job.host})
    cap = job.party(job.host).max_ids
    if len(query.values) > cap:
        raise ProtocolError(
            f"{job.host} queries {len(query.values)} ids, more than its max_ids of {cap}"
        )
    order = list(range(len(table.ids)))
    secrets.SystemRandom().shuffle(order)  # the tag order says nothing about our file
    ids = [table.ids[i] for i in order]
    if method == "rsa":
        n = signer.public.n
        answer = signer.sign(query.values.values)
        own = rsa.tags(signer.sign(rsa.full_domain_hash(ids, n, context(ctx))), n)
    else:
        answer = ecdh.multiply(secret, query.values.values)
        own = ecdh.multiply(secret, ecdh.hash_to_group(ids, context(ctx)))
    channel.send(job.host, PsiAnswer(values=big(answer), tags=big(own)))
    result = channel.expect_body(PsiResult, {job.host})
    positions = result.positions
    if positions.size and (
        positions.min() < 0
        or positions.max() >= len(order)
        or len(np.unique(positions)) != positions.size
    ):
        raise ProtocolError("the host's PSI result names positions outside our id list")
    return table.take([order[int(p)] for p in positions])


def host_side(ctx: PartyContext, table: IdTable) -> IdTable:
    """Query every guest, intersect all answers, tell each guest the shared positions."""
    job, channel = ctx.job, ctx.channel
    hellos = channel.gather(PsiHello, job.guests)
    for guest in job.guests:  # every hello is checked before any guest gets a query
        check_hello(ctx, guest, hellos[guest])
    pending: dict[str, HostSecret] = {}
    for guest in job.guests:
        hello = hellos[guest]
        query, secret = host_query(ctx, hello, table)
        pending[guest] = secret
        channel.send(guest, PsiQuery(values=big(query)))
    answers = channel.gather(PsiAnswer, job.guests)
    where: dict[str, dict[int, int]] = {}  # guest -> our row -> position in its tag list
    for guest in job.guests:
        answer = answers[guest]
        hello = hellos[guest]
        where[guest] = match(hello, pending[guest], answer, len(table.ids))
        log.info("%s holds %d of our ids", guest, len(where[guest]))
    shared = set(range(len(table.ids)))
    for rows in where.values():
        shared &= set(rows)
    order = sorted(shared, key=lambda row: agreed_key(ctx, table.ids[row]))
    for guest in job.guests:
        positions = np.array([where[guest][row] for row in order], dtype=np.int64)
        channel.send(guest, PsiResult(positions=positions))
    return table.take(order)


def check_hello(ctx: PartyContext, guest: str, hello: PsiHello) -> None:
    """Refuse a hello with the wrong method, too many ids, or a key that is no permutation."""
    job = ctx.job
    if hello.method != job.data.psi:
        raise ProtocolError(f"{guest} runs PSI method {hello.method}, the job {job.data.psi}")
    cap = job.party(guest).max_ids
    if hello.count > cap:
        raise ProtocolError(f"{guest} announces {hello.count} ids, more than its max_ids of {cap}")
    if hello.method == "rsa":
        try:
            rsa.check_public(rsa.RsaPublic(hello.modulus, hello.exponent), job.data.psi_key_bits)
        except ProtocolError as exc:
            raise ProtocolError(f"{guest}: {exc}") from exc


def host_query(ctx: PartyContext, hello: PsiHello, table: IdTable) -> tuple[list[int], HostSecret]:
    """Blinded hashes under the guest's RSA key, or ``[a]H(x)`` with a fresh ``a``."""
    if hello.method == "rsa":
        public = rsa.RsaPublic(hello.modulus, hello.exponent)  # checked by check_hello
        hashes = rsa.full_domain_hash(table.ids, public.n, context(ctx))
        blinded, factors = rsa.blind(hashes, public)
        return blinded, (public, factors)
    secret = ecdh.new_secret()
    return ecdh.multiply(secret, ecdh.hash_to_group(table.ids, context(ctx))), secret


def match(hello: PsiHello, secret: HostSecret, answer: PsiAnswer, rows: int) -> dict[int, int]:
    """Our rows whose tag appears among the guest's tags, with its position there."""
    if len(answer.values) != rows or len(answer.tags) != hello.count:
        raise ProtocolError("a guest's PSI answer has the wrong number of values")
    if isinstance(secret, tuple):
        public, factors = secret
        ours = rsa.tags(rsa.unblind(answer.values.values, factors, public), public.n)
        theirs = answer.tags.values
    else:
        if not all(ecdh.is_element(v) for v in answer.values.values):
            raise ProtocolError("a guest's ECDH PSI answer holds a value outside the group")
        ours = list(answer.values.values)
        theirs = tuple(ecdh.multiply(secret, answer.tags.values))
    position = {tag: i for i, tag in enumerate(theirs)}
    return {row: position[tag] for row, tag in enumerate(ours) if tag in position}


def agreed_key(ctx: PartyContext, identifier: str) -> bytes:
    """The order of the shared rows: a keyed hash, so it reveals nothing about any file."""
    key = f"privfl-order/{ctx.job.session}".encode()
    return hmac.new(key, identifier.encode(), hashlib.sha256).digest()


def training_rows(ctx: PartyContext, table: IdTable) -> PartyData:
    """Intersect, then split by id and standardise this party's own columns."""
    shared = align(ctx, table)
    data = ctx.job.data
    return split_and_standardise(shared, data.test_size, data.split_seed)


def recorded(
    ctx: PartyContext, table: IdTable | None, data: PartyData, summary: dict[str, Any]
) -> dict[str, Any]:
    """Add the intersection's size to the Host's summary.json (counts only, never ids)."""
    if table is None:
        return summary
    summary = {
        **summary,
        "intersection_size": data.rows,
        "host_rows": len(table.ids),
        "psi": {"method": ctx.job.data.psi, "key_bits": ctx.job.data.psi_key_bits},
    }
    write_json(ctx.out / "summary.json", summary)
    return summary
