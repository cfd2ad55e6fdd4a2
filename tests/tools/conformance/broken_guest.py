"""privfl's guest with one deliberate protocol bug, for the conformance kit to catch.

``python broken_guest.py BUG vfl guest --job ... --party ...`` patches the bug in,
then runs the ordinary command line. Each bug is a blind spot the kit once had
(issue 13); tests/tools/conformance/test_broken_guests.py asserts the kit now fails it.
The generic bugs (``reused-noise``, ``no-rerandomise``) break any role: test_boost_conformance.py
runs them under a SecureBoost Host and guest too.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from privfl.crypto import paillier
from privfl.crypto.encoding import DATA_BITS, VALUE_BITS
from privfl.crypto.pools import NoisePool
from privfl.errors import ProtocolError
from privfl.parties.vertical import guest
from privfl.protocol.reliable import ReliableTransport


def sum_squares_scale() -> None:
    """Σz² encoded at 2^32 like the scores, not at 2^48."""
    encode = guest.encode

    def wrong(values: Any, bits: int, n: int) -> list[int]:
        return encode(values, VALUE_BITS if bits == VALUE_BITS + DATA_BITS else bits, n)

    guest.encode = wrong  # type: ignore[assignment]


def no_acks() -> None:
    """Never acknowledges a message (the link layer's ACK is left out)."""
    ReliableTransport._ack = lambda self, peer, inc, seq: None  # type: ignore[method-assign]


def abort_after_finish() -> None:
    """Fails after the Host's finish: sends an Abort and exits 1."""

    def fail(*args: Any, **kwargs: Any) -> None:
        raise ProtocolError("broken on purpose after finish")

    guest.save_model = fail  # type: ignore[assignment]


def cross_term_of_residual() -> None:
    """Computes the cross term against the residual instead of the others' scores."""
    backward = guest.backward

    def wrong(state: guest.GuestState, msg: guest.Residual) -> Any:
        others = msg.residual if msg.others is not None else None
        return backward(state, replace(msg, others=others))

    guest.backward = wrong  # type: ignore[assignment]


def reused_noise() -> None:
    """Draws one obfuscator and uses it for every encryption."""
    take = NoisePool.take
    kept: list[int] = []

    def same(self: NoisePool, count: int) -> list[int]:
        if not kept:
            kept.extend(take(self, 1))
        return kept * count

    NoisePool.take = same  # type: ignore[method-assign]


def no_rerandomise() -> None:
    """Sends its gradient and cross term without re-randomising them."""

    def keep(self: paillier.PublicKey, c: Sequence[int], noise: Any = None) -> list[int]:
        return [int(v) for v in c]

    paillier.PublicKey.rerandomize = keep  # type: ignore[method-assign]


def no_row_floor() -> None:
    """A SecureBoost guest that accepts a partition leaving a child below the row floor."""
    from privfl.parties.vertical.secureboost.guest import GuestBoost

    GuestBoost.floor = property(lambda self: 1)  # type: ignore[method-assign,assignment]


def any_row_sample() -> None:
    """A SecureBoost guest that takes whatever rows the Host names as the tree's sample."""
    from privfl.learning import secureboost as sb
    from privfl.parties.vertical.secureboost import guest

    honest = guest.on_gradients

    def trusting(state: Any, msg: Any) -> None:
        seeds = sb.tree_rows
        sb.tree_rows = lambda params, tree, rows: msg.rows
        try:
            honest(state, msg)
        finally:
            sb.tree_rows = seeds

    guest.on_gradients = trusting


def extra_histogram() -> None:
    """A SecureBoost guest that sends one packed histogram ciphertext too many."""
    from privfl.parties.vertical.secureboost import guest as boost

    pack = boost.pack_sums

    def longer(sums: Any, layout: Any, nsquare: int, span: int = 1) -> list[int]:
        packed = pack(sums, layout, nsquare, span)
        return [*packed, packed[-1]]

    boost.pack_sums = longer  # type: ignore[assignment]


def split_off_by_one() -> None:
    """A SecureBoost guest that splits one bin lower than the Host told it."""
    from privfl.parties.vertical.secureboost import guest as boost

    on_split = boost.on_split

    def lower(state: Any, msg: Any) -> Any:
        return on_split(state, replace(msg, bin=max(0, msg.bin - 1)))

    boost.on_split = lower  # type: ignore[assignment]


def _columns_by(rule: Callable[[Any, int, int, int], list[int]]) -> None:
    """A SecureBoost guest whose columns under ``colsample < 1`` follow ``rule``, not §6.9's."""
    import numpy as np

    from privfl.learning import secureboost as sb

    honest = sb.tree_features

    def wrong(params: Any, tree: int, group: int, features: int) -> Any:
        if params.colsample >= 1 or features == 0:
            return honest(params, tree, group, features)
        return np.array(sorted(rule(params, tree, group, features)), dtype=np.int64)

    sb.tree_features = wrong


def _drawn(entropy: list[int], features: int, count: int) -> list[int]:
    import numpy as np

    return [int(c) for c in np.random.default_rng(entropy).choice(features, count, replace=False)]


def first_columns() -> None:
    """Takes the first round(colsample·F) columns instead of drawing them."""
    _columns_by(lambda p, t, g, f: list(range(max(1, round(p.colsample * f)))))


def floor_count() -> None:
    """Draws ⌊colsample·F⌋ columns, not round(colsample·F)."""
    _columns_by(lambda p, t, g, f: _drawn([p.seed, t, 1 + g], f, max(1, int(p.colsample * f))))


def group_entropy() -> None:
    """Seeds the draw with [seed, tree, group], not [seed, tree, 1 + group]."""
    _columns_by(lambda p, t, g, f: _drawn([p.seed, t, g], f, max(1, round(p.colsample * f))))


def standard_in_djn() -> None:
    """Ignores the Server's h_s: standard r^n obfuscators in a djn session."""

    from privfl.crypto import pools

    def standard(n: int, workers: int = 0, h_s: int = 0, *args: Any, **kw: Any) -> NoisePool:
        return NoisePool(n, workers, 0, *args, **kw)

    # Every engine makes its pools through crypto.pools (crypto/engine.py).
    pools.NoisePool = standard  # type: ignore[assignment,misc]


def gradient_scale_4() -> None:
    """A linear guest that divides its gradient by 4, as if the residual were Taylor's 4d."""
    from privfl.learning.kinds.linear import Linear

    Linear.scale = 4.0  # type: ignore[misc]


def exp_at_2_32() -> None:
    """A Poisson guest that encodes exp(z) at 2^32 like the scores, not at 2^16."""
    from privfl.learning.kinds import poisson

    blocks = poisson.Poisson.forward_blocks

    def wrong(self: poisson.Poisson) -> Any:
        (name, _, func), last = blocks(self)
        return ((name, VALUE_BITS, func), last)

    poisson.Poisson.forward_blocks = wrong  # type: ignore[method-assign]


def class_major_scores() -> None:
    """A multiclass guest that sends its scores class by class, not row by row."""
    from privfl.learning.kinds.multiclass import MulticlassTaylor

    plain = MulticlassTaylor.forward_plain

    def wrong(self: MulticlassTaylor, z: Any, n: int) -> list[int]:
        return plain(self, z.reshape(-1, self.outputs).T.ravel(), n)

    MulticlassTaylor.forward_plain = wrong  # type: ignore[method-assign]


def basis_out_of_order() -> None:
    """A separable guest that sends its three sigmoids in the reverse order."""
    from privfl.learning.kinds.multiclass import MulticlassSeparable

    blocks = MulticlassSeparable.forward_blocks

    def wrong(self: MulticlassSeparable) -> Any:
        *sigmoids, last = blocks(self)
        return (*reversed(sigmoids), last)

    MulticlassSeparable.forward_blocks = wrong  # type: ignore[method-assign]


def shifted_prediction_rows() -> None:
    """A guest's prediction session that scores its rows one position off (a lost row)."""
    from privfl.parties.vertical import predict

    scores = predict.guest_scores

    def wrong(ctx: Any, z: Any, digest: str = "") -> Any:
        return scores(ctx, z[[*range(1, len(z)), 0]], digest)

    predict.guest_scores = wrong  # type: ignore[assignment]


def reversed_decision_rows() -> None:
    """A SecureBoost guest's prediction session that decides its rows in reverse order."""
    from privfl.parties.vertical.secureboost import predict

    decisions = predict.guest_decisions

    def wrong(ctx: Any, model: Any, x: Any, digest: str) -> Any:
        return decisions(ctx, model, x[::-1], digest)

    predict.guest_decisions = wrong  # type: ignore[assignment]


BUGS: dict[str, Callable[[], None]] = {
    "sum-squares-scale": sum_squares_scale,
    "no-acks": no_acks,
    "abort-after-finish": abort_after_finish,
    "cross-term-of-residual": cross_term_of_residual,
    "reused-noise": reused_noise,
    "no-rerandomise": no_rerandomise,
    "standard-in-djn": standard_in_djn,
    "no-row-floor": no_row_floor,
    "any-row-sample": any_row_sample,
    "extra-histogram": extra_histogram,
    "split-off-by-one": split_off_by_one,
    "first-columns": first_columns,
    "floor-count": floor_count,
    "group-entropy": group_entropy,
    "gradient-scale-4": gradient_scale_4,
    "exp-at-2^32": exp_at_2_32,
    "class-major-scores": class_major_scores,
    "basis-out-of-order": basis_out_of_order,
    "shifted-prediction-rows": shifted_prediction_rows,
    "reversed-decision-rows": reversed_decision_rows,
}

if __name__ == "__main__":
    BUGS[sys.argv[1]]()
    from privfl.cli import main

    main(sys.argv[2:], prog_name="privfl")
