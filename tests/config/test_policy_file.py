"""The site policy file: read with the job file's schema, one line per mistake, found where
a site's IT puts it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from privfl.config import policy as policy_module
from privfl.config.policy import find_policy, load_policy
from privfl.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def test_a_full_policy_loads_every_limit(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[label_dp]\nmin_epsilon = 1\nmax_epsilon = "inf"\n[models]\nkinds = ["logistic"]\n'
        '[keys]\nmin_bits = 3072\n[secureboost]\nmin_node_rows = 20\n[peers]\nallowed = ["ab"]\n'
        "[projects.sepsis]\nmax_epsilon = 12\n",
    )
    policy = load_policy(path)
    assert policy.label_dp.min_epsilon == 1 and math.isinf(policy.label_dp.max_epsilon)
    assert policy.models.kinds == ("logistic",) and policy.keys.min_bits == 3072
    assert policy.projects["sepsis"].max_epsilon == 12
    assert policy.ledger_path() == tmp_path.resolve() / "ledger.json"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[label_dp]\nmax_epsilom = 8\n", "did you mean label_dp.max_epsilon?"),
        ("[labeldp]\nmax_epsilon = 8\n", "did you mean label_dp?"),
        ("[training]\nmax_epochs = 'ten'\n", "training.max_epochs must be an integer"),
        ("[models]\nmechanisms = ['PNMP']\n", "models.mechanisms: 'PNMP' is not one of"),
        ("[models]\nkinds = ['xgboost']\n", "models.kinds: 'xgboost' is not one of"),
        ("[label_dp]\nmin_epsilon = 9\nmax_epsilon = 8\n", "min_epsilon <= max_epsilon"),
        ("[psi]\nmax_set_size = -1\n", "limits must be >= 0"),
        ("[projects.a]\nmax_epsilon = -1\n", "projects.a.max_epsilon must be >= 0"),
        ("[projects.a]\nmax_epsilonn = 3\n", "did you mean projects.a.max_epsilon?"),
    ],
)
def test_each_mistake_is_one_line_naming_the_key(tmp_path: Path, text: str, says: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load_policy(path)
    message = str(error.value)
    assert message.startswith(f"policy file {path}: ") and "\n" not in message
    assert says in message, message


def test_a_missing_policy_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"policy file .* not found"):
        load_policy(tmp_path / "absent.toml")


def test_the_option_wins_then_the_variable_then_the_system_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = write(tmp_path, "")
    monkeypatch.setattr(policy_module, "SYSTEM_PATH", system)
    monkeypatch.delenv(policy_module.ENV_VAR, raising=False)
    assert find_policy(None) == system
    monkeypatch.setenv(policy_module.ENV_VAR, str(tmp_path / "env.toml"))
    assert find_policy(None) == tmp_path / "env.toml"
    assert find_policy(tmp_path / "given.toml") == tmp_path / "given.toml"
    monkeypatch.delenv(policy_module.ENV_VAR)
    monkeypatch.setattr(policy_module, "SYSTEM_PATH", tmp_path / "none.toml")
    assert find_policy(None) is None  # a site without a policy runs without limits
