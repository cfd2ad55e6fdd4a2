"""A lean install: `pip install privfl` has no torch; the vertical roles and the relay run
without it, and a horizontal command says in one line what to install (pyproject's `hfl` extra).

The tests hide torch from child processes with a `sitecustomize` whose import finder
refuses it, as an environment without the package would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCKER = '''
import sys


class _NoTorch:
    """Import finder of a machine without torch."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
'''


def lean_env(tmp_path: Path) -> dict[str, str]:
    blocker = tmp_path / "notorch"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    path = os.pathsep.join([str(blocker), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path.rstrip(os.pathsep)}


def privfl(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "privfl", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_base_install_names_no_torch_and_the_hfl_extra_does() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.lower().startswith("torch")]
    assert [d for d in project["optional-dependencies"]["hfl"] if d.startswith("torch")]


def test_the_blocker_hides_torch(tmp_path: Path) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import torch"],
        env=lean_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode != 0 and "No module named 'torch'" in probe.stderr


def test_vertical_relay_and_tools_help_pages_need_no_torch(tmp_path: Path) -> None:
    env = lean_env(tmp_path)
    for command in (
        ("relay", "--help"),
        ("vfl", "run-local", "--help"),
        ("vfl", "guest", "--help"),
        ("bench", "vfl", "--help"),
        ("experiment", "--help"),
        ("audit", "--help"),
    ):
        done = privfl(env, tmp_path, *command)
        assert done.returncode == 0, (command, done.stderr)


def test_a_horizontal_command_says_what_to_install_and_writes_nothing(tmp_path: Path) -> None:
    env = lean_env(tmp_path)
    for command in (("hfl", "run-local", "--rounds", "1"), ("bench", "hfl", "--quick")):
        done = privfl(env, tmp_path, *command)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1, (command, done.stderr)
        assert lines[-1].startswith("privfl: error: the horizontal mode needs PyTorch")
        assert "privfl[hfl]" in lines[-1] and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()  # refused before claiming a run folder


def test_the_vertical_demo_trains_without_torch(tmp_path: Path) -> None:
    done = privfl(
        lean_env(tmp_path),
        tmp_path,
        "vfl", "run-local", "--key-bits", "512", "--allow-weak-keys", "--epochs", "1",
        "--no-progress", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "run" / "summary.json").is_file()
