"""SecureBoost benchmark: seconds per tree with real processes, against the arithmetic's floor.

Per tree the protocol needs: one fresh encryption per tree row (Host), the bin
additions of the guest's histograms (the mulmods n² its bin products compute over each
node it sums directly, as the guest counts them: one per row and column, fewer where it
takes two columns together, secureboost/binsums.py), an inversion and a mulmod per bin
of each node taken as parent minus sibling, the Horner packing (one ``c^(2^slot)`` and a
mulmod per packed bin sum but the last of each ciphertext), one fresh obfuscation per
packed ciphertext (guest: a full-length ``r^n`` in either obfuscation, as what goes back
to the key's holder must be) and one decryption of it (Host). The Host holds the primes, so
its encryptions are counted at the cost of its CRT obfuscators
(crypto.paillier.obfuscators_crt, in either obfuscation) in the tasks its workers compute
them in, the guests' at the public-key cost. The floor is their measured unit costs
times the counts of the real run, spread over every core.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from privfl.config.vertical import OBFUSCATIONS, DataConfig, ModelConfig
from privfl.crypto.gmp import mpz, powmod
from privfl.crypto.paillier import obfuscators_crt, private_primes
from privfl.crypto.pools import CHUNK, bulk_chunk
from privfl.data.views import Table, split_view
from privfl.errors import ConfigError
from privfl.learning import secureboost as sb
from privfl.learning.metrics import binary_metrics
from privfl.parties.vertical.secureboost.common import Layout
from privfl.runs.kits import demo_job, write_kit
from privfl.runs.launcher import EpochProgress, start_parties, supervise
from privfl.tools.bench import stages
from privfl.tools.bench.runs import LineTally, MemoryWatch
from privfl.tools.bench.workload import TEST_SIZE, Workload, breast_cancer, write_csv

Log = Callable[[str], None]
GRADIENTS_SENT = b'"kind": "boost_gradients"'
"""The Host's audit line of a tree's gradients (only the Host sends them): a tree's start."""


