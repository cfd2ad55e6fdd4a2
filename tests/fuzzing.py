"""The fuzz corpus (every golden message's frames) and one mutation step, for the fuzz tests."""

from __future__ import annotations

import json
import random
from pathlib import Path

VECTORS = Path(__file__).parents[1] / "privfl" / "tools" / "conformance" / "vectors"
GOLDEN = json.loads((VECTORS / "golden.json").read_text())
CORPUS = [[bytes.fromhex(f) for f in m["frames"]] for m in GOLDEN["messages"]]


def mutate(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    """One random structural or byte-level mutation of a message's frames."""
    frames = list(frames) or [rng.randbytes(4)]
    i = rng.randrange(len(frames))
    data = bytearray(frames[i])
    op = rng.randrange(7)
    if op == 0 and data:  # flip bits
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif op == 1:  # insert random bytes
        at = rng.randint(0, len(data))
        data[at:at] = rng.randbytes(rng.randint(1, 16))
    elif op == 2 and data:  # delete a range
        at = rng.randrange(len(data))
        del data[at : at + rng.randint(1, 16)]
    elif op == 3:  # truncate
        del data[rng.randint(0, len(data)) :]
    elif op == 4 and data:  # interesting msgpack type bytes
        data[rng.randrange(len(data))] = rng.choice([0xC1, 0xC7, 0xC8, 0xC9, 0xD4, 0xDD, 0xDF])
    elif op == 5:  # splice another message's frame in
        other = rng.choice(CORPUS)
        data = bytearray(other[rng.randrange(len(other))])
    else:  # add or drop a frame
        return frames[:-1] if rng.random() < 0.5 else [*frames, rng.randbytes(8)]
    frames[i] = bytes(data)
    return frames
