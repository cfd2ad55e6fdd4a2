"""How long the PSI stage takes: RSA blind signatures vs ristretto255 ECDH, same ids, same run.

Host and one guest each hold ``--ids`` ids (90 % shared), over the in-memory hub (no
network), both parties in threads of this one process (so on one core at a time: gmpy2
and libsodium hold the GIL). Prints seconds per method and the ratio.

    python benchmarks/psi_bench.py --ids 5000 --rsa-bits 2048
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from privfl.config.vertical import DataConfig, JobConfig, PartySpec
from privfl.data.tables import IdTable
from privfl.parties.session import PartyContext
from privfl.parties.vertical.psi import align
from privfl.protocol.channel import Channel
from privfl.protocol.memory import InMemoryHub


def run(method: str, bits: int, ids: int) -> tuple[float, int]:
    parties = {
        n: PartySpec(n, n.split("-")[0], f"mem://{n}", max_ids=max(ids, 1))
        for n in ("server", "host", "guest-1")
    }
    job = JobConfig(
        session=uuid.uuid4().hex,
        parties=parties,
        key_bits=2048,
        timeout_seconds=600,
        allow_weak_keys=bits < 2048,
        data=DataConfig(psi=method, psi_key_bits=bits),
    )
    shift = ids // 10
    sites = {
        "host": [f"id-{i}" for i in range(ids)],
        "guest-1": [f"id-{i}" for i in range(shift, ids + shift)],
    }
    hub = InMemoryHub(record=False)
    transports = {n: hub.transport(n) for n in sites}
    out: dict[str, Any] = {}

    def party(name: str) -> None:
        channel = Channel(transports[name], session=job.session, timeout=600)
        ctx = PartyContext(name=name, job=job, channel=channel, out=Path("."))
        table = IdTable(tuple(sites[name]), np.zeros((ids, 1)), ("x",))
        out[name] = align(ctx, table)

    began = time.perf_counter()
    threads = [threading.Thread(target=party, args=(n,)) for n in sites]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - began, len(out["host"].ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=2000)
    parser.add_argument("--rsa-bits", type=int, default=2048)
    args = parser.parse_args()
    rsa_s, rsa_n = run("rsa", args.rsa_bits, args.ids)
    ecdh_s, ecdh_n = run("ecdh", args.rsa_bits, args.ids)
    assert rsa_n == ecdh_n == args.ids - args.ids // 10
    print(f"ids per side {args.ids}, shared {rsa_n}")
    print(f"rsa  ({args.rsa_bits}-bit) {rsa_s:8.2f} s")
    print(f"ecdh (ristretto255) {ecdh_s:6.2f} s")
    print(f"rsa / ecdh        {rsa_s / ecdh_s:8.2f}")


if __name__ == "__main__":
    main()
