"""A guest that is busy encrypting for SECONDS before its first forward pass of epoch 1.

Tests only: ``python tests/e2e/busy_guest.py SECONDS vfl guest --job ...``. The stall is
real work holding the interpreter (Paillier encryptions, as a large batch would
need), so only libzmq's own I/O thread is left to answer the peers' heartbeats.
"""

from __future__ import annotations

import sys
import time

import privfl.parties.vertical.guest as guest
from privfl.cli import main
from privfl.protocol.messages import Batch, Forward


def stall_before_epoch_1(seconds: float) -> None:
    """Wrap the guest's forward step so that epoch 1 starts ``seconds`` late."""
    real = guest.forward

    def forward(state: guest.GuestState, msg: Batch) -> Forward:
        if msg.epoch == 1 and msg.batch == 0:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                state.key.encrypt([1, 2, 3])
        return real(state, msg)

    guest.forward = forward


if __name__ == "__main__":
    stall_before_epoch_1(float(sys.argv[1]))
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    main()
