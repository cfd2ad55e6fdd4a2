"""Reproduce the seeds: one experiment per published claim, each writing CSV, PNG and Markdown."""
