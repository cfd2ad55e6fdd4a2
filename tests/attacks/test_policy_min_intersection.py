"""A Host that narrows the PSI to a handful of patients is refused by a guest's site policy.

The deviating Host brings only the three ids it is curious about, so the joint model
is fitted to three of the guest's rows (each weighs a third of every gradient). The
guest's policy sets ``[psi] min_intersection``: it stops after the PSI, before any
training message. The leaky arm runs the same guest without the policy: it goes on
with three rows.
"""

from __future__ import annotations

import pytest
from psi_harness import id_table, job_of, run_stage

from privfl.data.tables import IdTable
from privfl.errors import ConfigError
from privfl.protocol.memory import InMemoryHub

GUEST = [f"patient-{i:03d}" for i in range(200)]
TARGETS = GUEST[:3]  # the three the Host is curious about


@pytest.mark.parametrize("defended", [True, False])
def test_a_tiny_intersection_stops_the_guest(defended: bool) -> None:
    # Prepare: the guest holds 200 ids; the Host brings three of them.
    job = job_of(1, "ecdh")
    least = {"guest-1": 50} if defended else {}

    # Act
    results = run_stage(
        job,
        {"host": id_table(TARGETS), "guest-1": id_table(GUEST)},
        InMemoryHub(),
        min_shared=least,
    )

    # Assert: defended, one line naming the rule; leaky, the guest trains on three rows.
    guest = results["guest-1"]
    if defended:
        assert isinstance(guest, ConfigError)
        assert str(guest) == (
            "policy: the intersection holds 3 ids, fewer than this site's minimum 50 "
            "(site policy [psi] min_intersection)"
        )
    else:
        assert isinstance(guest, IdTable) and sorted(guest.ids) == TARGETS
