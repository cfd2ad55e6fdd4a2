"""Zero-sum guest masks (crypto/guest_masks.py): the sum over guests is unmasked, one is not."""

from __future__ import annotations

import hashlib

import pytest

from privfl.crypto import guest_masks as gm

N = (1 << 511) + 187  # an odd 512-bit modulus: the masks' maths needs no factors


def masks_of(guests: tuple[str, ...], what: str = "forward/0/0", count: int = 7) -> list[list[int]]:
    pairs = gm.draw_seeds(guests)
    return [
        gm.GuestMasks("s", g, guests, gm.seeds_of(g, pairs)).masks(N, what, count) for g in guests
    ]


@pytest.mark.parametrize("guests", [("g1", "g2"), ("g1", "g2", "g3"), ("a", "b", "c", "d")])
def test_the_masks_of_every_guest_sum_to_zero_mod_n(guests: tuple[str, ...]) -> None:
    # Prepare / act
    masks = masks_of(guests)

    # Assert: every plaintext's masks cancel, and no guest's own mask is zero.
    assert all(sum(column) % N == 0 for column in zip(*masks, strict=True))
    assert all(all(m != 0 for m in row) for row in masks)  # P(a zero) = 7·|G|/n < 2^-500


def test_a_masked_sum_is_the_plain_sum_bit_for_bit() -> None:
    # Prepare: three guests' plaintexts near the top and bottom of Z_n.
    guests = ("g1", "g2", "g3")
    pairs = gm.draw_seeds(guests)
    plain = {"g1": [1, N - 1, 5], "g2": [2, 3, N - 7], "g3": [0, 0, 11]}

    # Act
    sent = {
        g: gm.GuestMasks("s", g, guests, gm.seeds_of(g, pairs)).add(N, "scores/1/test", plain[g])
        for g in guests
    }

    # Assert
    for i in range(3):
        assert sum(sent[g][i] for g in guests) % N == sum(plain[g][i] for g in guests) % N


def test_labels_sessions_and_seeds_give_independent_masks() -> None:
    # Prepare
    seed = bytes(range(32))
    one = gm.GuestMasks("s", "g1", ("g1", "g2"), {"g2": seed})

    # Act
    forward, other_batch = one.masks(N, "forward/0/0", 3), one.masks(N, "forward/0/1", 3)
    other_session = gm.GuestMasks("t", "g1", ("g1", "g2"), {"g2": seed}).masks(N, "forward/0/0", 3)

    # Assert: nothing repeats across labels, sessions or positions.
    assert len({*forward, *other_batch, *other_session}) == 9


def test_a_known_answer_pins_the_prf() -> None:
    # Prepare: the stream of guest g1's pair with g2 is SHAKE-256 over the documented input.
    seed = bytes(32)
    width = (N.bit_length() + gm.SPARE_BITS + 7) // 8
    data = hashlib.shake_256(gm.DOMAIN + seed + b"s\0g1\0g2\0forward/0/0").digest(2 * width)
    want = [int.from_bytes(data[:width], "big") % N, int.from_bytes(data[width:], "big") % N]

    # Act
    first = gm.GuestMasks("s", "g1", ("g1", "g2"), {"g2": seed}).masks(N, "forward/0/0", 2)
    second = gm.GuestMasks("s", "g2", ("g1", "g2"), {"g1": seed}).masks(N, "forward/0/0", 2)

    # Assert: the first guest adds the stream, the second subtracts it.
    assert first == want
    assert second == [(-w) % N for w in want]


def test_one_guest_adds_nothing_and_a_wrong_seed_set_is_refused() -> None:
    alone = gm.GuestMasks("s", "g1", ("g1",))
    assert alone.add(N, "forward/0/0", [3, N + 4]) == [3, 4]
    with pytest.raises(ValueError, match="one 32-byte seed per other guest"):
        gm.GuestMasks("s", "g1", ("g1", "g2", "g3"), {"g2": bytes(32)})
    with pytest.raises(ValueError, match="one 32-byte seed per other guest"):
        gm.GuestMasks("s", "g1", ("g1", "g2"), {"g2": bytes(31)})


def test_the_seeds_round_trip_their_wire_form() -> None:
    seeds = gm.seeds_of("g2", gm.draw_seeds(("g1", "g2", "g3")))
    assert gm.decode_seeds(gm.encode_seeds(seeds)) == seeds
    assert list(seeds) == ["g1", "g3"]


def test_a_label_masks_one_vector_only() -> None:
    # Prepare
    masks = gm.GuestMasks("s", "g1", ("g1", "g2"), {"g2": bytes(32)})
    masks.add(N, "scores/1/test", [1, 2])

    # Act / Assert: the same masks on a second vector would give the difference away.
    with pytest.raises(ValueError, match="used before"):
        masks.add(N, "scores/1/test", [3, 4])
    assert masks.add(N, "scores/2/test", [3, 4]) != [3, 4]