def synthetic_boost(
    total: int = 10_000, host: int = 10, guest: int = 20, seed: int = 0
) -> Workload:
    """``total`` rows (75/25 split) of ``host`` + ``guest`` columns; labels need interactions."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(total, host + guest))
    w = rng.normal(size=x.shape[1]) / np.sqrt(x.shape[1])
    z = x @ w + x[:, 0] * x[:, host] - np.abs(x[:, host + 1]) + 0.8
    y = (z + rng.logistic(scale=0.5, size=total) > 0).astype(np.int64)
    host_table = Table(x=x[:, :host], feature_names=tuple(f"h{i}" for i in range(host)), y=y)
    guest_table = Table(x=x[:, host:], feature_names=tuple(f"g{i}" for i in range(guest)))
    return Workload(
        f"synthetic_{total}x{host + guest}",
        split_view(host_table, TEST_SIZE, 0),
        split_view(guest_table, TEST_SIZE, 0),
        {"host": host_table, "guest-1": guest_table},
    )


def best_of(
    func: Callable[[], object],
    count: int,
    repeats: int = 15,
    pick: Callable[[list[float]], float] = min,
) -> float:
    """CPU seconds per call: ``pick`` (the least by default) of ``repeats`` means over
    ``count`` calls.

    CPU time, not wall time: on a shared machine other jobs stretch the wall clock
    more than the work an operation takes (though shared caches inflate CPU time too).
    """
    return pick(stages.round_means(func, count, repeats, time.process_time))


SAMPLE_TASK = 1024
"""Most obfuscators in the one call that prices the key holder's: its workers' tasks can
be larger (a bulk prefetch's, :func:`pools.bulk_chunk`), but past about 500 per task the
cost per obfuscator no longer falls (2048 bits: 0.39–0.41 ms from 512 to 4,096, against
0.44 at 32), and one call at 1,024 is already 0.4 CPU-s."""


class Unit(NamedTuple):
    """How one operation is priced: ``func`` called ``calls`` times per repeat, ``per``
    operations a call; ``repeats`` rounds around a run; ``warm``: an untimed call before
    an in-run sample (:func:`stages.sample_once`)."""

    func: Callable[[], object]
    calls: int
    per: int = 1
    repeats: int = 15
    warm: bool = True


def host_task(rows: int, workers: int) -> int:
    """Obfuscators per task of the key holder's workers for a tree of ``rows`` rows (one
    guest): the bulk prefetch's task size (:func:`pools.bulk_chunk`), at most
    :data:`SAMPLE_TASK`; with one worker, the ``CHUNK`` a pool computes inline at a time."""
    return min(bulk_chunk(rows, workers), SAMPLE_TASK) if workers > 1 else CHUNK


def _unit_ops(bits: int, rows: int, keys: tuple[Any, Any, Any], workers: int) -> dict[str, Unit]:
    """Per operation: one call, how many calls price it, and how many operations a call is.

    Each in the shape a worker computes it: the guest's re-randomisations one ``r^n`` at a
    time, the Host's obfuscators in its workers' bulk tasks (``workers`` per data holder).
    """
    public, private, _ = keys  # floor_per_tree prices no DJN obfuscation
    p, q = private_primes(private)
    [c] = public.encrypt([1])
    a, b, n2 = stages.two_ciphertexts(public)
    shift = mpz(1) << Layout(rows, bits).slot
    obfuscators_crt(public.n, p, q, 1)  # the key holder's tables, outside the timing
    task = host_task(rows, workers)
    return {
        "obfuscation_standard": Unit(lambda: public.fresh_noise(1), 20),
        # The Host holds the primes: its own encryptions cost two half-size fixed-base
        # powers; in its workers' tasks, a table row serving many exponents while cached.
        "obfuscation_standard_host": Unit(
            lambda: obfuscators_crt(public.n, p, q, task), 1, task, repeats=5, warm=False
        ),
        "decrypt": Unit(lambda: private.decrypt([c]), 50),
        "mulmod": Unit(lambda: a * b % n2, 20_000),
        "invert": Unit(lambda: powmod(a, -1, n2), 2_000),
        "shift": Unit(lambda: powmod(a, shift, n2), 2_000),
    }


def unit_costs(
    bits: int,
    rows: int,
    keys: tuple[Any, Any, Any] | None = None,
    pick: Callable[[list[float]], float] = min,
    workers: int = 1,
) -> dict[str, float]:
    """Seconds per operation at ``bits``: obfuscations, decryption, mulmod, inversion, shift.

    ``keys`` (a fresh triple of :func:`stages.keys` if None); ``pick``: see :func:`best_of`;
    ``workers``: each data holder's (the Host's task size).
    """
    ops = _unit_ops(bits, rows, keys or stages.keys(bits), workers)
    return {name: best_of(u.func, u.calls, u.repeats, pick) / u.per for name, u in ops.items()}


def unit_samples(
    bits: int, rows: int, keys: tuple[Any, Any, Any], workers: int = 1
) -> dict[str, Callable[[], float]]:
    """One in-run sample per operation (:class:`stages.PriceSampler`): a twentieth of the
    calls of one of :func:`unit_costs`' repeats, at least one (at most about 0.4 s of CPU
    at 2048 bits, one task of the key holder's obfuscators)."""
    return {
        name: functools.partial(stages.sample_once, u.func, max(1, u.calls // 20), u.per, u.warm)
        for name, u in _unit_ops(bits, rows, keys, workers).items()
    }


def costs_around(
    bits: int,
    rows: int,
    keys: tuple[Any, Any, Any],
    run: Callable[[], dict[str, Any]],
    workers: int = 1,
) -> tuple[dict[str, Any], stages.Pricing]:
    """``run()`` and the unit costs it is judged at: the typical (median) cost of each
    operation sampled while it runs (:class:`stages.PriceSampler`), and measured just
    before and just after it.

    Under load every operation costs more CPU than on an idle machine (shared caches,
    short time slices), the parties' as much as the bench's: prices taken under the
    run's own load isolate what the parties do beyond the arithmetic, where the least
    cost of a quiet moment would count the neighbours' contention as our overhead.
    """
    return stages.priced_around(
        lambda: unit_costs(bits, rows, keys, statistics.median, workers),
        run,
        unit_samples(bits, rows, keys, workers),
    )


ROW_SHAPED = ("shift", "obfuscation_standard_host")
"""Operations whose unit depends on the row count: the packing shift (the slot's width)
and the Host's obfuscators (its workers' task size)."""


def least_so_far(costs: dict[str, float], least: dict[str, float]) -> dict[str, float]:
    """Each operation's least price over an invocation's workloads so far: ``costs`` (this
    workload's) against ``least``, but for :data:`ROW_SHAPED` ones (this workload's own)."""
    return {k: v if k in ROW_SHAPED else min(v, least.get(k, v)) for k, v in costs.items()}


def reference_auc(w: Workload, params: sb.BoostParams) -> float:
    """Held-out AUC of the plain reference booster (the federated trees equal its trees)."""
    assert w.host.y_train is not None and w.host.y_test is not None
    model = sb.fit([w.host.x_train, w.guest.x_train], w.host.y_train.astype(float), params)
    probability = model.predict_proba([w.host.x_test, w.guest.x_test])
    return binary_metrics(w.host.y_test, probability)["auc"]


def run_boost(
    w: Workload,
    bits: int,
    obfuscation: str,
    model: ModelConfig,
    out: Path,
    plots: bool = True,
    workers: int = 0,
) -> dict[str, Any]:
    """Train with Server, Host and one Guest as processes; per-tree seconds and counts.

    ``plots`` False: the Host draws none (``vfl host --no-plots``). ``workers``: each data
    holder's ``--workers`` (0: one per core; 1: its Paillier work inline, no pool)."""
    job = demo_job(guests=1, key_bits=bits, allow_weak_keys=True)
    job = replace(
        job,
        obfuscation=obfuscation,
        timeout_seconds=600.0,
        model=model,
        data=DataConfig(test_size=TEST_SIZE, split_seed=0),
        # A timing bench: label DP off, so its trees equal the reference's (reference_auc);
        # flips would change the trees now and then, not the work per tree.
        label_dp=replace(job.label_dp, epsilon=math.inf),
    )
    extra = {name: ["--workers", str(workers)] for name in (job.host, *job.guests)}
    extra[job.host] += [] if plots else ["--no-plots"]
    if w.tables is not None:
        specs = {
            name: replace(
                spec, columns=(), feature_count=w.tables[name].x.shape[1] if name in w.tables else 0
            )
            for name, spec in job.parties.items()
        }
        job = replace(job, parties=specs)
        for name, table in w.tables.items():
            extra.setdefault(name, []).extend(
                ["--data", str(write_csv(table, out / "data" / f"{name}.csv"))]
            )
    start = time.monotonic()
    parties = start_parties(job, write_kit(job, out / "kit"), out, extra)
    metrics = out / job.host / "metrics.jsonl"
    # Every process's CPU seconds at each tree's record, and as the Host sends each tree's
    # gradients (its audit line): from tree 2's gradients on lies the steady state (no key
    # generation, worker start-up or tables before; see steady_window).
    starts = LineTally(out / job.host / "audit.jsonl", GRADIENTS_SENT)
    usage = MemoryWatch({p.name: p.process.pid for p in parties}, metrics, starts)
    try:
        supervise(parties, EpochProgress(metrics, model.trees, False))
    finally:
        per_party = usage.stop()
    marks = usage.epoch_cpu
    wall = time.monotonic() - start
    summary = json.loads((out / job.host / "summary.json").read_text())
    work = json.loads((out / "guest-1" / "work.json").read_text())
    seconds = summary["tree_seconds"]
    return {
        "obfuscation": obfuscation,
        "instance_space": model.instance_space,
        "tree_seconds": seconds,
        "steady_tree_seconds": float(statistics.median(seconds[1:] or seconds)),
        "wall_seconds": round(wall, 3),
        "cpu_seconds": round(sum(p["cpu_seconds"] for p in per_party.values()), 2),
        "cpu_after_first_tree": marks[0] if marks else None,
        "cpu_at_last_tree": (len(marks), marks[-1]) if marks else None,
        "cpu_at_tree_starts": usage.start_cpu,
        "per_party": per_party,
        # per party, its own process's and its workers' CPU seconds in each tree
        "party_tree_cpu": usage.per_epoch_party_cpu(),
        "auc": summary["auc"],
        "trees": len(seconds),
        "tree_rows": w.rows,
        "key_bits": bits,
        "encryptions": summary["encryptions"],
        "decryptions": summary["decryptions"],
        **{f"guest_{k}": v for k, v in work.items() if k != "trees"},
    }


def tree_spans(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Per tree from the second to the last but one, the operations computed, and every
    process's CPU seconds, from the Host's sending its gradients to its sending the next
    tree's.

    Why these bounds: the Host computes a tree's gradient obfuscators during the tree
    before (its niced prefetch, secureboost/host.py ``grow``), and has computed all of
    them when it sends that tree's gradients. So each span holds one tree of the guest's
    work and of the Host's decryptions (as the guest tallied them tree by tree) and the
    Host's obfuscators of the next tree: what the floor counts for it. Counted from tree
    1's end to the last tree's, trees 2 and 3 of a 3-tree run held 12,186 of the Host's
    obfuscators, where the floor counted 15,000 (2048 bits, 7,500 rows): the last tree
    computes none. The first tree (the workers' imports, the key holder's tables) and the
    last are left out.
    """
    trees: int = run["trees"]
    starts: list[float] = run["cpu_at_tree_starts"]
    per_tree: list[dict[str, int]] = run["guest_per_tree"]
    if trees < 3 or len(starts) < trees or len(per_tree) != trees:
        raise ConfigError(
            f"a SecureBoost run of {trees} trees, {len(starts)} gradient messages seen, "
            f"the guest's tallies of {len(per_tree)} trees: the steady window needs 3 trees "
            "or more, each seen; run the bench with --trees 3 or more"
        )
    gradients = run["tree_rows"]  # one guest, every training row in each tree
    in_tree = run["encryptions"] - trees * gradients  # (hidden mode's masks) within their tree
    return [
        {
            "trees": 1,
            "encryptions": gradients + in_tree / trees,
            # every packed histogram is decrypted once, by the Host
            "decryptions": run["decryptions"] * per_tree[t]["packed"] / run["guest_packed"],
            **{f"guest_{k}": v for k, v in per_tree[t].items()},
            "cpu_seconds": starts[t + 1] - starts[t],
        }
        for t in range(1, trees - 1)
    ]


def steady_window(run: dict[str, Any]) -> dict[str, Any]:
    """Every span of :func:`tree_spans` together: their operations and CPU seconds summed."""
    spans = tree_spans(run)
    return {k: sum(span[k] for span in spans) for k in spans[0]}


def floor_per_tree(run: dict[str, Any], costs: dict[str, float], cores: int) -> float:
    """Least seconds per tree the run's operation counts allow on ``cores`` cores."""
    # The packed histograms go to the key's holder: fresh r^n in either obfuscation
    # (protocol/fresh.py, for_key_holder; docs/security.md, SecureBoost).
    obf = costs["obfuscation_standard"]
    host_obf = costs["obfuscation_standard_host"]  # the key holder's, in either obfuscation
    total = (
        run["encryptions"] * host_obf
        + run["guest_packed"] * obf
        + run["decryptions"] * costs["decrypt"]
        + run["guest_additions"] * costs["mulmod"]
        + run["guest_subtractions"] * (costs["invert"] + costs["mulmod"])
        + run["guest_shifts"] * (costs["shift"] + costs["mulmod"])
    )
    trees: int = run["trees"]
    return float(total) / cores / trees


def run_boost_bench(
    *,
    bits: int,
    datasets: list[str],
    model: ModelConfig,
    out: Path,
    log: Log,
    obfuscations: tuple[str, ...] | list[str] = OBFUSCATIONS,
    spaces: tuple[str, ...] | list[str] = ("shared",),
    plots: bool = True,
    cores: int = 0,
) -> dict[str, Any]:
    """Each instance space and obfuscation on each dataset; floors from the measured unit costs.

    The runs of one dataset follow each other, so the modes compared share the machine's
    load of that moment. ``plots`` False: the runs' Host draws none. ``cores``: workers
    per data holder, the floor's cores (0: every core of this machine).
    """
    cores = cores or os.cpu_count() or 1
    report: dict[str, Any] = {"key_bits": bits, "cores": cores, "load_before": os.getloadavg()}
    report["model"] = {k: getattr(model, k) for k in ("trees", "depth", "bins", "learning_rate")}
    report["workloads"] = []
    least: dict[str, float] = {}
    for name in datasets:
        w = breast_cancer() if name == "breast_cancer" else synthetic_boost()
        log(w.describe())
        # The least cost measured in this invocation: the ratio at these prices is
        # reported beside the judged one.
        keys = stages.keys(bits)
        least = costs = least_so_far(unit_costs(bits, w.rows, keys, workers=cores), least)
        params = sb.BoostParams(
            trees=model.trees, depth=model.depth, learning_rate=model.learning_rate, bins=model.bins
        )
        entry: dict[str, Any] = {"name": w.name, "describe": w.describe(), "costs": costs}
        entry["reference_auc"] = reference_auc(w, params)
        entry["runs"] = []
        for space, obfuscation in itertools.product(spaces, obfuscations):
            log(f"SecureBoost {space} {obfuscation}, {model.trees} trees on {w.name}")
            mode = replace(model, instance_space=space)
            folder = out / f"{w.name}-{space}-{obfuscation}"
            run, pricing = costs_around(
                bits,
                w.rows,
                keys,
                functools.partial(run_boost, w, bits, obfuscation, mode, folder, plots, cores),
                cores,
            )
            run["costs"], run["pricing"] = pricing.judged, pricing.as_dict()
            run["floor_tree_seconds"] = floor_per_tree(run, pricing.judged, cores)
            run["ratio_to_floor"] = run["steady_tree_seconds"] / run["floor_tree_seconds"]
            # CPU seconds per tree in the steady window (every party and worker) against
            # the floor of the operations computed in it: what a shared machine cannot
            # inflate, with the same trees on both sides.
            window = run["steady_window"] = steady_window(run)
            run["cpu_per_tree"] = window["cpu_seconds"] / window["trees"]
            for key, prices in (
                ("cpu_ratio", pricing.judged),
                ("cpu_ratio_at_least_costs", costs),
                ("cpu_ratio_at_costs_around", pricing.around),
            ):
                run[key] = run["cpu_per_tree"] / (floor_per_tree(window, prices, cores) * cores)
            # each tree's span alone: how far a span moves (the guest's re-randomisations
            # computed ahead can run behind a span at a heavy load)
            run["span_cpu_ratios"] = [
                span["cpu_seconds"] / (floor_per_tree(span, pricing.judged, cores) * cores)
                for span in tree_spans(run)
            ]
            entry["runs"].append(run)
        report["workloads"].append(entry)
    report["load_after"] = os.getloadavg()
    return report


def render_boost(report: dict[str, Any]) -> str:
    """The bench table: seconds per tree, floor, ratio, AUC against the reference booster."""
    m = report["model"]
    load = report["load_before"][0], report["load_after"][0]
    lines = [
        f"SecureBoost, {report['key_bits']}-bit keys, {report['cores']} cores (1-min load "
        f"{load[0]:.1f} before, {load[1]:.1f} after), {m['trees']} trees, depth {m['depth']}, "
        f"{m['bins']} bins",
        f"{'workload':<20} {'space':<6} {'obfuscation':<11} "
        f"{'s/tree':>7} {'floor':>6} {'ratio':>5} "
        f"{'CPU-s/tree':>10} {'CPU ratio':>9} {'at least':>8} {'around':>6} "
        f"{'enc/tree':>8} {'dec/tree':>8} {'adds/tree':>9} "
        f"{'AUC':>6} {'ref AUC':>7}",
    ]
    for w in report["workloads"]:
        for r in w["runs"]:
            t = r["trees"]
            lines.append(
                f"{w['name']:<20} {r['instance_space']:<6} {r['obfuscation']:<11} "
                f"{r['steady_tree_seconds']:>7.2f} "
                f"{r['floor_tree_seconds']:>6.2f} {r['ratio_to_floor']:>5.2f} "
                f"{r['cpu_per_tree']:>10.2f} {r['cpu_ratio']:>9.2f} "
                f"{r.get('cpu_ratio_at_least_costs', r['cpu_ratio']):>8.2f} "
                f"{r.get('cpu_ratio_at_costs_around', r['cpu_ratio']):>6.2f} "
                f"{r['encryptions'] // t:>8} {r['decryptions'] // t:>8} "
                f"{r['guest_additions'] // t:>9} {r['auc']:>6.4f} {w['reference_auc']:>7.4f}"
            )
    return "\n".join(lines)
