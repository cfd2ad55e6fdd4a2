"""The SecureBoost bench's floor arithmetic and its synthetic table."""

from __future__ import annotations

from pathlib import Path

import pytest

from privfl.tools.bench.boost import floor_per_tree, synthetic_boost


@pytest.mark.parametrize("obfuscation", ["standard", "djn"])
def test_floor_adds_every_operation_and_divides_by_cores_and_trees(obfuscation: str) -> None:
    run = {
        "obfuscation": obfuscation,
        "encryptions": 100,
        "decryptions": 10,
        "guest_packed": 10,
        "guest_shifts": 40,
        "guest_additions": 1000,
        "guest_subtractions": 50,
        "trees": 2,
        "tree_rows": 100,
        "key_bits": 1024,
    }
    costs = {
        "obfuscation_standard": 1.0,
        "obfuscation_standard_host": 0.6,
        "decrypt": 0.5,
        "mulmod": 0.001,
        "invert": 0.01,
        "shift": 0.002,
    }
    # The Host's standard encryptions at its CRT cost, the guest's re-randomisations at
    # the public r^n one in either obfuscation (they go back to the key's holder); a
    # Horner shift and a mulmod per packed sum but each group's last. The key holder's
    # fixed-base obfuscators serve DJN jobs too (cheaper than h_s^a).
    host, guest = 0.6, 1.0
    total = 100 * host + 10 * guest + 10 * 0.5 + 1000 * 0.001 + 50 * 0.011 + 40 * 0.003
    assert floor_per_tree(run, costs, cores=4) == pytest.approx(total / 4 / 2)


def test_synthetic_table_has_the_asked_shape() -> None:
    w = synthetic_boost(total=400, host=10, guest=20)
    assert w.host.x_train.shape == (300, 10) and w.guest.x_train.shape == (300, 20)
    assert w.host.y_train is not None and 0.2 < w.host.y_train.mean() < 0.8


def test_a_run_is_judged_at_the_typical_costs_measured_around_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from privfl.tools.bench import boost

    # Prepare: each measurement reports the pick it was asked for, 1 then 3 (the load rose).
    seen: list[object] = []
    prices = iter([1.0, 3.0])

    def measured(
        bits: int, rows: int, keys: object, pick: object, workers: int
    ) -> dict[str, float]:
        seen.append(pick)
        return {"mulmod": next(prices)}

    monkeypatch.setattr(boost, "unit_costs", measured)
    monkeypatch.setattr(boost, "unit_samples", lambda *a: {})  # too short a run to sample

    # Act
    result, pricing = boost.costs_around(1024, 100, (1, 2, 3), lambda: {"ran": True})

    # Assert: the median of repeats (a typical moment, not the quietest), before and after.
    assert result == {"ran": True}
    assert pricing.judged == {"mulmod": pytest.approx(2.0)}
    assert seen == [boost.statistics.median, boost.statistics.median]


def test_every_unit_cost_has_an_in_run_sample_of_the_same_operation() -> None:
    from privfl.tools.bench import boost, stages

    # Prepare: a small real key.
    keys = stages.keys(256)
    ops = boost._unit_ops(256, 100, keys, 2)

    # Act: one in-run sample of each operation.
    sampled = {name: sample() for name, sample in boost.unit_samples(256, 100, keys, 2).items()}

    # Assert: every operation the floor prices is sampled, each a measured CPU time.
    assert set(sampled) == set(ops)
    assert all(seconds > 0 for seconds in sampled.values())


def test_best_of_picks_the_least_or_the_asked_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    from statistics import median

    from privfl.tools.bench import boost

    # Three repeats of one call that take 3, 1 and 2 CPU seconds by a stubbed clock.
    def clock(ticks: list[float]) -> object:
        return iter(ticks).__next__

    ticks = [0.0, 3.0, 3.0, 4.0, 4.0, 6.0]
    monkeypatch.setattr(boost.time, "process_time", clock(ticks))
    assert boost.best_of(lambda: None, 1, repeats=3) == 1.0
    monkeypatch.setattr(boost.time, "process_time", clock(ticks))
    assert boost.best_of(lambda: None, 1, repeats=3, pick=median) == 2.0


def test_the_table_prints_the_ratio_at_the_least_costs_beside_the_judged_one() -> None:
    from privfl.tools.bench.boost import render_boost

    run = {
        "instance_space": "shared", "obfuscation": "djn", "trees": 3,
        "steady_tree_seconds": 2.0, "floor_tree_seconds": 1.0, "ratio_to_floor": 2.0,
        "cpu_per_tree": 2.4, "cpu_ratio": 1.2, "cpu_ratio_at_least_costs": 1.62,
        "encryptions": 30, "decryptions": 6, "guest_additions": 300, "auc": 0.9,
    }  # fmt: skip
    report = {
        "key_bits": 1024, "cores": 2, "load_before": [3.0], "load_after": [5.0],
        "model": {"trees": 3, "depth": 3, "bins": 32, "learning_rate": 0.3},
        "workloads": [{"name": "breast_cancer", "reference_auc": 0.9, "runs": [run]}],
    }  # fmt: skip
    header, row = render_boost(report).splitlines()[1:3]
    assert header.split()[7:11] == ["CPU", "ratio", "at", "least"]
    assert row.split()[7:9] == ["1.20", "1.62"]


