"""SecureBoost's command-line options (`--trees`, `--depth`, …), one per tree setting of [model].

Each option's default and help come from ``ModelConfig`` and ``BOOST_HELP``; only the
settings given on the command line are applied, so a ``--job`` file's own values stand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any, TypeVar

import click

from privfl.config.vertical import BOOST_HELP, INSTANCE_SPACES, ModelConfig, kind_default
from privfl.models.registry import kind_named

F = TypeVar("F", bound=Callable[..., Any])
# ``--l2`` would read as the GLMs' [training] l2: the tree penalty is on leaf weights.
FLAGS = {"l2": "--leaf-l2"}
PREFIX = "boost_"  # the click parameter of ``trees`` is ``boost_trees``


def flag(key: str) -> str:
    """The command-line flag of a [model] tree setting."""
    return FLAGS.get(key, "--" + key.replace("_", "-"))


def boost_options(func: F) -> F:
    """Add one option per key of ``BOOST_HELP``, typed from ``ModelConfig``, defaulted as a
    SecureBoost job is (``ModelConfig`` and the kind's own defaults in the registry)."""
    types = {f.name: f.type for f in fields(ModelConfig)}
    for key in reversed(list(BOOST_HELP)):
        func = click.option(
            flag(key),
            PREFIX + key,
            type=click_type(types[key]),
            default=kind_default("secureboost", f"model.{key}"),
            show_default=True,
            help=f"secureboost: {BOOST_HELP[key]}",
        )(func)
    return func


def click_type(annotation: Any) -> Any:
    """The option type of a [model] field: its choices for the one text setting."""
    if annotation in (str, "str"):
        return click.Choice(INSTANCE_SPACES)
    if annotation in (bool, "bool"):
        return click.BOOL
    return float if annotation in (float, "float") else int


def pop_boost_options(opts: dict[str, Any]) -> dict[str, Any]:
    """Take the tree settings out of the command's keyword arguments: those given, by key."""
    values = {key: opts.pop(PREFIX + key) for key in BOOST_HELP}
    ctx = click.get_current_context()
    default = click.core.ParameterSource.DEFAULT
    return {k: v for k, v in values.items() if ctx.get_parameter_source(PREFIX + k) != default}


def with_boost(model: ModelConfig, given: dict[str, Any]) -> ModelConfig:
    """``model`` with the tree settings given on the command line; refused for a GLM."""
    if given and "trees" not in kind_named(model.kind).reads:
        shown = ", ".join(flag(key) for key in given)
        raise click.UsageError(
            f"{shown} set trees: add --model secureboost (the job trains {model.kind})"
        )
    return replace(model, **given)
