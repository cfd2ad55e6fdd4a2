"""Every experiment by name: this module imports the experiment modules, which register themselves.

The registry (:data:`~privfl.tools.experiments.registry.EXPERIMENTS`) and the writers
live in ``registry``, below the experiments; only this module, above them, imports
them all — so no module imports one that imports it back.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType

from privfl.errors import ConfigError
from privfl.tools.experiments import vfl, vfl_models
from privfl.tools.experiments.registry import EXPERIMENTS, Settings, write_outputs

MODULES: tuple[ModuleType, ...] = (vfl, vfl_models)  # importing them registered their experiments
try:  # the horizontal experiments train with torch: the `hfl` extra (pyproject.toml)
    from privfl.tools.experiments import dpsgd_fsdp, hfl

    MODULES += (hfl, dpsgd_fsdp)
except ModuleNotFoundError as exc:  # a lean install lists the vertical experiments only
    if not (exc.name or "").startswith("torch"):
        raise


def names() -> list[str]:
    """Every experiment's name, sorted."""
    return sorted(EXPERIMENTS)


def run_named(name: str, out: Path, settings: Settings, command: str = "") -> Path:
    """Run one experiment by name and write its outputs under ``out``; return the report path."""
    if name not in EXPERIMENTS:
        raise ConfigError(
            f"unknown experiment {name!r}; choose one of {', '.join(sorted(EXPERIMENTS))}"
        )
    exp = EXPERIMENTS[name]
    started = time.monotonic()
    result = exp.run(settings)
    command = command or f"privfl experiment {name}" + (" --quick" if settings.quick else "")
    return write_outputs(exp, result, out, settings, time.monotonic() - started, command)
