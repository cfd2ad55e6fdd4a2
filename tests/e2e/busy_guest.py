"""A guest that is busy for SECONDS before its first forward pass of epoch 1.

Tests only: ``python tests/e2e/busy_guest.py SECONDS GATE vfl guest --job ...``, started
through gated.py's gate (GATE: its folder) like its peers. The stall holds the
interpreter as a long computation in C does (gmpy2 keeps the GIL through each powmod of a
large batch's encryptions): a libc sleep called with the GIL held, in pieces of a tenth
of a second, so no Python thread of the party runs meanwhile and only libzmq's own I/O
thread is left to answer the peers' heartbeats. (Encrypting for the whole stall held
the interpreter no more and took tens of CPU seconds from the tests running beside it.)
It ticks its progress (privfl/pulse.py) once per piece, as the crypto pools do, so its
peers hear "guest-1: encrypting scores 12/150"; with ``PRIVFL_TEST_MUTE=1`` it does not,
and its peers hear nothing but heartbeats.
"""

from __future__ import annotations

import ctypes
import os
import sys

from gated import run

import privfl.parties.vertical.guest as guest
from privfl import pulse
from privfl.protocol.messages import Batch, Forward

PIECE_MICROSECONDS = 100_000
# A foreign call through PyDLL keeps the GIL (CDLL would release it): the interpreter is held.
HOLD = ctypes.PyDLL(None).usleep


def stall_before_epoch_1(seconds: float, *, ticking: bool) -> None:
    """Wrap the guest's forward step so that epoch 1 starts ``seconds`` late."""
    real = guest.forward

    def forward(state: guest.GuestState, msg: Batch) -> Forward:
        if msg.epoch == 1 and msg.batch == 0:
            pieces = max(1, round(seconds * 1e6 / PIECE_MICROSECONDS))
            for piece in range(pieces):
                HOLD(PIECE_MICROSECONDS)
                if ticking:
                    pulse.tick(piece + 1, pieces)
        return real(state, msg)

    guest.forward = forward


if __name__ == "__main__":
    stall_before_epoch_1(float(sys.argv[1]), ticking=os.environ.get("PRIVFL_TEST_MUTE") != "1")
    run(sys.argv[2:])
