"""Run in the Ray head's namespace by test_ray_two_nodes.py: train twice, print one JSON line.

Trains a logistic regression with every party computing inline while the cluster at
``argv[1]`` starts, waits for both of its nodes, trains again with the guest's workers
on the two-node cluster, and reports whether the models are equal and on how many nodes
the guest's actors ran. (A pool's or a one-node cluster's workers give the inline
result: tests/crypto/test_engines.py, tests/parties/vertical/test_ray_engine.py.)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
from helpers import failures, memory_job, read_model, read_summary, run_in_threads

from privfl.crypto.engine import Engine
from privfl.protocol.memory import InMemoryHub

JOIN_SECONDS = 300.0  # a cold worker node on a busy machine; the wait ends when it joins


def node() -> list[int]:
    """Worker task (sent by value from this script): the node it ran on, as an integer."""
    return [int(ray.get_runtime_context().get_node_id()[:12], 16)]


def train(address: str | None, out: Path) -> dict[str, Any]:
    job = memory_job(1, epochs=2, timeout=120.0)  # a busy machine with two Ray nodes on it
    # Without a cluster the guest computes inline; the Host always does (no pools of
    # worker interpreters to start): the guest's workers are all that the runs differ in.
    guest: dict[str, Any] = {"workers": 2, "engine": Engine("ray", address)} if address else {}
    options = {"host": {"workers": 1, "label_rng": np.random.default_rng(7)}, "guest-1": guest}
    results = run_in_threads(job, InMemoryHub(record=False), out, options=options)
    assert not failures(results), failures(results)
    return {
        "weights": [read_model(out, n)["weights"] for n in ("host", "guest-1")],
        "loss": read_summary(out)["loss_history"],
    }


def main(address: str, out: Path) -> None:
    # The inline run first: it trains while the two nodes are still starting and joining
    # (mostly waiting: the raylets' start-up, the worker node's registration).
    inline = train(None, out / "inline")
    ray.init(address=address, log_to_driver=False)
    deadline = time.monotonic() + JOIN_SECONDS
    # Alive is not enough: a node's CPUs must be known to the scheduler too, or the
    # workers' soft node affinity may fall back to the head (seen once: every actor there).
    while (
        sum(bool(n["Alive"]) for n in ray.nodes()) < 2 or ray.cluster_resources().get("CPU", 0) < 2
    ):
        if time.monotonic() > deadline:
            raise SystemExit("the second Ray node never joined")
        time.sleep(0.5)
    pool = Engine("ray", address).pool(1 << 64 | 1, 2)
    try:
        nodes = pool.run_split(node, [(), (), (), ()])
    finally:
        pool.close()
    same = inline == train(address, out / "ray")
    print(json.dumps({"same_model": same, "nodes": len(set(nodes))}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
