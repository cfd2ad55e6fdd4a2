"""A guest that is busy encrypting for SECONDS before its first forward pass of epoch 1.

Tests only: ``python tests/e2e/busy_guest.py SECONDS GATE vfl guest --job ...``, started
through gated.py's gate (GATE: its folder) like its peers. The stall is
real work holding the interpreter (Paillier encryptions, as a large batch would
need), so only libzmq's own I/O thread is left to answer the peers' heartbeats. It
ticks its progress (privfl/pulse.py) once per tenth of a second of work, as the
crypto pools do, so its peers hear "guest-1: encrypting scores 212/300"; with
``PRIVFL_TEST_MUTE=1`` it does not, and its peers hear nothing but heartbeats.
"""

from __future__ import annotations

import os
import sys
import time

from gated import run

import privfl.parties.vertical.guest as guest
from privfl import pulse
from privfl.protocol.messages import Batch, Forward

PIECE_SECONDS = 0.1


def stall_before_epoch_1(seconds: float, *, ticking: bool) -> None:
    """Wrap the guest's forward step so that epoch 1 starts ``seconds`` late."""
    real = guest.forward

    def forward(state: guest.GuestState, msg: Batch) -> Forward:
        if msg.epoch == 1 and msg.batch == 0:
            pieces = max(1, round(seconds / PIECE_SECONDS))
            for piece in range(pieces):
                end = time.monotonic() + PIECE_SECONDS
                while time.monotonic() < end:
                    state.key.encrypt([1, 2, 3])
                if ticking:
                    pulse.tick(piece + 1, pieces)
        return real(state, msg)

    guest.forward = forward


if __name__ == "__main__":
    stall_before_epoch_1(float(sys.argv[1]), ticking=os.environ.get("PRIVFL_TEST_MUTE") != "1")
    run(sys.argv[2:])
