"""Reproduce the seeds: one experiment per published claim, each writing CSV, PNG and Markdown."""

from privfl.tools.experiments.common import EXPERIMENTS, ExperimentResult, run_named

__all__ = ["EXPERIMENTS", "ExperimentResult", "run_named"]
