"""How far a long step is, reported from inside the computation: busy is not dead.

The code that does the work (the crypto pools, a party's steps) calls :func:`tick` as
pieces of it finish; a party names the step it is in with :func:`step`; the party's
loop installs a reporter (its Channel's, which tells the peers at most every few
seconds: protocol/channel.py). Without a reporter a tick costs one lookup, so pure
code can tick freely; this module imports nothing of ours.

The reporter and the step are context variables, not globals: parties that share one
process (the in-memory tests run each in its own thread) each report to their own
Channel. A thread starts with no reporter: its ticks are dropped, never sent on
another party's Channel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Reporter = Callable[[str, int, int], None]
IDLE_STEP = "computing"

_reporter: ContextVar[Reporter | None] = ContextVar("privfl_pulse_reporter", default=None)
_step: ContextVar[str] = ContextVar("privfl_pulse_step", default=IDLE_STEP)


def tick(done: int, total: int) -> None:
    """``done`` of ``total`` pieces of the current step are finished."""
    reporter = _reporter.get()
    if reporter is not None:
        reporter(_step.get(), max(0, min(done, total)), max(total, 0))


@contextmanager
def step(name: str, total: int = 0) -> Iterator[None]:
    """Name the step the party is in while the block runs (ticks then carry this name)."""
    token = _step.set(name)
    try:
        tick(0, total)
        yield
    finally:
        _step.reset(token)


@contextmanager
def reporting(reporter: Reporter) -> Iterator[None]:
    """Send every tick of the block, in this thread, to ``reporter`` (one at a time)."""
    token = _reporter.set(reporter)
    try:
        yield
    finally:
        _reporter.reset(token)
