"""Every SecureBoost histogram ciphertext is re-randomised by the guest before it leaves.

The attack: the Host encrypted every row itself, so it knows each row's ciphertext.
A bin sum the guest did not re-randomise is a deterministic product of those
ciphertexts — the Host can then test any guess of the guest's binning by recomputing
it, even between binnings whose decrypted sums are equal (two rows with the same
gradient swapped between bins). At tree 0 every row of a label has the same
gradient, so the plaintext histogram shows only counts per label; the ciphertext
would show which rows. On the real traffic neither guess matches.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from helpers import decoded_traffic, failures, memory_job, party_data, run_in_threads

from privfl.config.vertical import ModelConfig
from privfl.crypto.gmp import mpz
from privfl.learning import secureboost as sb
from privfl.parties.vertical.secureboost.common import Layout, pack_sums, params_of
from privfl.protocol.boost_messages import BoostGradients, BoostHistogram
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import PublicKeyMessage


def bin_products(cts: list[int], binned: np.ndarray, bins: int, n2: int) -> list[int]:
    out = [mpz(1)] * bins
    for c, b in zip(cts, binned.tolist(), strict=True):
        out[b] = out[b] * c % n2
    return [int(v) for v in out]


def test_histograms_do_not_reveal_which_rows_are_in_a_bin(tmp_path: Path) -> None:
    job = replace(
        memory_job(1, timeout=30.0),
        model=ModelConfig(kind="secureboost", trees=1, depth=1, bins=8, instance_space="shared"),
    )
    hub = InMemoryHub()
    results = run_in_threads(job, hub, tmp_path)
    assert not failures(results), failures(results)
    traffic = decoded_traffic(hub)
    grads = next(b for _, _, _, b in traffic if isinstance(b, BoostGradients))
    hist = next(b for _, _, _, b in traffic if isinstance(b, BoostHistogram))
    guest = party_data(job)["guest-1"]
    host = party_data(job)["host"]
    assert host.y_train is not None
    params = params_of(job)
    binned = sb.bin_columns(guest.x_train, sb.quantile_edges(guest.x_train, params.bins))
    n = int(next(b for s, _, _, b in traffic if s == "host" and isinstance(b, PublicKeyMessage)).n)
    n2 = n * n
    layout = Layout(len(grads.rows), n.bit_length())
    column = 0
    true_bins = binned[:, column].copy()
    # Two rows of the same label (the same g and h at tree 0) in different bins.
    labels = host.y_train
    a = int(np.flatnonzero((labels == 1) & (true_bins == 0))[0])
    b = int(np.flatnonzero((labels == 1) & (true_bins == params.bins - 1))[0])
    swapped = true_bins.copy()
    swapped[a], swapped[b] = swapped[b], swapped[a]
    cts = list(grads.values.values)

    def unrandomised(bins_of: np.ndarray) -> list[int]:
        sums = []
        for j in range(binned.shape[1]):
            col = bins_of if j == column else binned[:, j]
            sums.extend(bin_products(cts, col, params.bins, n2))
        return pack_sums(sums, layout, n2)

    honest, guess = unrandomised(true_bins), unrandomised(swapped)
    g = np.where(labels == 1, 1, 0)
    assert np.array_equal(  # the decrypted sums cannot tell the two binnings apart
        np.bincount(true_bins, weights=g, minlength=params.bins),
        np.bincount(swapped, weights=g, minlength=params.bins),
    )
    # Unrandomised, the ciphertexts can: the Host would learn that row a is in bin 0.
    assert honest[0] != guess[0]
    sent = list(hist.values.values)
    assert len(sent) == len(honest)
    assert all(s != h and s != x for s, h, x in zip(sent, honest, guess, strict=True))