def test_the_key_holders_obfuscators_are_priced_in_its_workers_task_size() -> None:
    from privfl.crypto.pools import NoisePool
    from privfl.tools.bench import boost, stages

    # Prepare: a pool that submits instead of computing (two workers, none started).
    pool = NoisePool(stages.keys(256)[0].n, workers=1)
    pool.workers, pool._compute = 2, object()  # type: ignore[assignment]
    sizes: list[int] = []
    pool._submit_noise = lambda size: sizes.append(size) or object()  # type: ignore[method-assign]

    # Act: the Host's prefetch of one tree's gradients (7,500 rows, one guest).
    pool.prefetch(7_500, bulk=True)

    # Assert: the bench prices a call of the tasks' size, as many operations as it holds.
    assert max(sizes) == boost.host_task(7_500, 2) == 938
    ops = boost._unit_ops(256, 7_500, stages.keys(256), 2)
    assert ops["obfuscation_standard_host"].per == 938
    assert len(ops["obfuscation_standard_host"].func()) == 938  # type: ignore[arg-type]
    assert boost.host_task(10**6, 2) == boost.SAMPLE_TASK  # a large tree: one capped call
    assert boost.host_task(7_500, 1) == pool.chunk  # no workers: computed inline in chunks


def test_a_sample_without_warming_times_its_only_call() -> None:
    from privfl.tools.bench import stages

    calls: list[int] = []
    assert stages.sample_once(lambda: calls.append(1), 1, 4, warm=False) >= 0.0
    assert len(calls) == 1
    stages.sample_once(lambda: calls.append(1), 1, 4)
    assert len(calls) == 3  # one untimed, one timed


def _window_run(trees: int, starts: list[float]) -> dict[str, object]:
    per_tree = [
        {"additions": 100 + t, "subtractions": 10, "packed": 4 + t, "shifts": 40}
        for t in range(trees)
    ]
    packed = sum(t["packed"] for t in per_tree)
    return {
        "trees": trees,
        "tree_rows": 50,
        "encryptions": 50 * trees + 8 * trees,  # the gradients, and masks within their tree
        "decryptions": packed,
        "guest_packed": packed,
        "guest_per_tree": per_tree,
        "cpu_at_tree_starts": starts,
    }


def test_the_steady_window_counts_what_its_trees_compute() -> None:
    from privfl.tools.bench.boost import steady_window, tree_spans

    # Prepare: 4 trees, every process's CPU as the Host sent each tree's gradients.
    run = _window_run(4, [3.0, 10.0, 17.5, 24.0])

    # Act
    window = steady_window(run)

    # Assert: from tree 2's gradients to tree 4's: trees 2 and 3 of the guest's work and
    # the Host's decryptions, the Host's gradient obfuscators of trees 3 and 4 (computed
    # a tree ahead) and the masks of two trees; the CPU in between.
    assert window == {
        "trees": 2,
        "encryptions": 2 * 50 + 2 * 8,
        "decryptions": 5 + 6,
        "guest_additions": 101 + 102,
        "guest_subtractions": 20,
        "guest_packed": 5 + 6,
        "guest_shifts": 80,
        "cpu_seconds": 14.0,
    }
    # and span by span: tree 2's, tree 3's
    spans = tree_spans(run)
    assert [(s["cpu_seconds"], s["guest_additions"]) for s in spans] == [(7.5, 101), (6.5, 102)]


@pytest.mark.parametrize(("trees", "starts"), [(2, [1.0, 2.0]), (3, [1.0, 2.0])])
def test_a_run_without_a_steady_window_is_refused(trees: int, starts: list[float]) -> None:
    from privfl.errors import ConfigError
    from privfl.tools.bench.boost import steady_window

    with pytest.raises(ConfigError, match="--trees 3 or more"):
        steady_window(_window_run(trees, starts))


def test_a_tally_counts_whole_marked_lines_as_the_file_grows(tmp_path: Path) -> None:
    from privfl.tools.bench.runs import LineTally

    path = tmp_path / "audit.jsonl"
    tally = LineTally(path, b'"kind": "boost_gradients"')
    assert tally.update() == 0  # no file yet
    path.write_bytes(b'{"kind": "boost_gradients"}\n{"kind": "boost_nodes"}\n{"kind": "boost_gr')
    assert tally.update() == 1  # the unfinished line waits
    with path.open("ab") as handle:
        handle.write(b'adients"}\n')
    assert tally.update() == 2


def test_the_watch_reads_every_process_cpu_at_each_marked_line(tmp_path: Path) -> None:
    import os
    import time

    from privfl.tools.bench.runs import LineTally, MemoryWatch

    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"")
    watch = MemoryWatch({"me": os.getpid()}, None, LineTally(path, b"start"))
    try:
        path.write_bytes(b"start\nstart\n")
        deadline = time.monotonic() + 30.0
        while len(watch.start_cpu) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        watch.stop()
    assert len(watch.start_cpu) == 2 and watch.start_cpu[0] > 0.0


def test_the_least_prices_carry_over_but_for_the_row_shaped_ones() -> None:
    from privfl.tools.bench.boost import least_so_far

    before = {"mulmod": 2.0, "shift": 1.0, "obfuscation_standard_host": 0.40}
    now = {"mulmod": 3.0, "shift": 2.0, "obfuscation_standard_host": 0.44}
    # A later workload of fewer rows: smaller tasks of the Host's, a narrower slot.
    assert least_so_far(now, before) == {
        "mulmod": 2.0,
        "shift": 2.0,
        "obfuscation_standard_host": 0.44,
    }
