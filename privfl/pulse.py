"""How far a long step is, reported from inside the computation: busy is not dead.

The code that does the work (the crypto pools, a party's steps) calls :func:`tick` as
pieces of it finish; a party names the step it is in with :func:`step`; the party's
loop installs a reporter (its Channel's, which tells the peers at most every few
seconds: protocol/channel.py). Without a reporter a tick costs one global lookup, so
pure code can tick freely; this module imports nothing of ours.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Reporter = Callable[[str, int, int], None]
IDLE_STEP = "computing"

_reporter: Reporter | None = None
_step = IDLE_STEP


def tick(done: int, total: int) -> None:
    """``done`` of ``total`` pieces of the current step are finished."""
    if _reporter is not None:
        _reporter(_step, max(0, min(done, total)), max(total, 0))


@contextmanager
def step(name: str, total: int = 0) -> Iterator[None]:
    """Name the step the party is in while the block runs (ticks then carry this name)."""
    global _step
    outer, _step = _step, name
    try:
        tick(0, total)
        yield
    finally:
        _step = outer


@contextmanager
def reporting(reporter: Reporter) -> Iterator[None]:
    """Send every tick of the block to ``reporter`` (one reporter at a time, per process)."""
    global _reporter
    outer, _reporter = _reporter, reporter
    try:
        yield
    finally:
        _reporter = outer
