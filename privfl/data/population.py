"""Which training rows each horizontal client holds, as index views into one shared dataset.

Two ways to form the clients, both public functions of the job (like the split today):

* ``client_rows = 0``: the training rows are partitioned among the clients (IID or
  Dirichlet label skew, :func:`privfl.data.images.split_clients`); at most one
  client per row.
* ``client_rows = r > 0``: a population study. Client ``c`` holds ``r`` row indices
  drawn uniformly *with replacement* from the training rows by a generator seeded
  with ``(seed, c)``. Nothing is stored per client: a client's rows are derived when
  it is sampled, so memory is O(clients per round), not O(population), and a job may
  name 1,000,000 clients over digits' 1,347 rows. Clients overlap (the same row
  belongs to many clients): a scale study of the system, not a claim about
  1,000,000 distinct people's data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privfl.data.images import split_clients

DRAW_STREAM = 11  # names the population draws among the job seed's uses


@dataclass(frozen=True)
class ClientRows:
    """Row indices per client: a stored partition, or per-client draws derived on demand."""

    clients: int
    rows: int  # training rows of the shared dataset
    seed: int
    client_rows: int = 0  # > 0: every client draws this many rows with replacement
    parts: tuple[np.ndarray, ...] = ()  # the partition (client_rows = 0)

    def __len__(self) -> int:
        return self.clients

    def __getitem__(self, client: int) -> np.ndarray:
        """The client's row indices into the shared training arrays (never a copy of rows)."""
        if not 0 <= client < self.clients:
            raise IndexError(f"client {client} is outside 0..{self.clients - 1}")
        if self.client_rows == 0:
            return self.parts[client]
        rng = np.random.default_rng([self.seed, client, DRAW_STREAM])
        return np.sort(rng.integers(0, self.rows, size=self.client_rows))

    @property
    def smallest(self) -> int:
        """Rows of the smallest client (the worst case of the sensitivity and sampling rate)."""
        return self.client_rows or min(len(p) for p in self.parts)

    @property
    def largest(self) -> int:
        """Rows of the largest client (the most local DP-SGD steps)."""
        return self.client_rows or max(len(p) for p in self.parts)


def client_rows(
    y: np.ndarray, clients: int, dirichlet: float, seed: int, per_client: int = 0
) -> ClientRows:
    """The clients' row indices: a partition (``per_client = 0``) or per-client IID draws."""
    if per_client == 0:
        parts = split_clients(y, clients, dirichlet, np.random.default_rng(seed))
        return ClientRows(clients, len(y), seed, 0, tuple(parts))
    return ClientRows(clients, len(y), seed, per_client)
