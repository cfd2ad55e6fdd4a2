"""``privfl bench``: click commands around :mod:`privfl.tools.bench.report`."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import click

from privfl.cli.errors import friendly_errors
from privfl.cli.optable import TableOption
from privfl.cli.options import Group
from privfl.config.vertical import INSTANCE_SPACES, MIN_TEST_KEY_BITS, OBFUSCATIONS
from privfl.crypto.engine import ENGINES
from privfl.errors import ConfigError
from privfl.models.registry import kind_named
from privfl.tools.bench.hfl import HflBench

DATASETS = ("breast_cancer", "synthetic")


@click.group(cls=Group)
def bench() -> None:
    """Benchmarks: measure, never deploy (any key size is accepted here)."""


@bench.command("vfl")
@click.option("--key-bits", type=int, default=2048, show_default=True, help="Paillier modulus.")
@click.option(
    "--rows",
    type=click.IntRange(10),
    default=10_000,
    show_default=True,
    help="Training rows of the synthetic dataset.",
)
@click.option(
    "--features",
    type=click.IntRange(2),
    default=100,
    show_default=True,
    help="Features of the synthetic dataset (60 % guest, 40 % host).",
)
@click.option(
    "--dataset",
    "datasets",
    type=click.Choice(DATASETS),
    multiple=True,
    help="Dataset(s) to run; repeat the option.",
    cls=TableOption,
    shown="both",
)
@click.option(
    "--epochs",
    type=click.IntRange(2),
    default=3,
    show_default=True,
    help="Epochs of each real run (the first, which starts worker processes, is not counted).",
)
@click.option(
    "--naive-rows",
    type=click.IntRange(10),
    default=500,
    show_default=True,
    help="Most rows naive phe and fate_utils are measured on; beyond, scaled linearly.",
)
@click.option(
    "--cores",
    "--workers",
    "cores",
    type=click.IntRange(0),
    default=0,
    help="Workers per data holder (and the Ray cluster's CPUs); 0 = all cores.",
)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="pool",
    show_default=True,
    help="Where the Host's and Guest's workers run in the real runs: their own process pools, "
    "or one Ray cluster this bench starts on this machine (pip install 'privfl[ray]').",
)
@click.option(
    "--batch-size",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Mini-batch of the real runs (0 = the full batch): one batch's ciphertexts in flight.",
)
@click.option(
    "--runs-only",
    is_flag=True,
    help="Only the real runs and their floors (no naive, stage or fate_utils timings): "
    "one point of a scale curve.",
)
@click.option(
    "--json",
    "json_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write the full report as JSON.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder for the real runs' outputs.",
    cls=TableOption,
    shown="runs/bench-<timestamp>",
)
@click.option(
    "--model",
    "model_kind",
    type=click.Choice(["logistic", "secureboost"]),
    default="logistic",
    show_default=True,
    help="What to benchmark: vertical LR epochs, or SecureBoost trees.",
)
@click.option(
    "--trees",
    type=click.IntRange(3),
    default=5,
    show_default=True,
    help="SecureBoost trees (CPU per tree is read over trees 2 to N - 1).",
)
@click.option("--depth", type=click.IntRange(1, 10), default=3, show_default=True)
@click.option("--bins", type=click.IntRange(2, 256), default=32, show_default=True)
@click.option(
    "--obfuscation",
    "obfuscations",
    type=click.Choice(OBFUSCATIONS),
    multiple=True,
    help="Obfuscation(s) of the real runs; repeat the option.",
    cls=TableOption,
    shown="both",
)
@click.option(
    "--instance-space",
    "spaces",
    type=click.Choice(INSTANCE_SPACES),
    multiple=True,
    help="SecureBoost: instance space(s) to run; repeat the option.",
    cls=TableOption,
    shown="shared",
)
@click.option(
    "--no-plots",
    is_flag=True,
    help="SecureBoost: the real runs' Host draws no training.png or importance.png (the "
    "report reads neither; its per-tree numbers end with the last tree).",
)
@friendly_errors
def vfl(
    key_bits: int,
    rows: int,
    features: int,
    datasets: tuple[str, ...],
    epochs: int,
    naive_rows: int,
    cores: int,
    engine: str,
    batch_size: int,
    runs_only: bool,
    json_file: Path | None,
    out: Path | None,
    model_kind: str,
    trees: int,
    depth: int,
    bins: int,
    obfuscations: tuple[str, ...],
    spaces: tuple[str, ...],
    no_plots: bool,
) -> None:
    """One epoch of vertical LR, side by side: naive phe, privfl standard and DJN, fate_utils.

    Per stage (in one process, workers on every core) and per epoch with the
    Server, Host and Guest as real processes; ratios to naive phe; the floor the
    measured powmod cost allows on this many cores; peak memory per party.

    \b
    Examples:
      privfl bench vfl --json bench.json                # 2048-bit, both datasets
      privfl bench vfl --dataset breast_cancer
      privfl bench vfl --key-bits 512 --rows 300 --features 10   # a quick look
      privfl bench vfl --dataset synthetic --rows 10000 --runs-only --engine ray --workers 2
      privfl bench vfl --model secureboost --trees 5 --key-bits 1024
      privfl bench vfl --model secureboost --instance-space shared --instance-space hidden

    With --model secureboost: seconds per tree (standard and DJN) on breast cancer and a
    synthetic 10,000 × 30 table (host 10 / guest 20 columns), against the floor of the
    run's encryptions, decryptions and histogram additions over the cores.
    """
    from privfl.tools.bench.report import render, run_bench

    if key_bits < MIN_TEST_KEY_BITS:
        raise ConfigError(f"--key-bits must be at least {MIN_TEST_KEY_BITS}")
    out = out or Path("runs") / time.strftime("bench-%Y%m%d-%H%M%S")
    if not kind_named(model_kind).is_glm:  # the trees' benchmark (tools/bench/boost.py)
        from privfl.config.vertical import ModelConfig
        from privfl.tools.bench.boost import render_boost, run_boost_bench

        model = ModelConfig(kind=model_kind, trees=trees, depth=depth, bins=bins)
        report = run_boost_bench(
            bits=key_bits,
            datasets=list(datasets or DATASETS),
            obfuscations=list(obfuscations or OBFUSCATIONS),
            spaces=list(spaces or ("shared",)),
            plots=not no_plots,
            cores=cores,
            model=model,
            out=out,
            log=lambda line: click.echo(f"bench: {line}", err=True),
        )
        click.echo(render_boost(report))
        write_report(report, json_file)
        return
    report = run_bench(
        bits=key_bits,
        rows=rows,
        features=features,
        datasets=list(datasets or DATASETS),
        epochs=epochs,
        naive_rows=naive_rows,
        cores=cores,
        out=out,
        log=lambda line: click.echo(f"bench: {line}", err=True),
        engine=engine,
        runs_only=runs_only,
        batch_size=batch_size,
        obfuscations=tuple(obfuscations or OBFUSCATIONS),
    )
    click.echo(render(report))
    write_report(report, json_file)


@bench.command("hfl")
@click.option(
    "--clients",
    "per_round",
    default=",".join(str(c) for c in HflBench.per_round),
    show_default=True,
    help="Clients per round to measure, comma-separated.",
)
@click.option("--rounds", type=click.IntRange(2), default=HflBench.rounds, show_default=True,
              help="Rounds per run; the first warms up and is not counted.")  # fmt: skip
@click.option(
    "--sequential-max",
    type=click.IntRange(1),
    default=HflBench.sequential_max,
    show_default=True,
    help="Above this many clients per round, time the batched trainer only.",
)
@click.option("--quick", is_flag=True, help="A quick look: 4 and 40 clients, 2 rounds.")
@click.option(
    "--json",
    "json_file",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write the rows as JSON.",
)
@friendly_errors
def hfl(
    per_round: str, rounds: int, sequential_max: int, quick: bool, json_file: Path | None
) -> None:
    """Seconds per horizontal round: sequential vs batched clients, CPU vs CUDA when present.

    The digits MLP, non-private, in one process; every ratio is measured in this run.
    Beyond digits' 1,347 training rows the round samples a population of 1,000,000
    clients holding 8 rows each, drawn with replacement.

    \b
    Examples:
      privfl bench hfl                          # 20, 1,000 and 10,000 clients per round
      privfl bench hfl --clients 1000 --rounds 3
      privfl bench hfl --quick
    """
    from privfl.tools.bench.hfl import render_hfl, run_hfl_bench

    try:
        counts = tuple(int(c) for c in per_round.split(","))
    except ValueError as exc:
        raise ConfigError(
            f"--clients takes whole numbers separated by commas, not {per_round!r}"
        ) from exc
    bench_ = HflBench(per_round=counts, rounds=rounds, sequential_max=sequential_max)
    if quick:
        bench_ = replace(bench_, per_round=(4, 40), rounds=2)
    rows = run_hfl_bench(bench_, lambda line: click.echo(f"bench: {line}", err=True))
    click.echo(render_hfl(rows))
    write_report({"rows": rows}, json_file)


def write_report(report: dict[str, object], json_file: Path | None) -> None:
    """Also write the report as JSON when asked."""
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(report, indent=2) + "\n")
        click.echo(f"report written to {json_file}", err=True)
