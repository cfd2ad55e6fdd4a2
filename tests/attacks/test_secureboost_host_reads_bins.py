"""A documented capability: a deviating SecureBoost Host reads ``slot`` rows' bins per tree.

The attack (against the real guest code): the guest cannot see the plaintexts of the
Host's per-row ciphertexts, so a Host that encrypts ``2^j`` for row ``j < slot`` (and 0
for every other row) instead of ``(g + 2^20, h, 1)`` gets, in each bin sum of the
root histogram, the bit set of the rows in that bin: the bin of each of those rows in
every guest column. Nothing in the guest's view tells the two plaintexts apart
(IND-CPA is what hides the gradients from it), so it cannot refuse; what bounds the
reading is the guest's refusal of trees past the job's ``trees`` and of row samples
other than the seed's: at most ``trees × slot`` rows per session
(docs/security.md, ``boost_gradients`` and ``boost_nodes`` rows).
"""

from __future__ import annotations

import numpy as np
from helpers import memory_job, party_data

from privfl.crypto.paillier import generate_keypair
from privfl.crypto.pools import NoisePool
from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost.common import Layout
from privfl.parties.vertical.secureboost.guest import GuestBoost, step
from privfl.protocol import fresh
from privfl.protocol.boost_messages import BoostGradients, BoostHistogram, BoostNodes

KEY = generate_keypair(512)


def test_a_deviating_host_reads_one_slot_of_rows_per_tree() -> None:
    job = memory_job(1)
    data = party_data(job)["guest-1"]
    rows, columns, bins = len(data.x_train), data.x_train.shape[1], 8
    public, private = KEY
    params = sb.BoostParams(trees=10, depth=3, bins=bins)
    guest = GuestBoost(data=data, key=public, params=params, group=1, noise=NoisePool(public.n, 1))
    layout = Layout(rows, public.bits)
    marked = np.arange(layout.slot)  # the rows the Host reads in this tree
    plain = [1 << j if j < layout.slot else 0 for j in range(rows)]
    cts = fresh.encrypt(public, plain)
    step(guest, BoostGradients(0, np.arange(rows, dtype=np.int64), cts))  # not refused
    reply = step(guest, BoostNodes(0, 0, np.array([0], dtype=np.int64)))
    assert isinstance(reply, BoostHistogram)
    packed = private.decrypt(reply.values.values)
    sums = [
        (int(p) >> (layout.slot * k)) & ((1 << layout.slot) - 1)
        for p in packed
        for k in range(layout.per_ciphertext)
    ][: columns * bins]
    read = np.full((len(marked), columns), -1)
    for index, value in enumerate(sums):
        column, bin_ = divmod(index, bins)
        for j in marked.tolist():
            if value >> j & 1:
                read[j, column] = bin_
    truth = guest.binned["train"][marked]
    assert np.array_equal(read, truth)  # every marked row's bin in every column
    print(f"read {read.size} cells ({layout.slot} rows × {columns} columns) from one tree")
    assert read.size == layout.slot * columns
    # With the job's trees capped by the guest, a session reads at most trees × slot rows.
    assert min(rows, params.trees * layout.slot) == rows  # here: every row, so the doc says so
