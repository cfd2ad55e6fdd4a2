"""One compute thread per process: torch's intra-op pool and numpy's BLAS pool alike.

The horizontal roles and the experiments work on small tensors and vectors (a
model of ~20,000 weights, batches of 16 to 64 rows): a second thread saves little
there, and on a machine whose cores other processes already use it spins waiting
for the first. Measured on 2 cores at load 6-9 (`privfl experiment hfl-nbafl
--quick`): 40 CPU s with numpy's two BLAS threads, 15 with one, its wall time
halved too; DP-SGD vs FSDP: 160 CPU s with torch's two threads, 26 with one.
Parallelism comes from processes (client hosts, worker pools) instead.
"""

from __future__ import annotations

import torch
from threadpoolctl import threadpool_limits


def one_compute_thread() -> None:
    """Limit this process to one torch thread and one BLAS thread (for good: no restore)."""
    torch.set_num_threads(1)
    threadpool_limits(limits=1, user_api="blas")
