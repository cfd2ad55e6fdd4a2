"""The container pilot's images (deploy/containers/build.sh), built once per test run.

The build is mostly waiting: Debian's and PyPI's mirrors, unpacking, podman committing
layers. When the pilot's tests are among those collected, the run starts it in the
background at once (tests/e2e/conftest.py; under xdist, worker gw0 alone), and the
suite's scheduler hands the pilot's tests out last (tests/conftest.py): by then the
images are usually there, and whatever waiting is left falls on their own setup. A run
that collected no pilot test builds nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "deploy" / "containers" / "build.sh"
BUILD_SECONDS = 3600  # a fresh machine: mmdebstrap, then PyPI's wheels for the lean image
POLL_SECONDS = 1.0
# The lowest CPU priority, inherited by every process of the build (podman's build steps
# too): its 2-3 CPU minutes (unpacking, byte-compiling, committing layers) take the cores
# only while the tests leave them idle, instead of slowing the tests that start beside it.
# The pilot's tests come last and wait for the images in their setup.
YIELD_TO_TESTS = ["nice", "-n", "19"]

_started: dict[str, subprocess.Popen[bytes]] = {}


def missing() -> str | None:
    """None when the images can be built and run here, else the reason to skip."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "the container pilot needs Linux and root (mmdebstrap, rootful podman)"
    absent = [t for t in ("podman", "runc", "nsenter") if not shutil.which(t)]
    if not (shutil.which("mmdebstrap") or shutil.which("debootstrap")):
        absent.append("mmdebstrap (or debootstrap)")
    if absent:
        return f"not installed: {', '.join(absent)} (apt-get install podman runc mmdebstrap)"
    return None


def _folder() -> Path:
    """Where this test run's build writes its log and exit status (one per run: every
    xdist worker of a run has the same run id)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"
    return Path(tempfile.gettempdir()) / f"privfl-images-{run}"


def start_build() -> None:
    """Start ``build.sh lean`` (the base, then the lean image) in the background, once per
    run, where the images can be built; its log and exit status go to :func:`_folder`."""
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0" or missing():
        return
    folder = _folder()
    try:
        folder.mkdir()
    except FileExistsError:  # a former run of this process id: its result is not ours
        shutil.rmtree(folder)
        folder.mkdir()
    script = 'bash "$0" lean; echo $? > "$1.part" && mv "$1.part" "$1"'
    with (folder / "build.log").open("wb") as log:
        _started["lean"] = subprocess.Popen(
            [*YIELD_TO_TESTS, "bash", "-c", script, str(BUILD), str(folder / "status")],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )


def wait_for_build() -> str:
    """The background build's log once it ended (asserting it succeeded); where none was
    started, the build made here and now."""
    folder = _folder()
    if not folder.exists():
        done = subprocess.run(
            ["bash", str(BUILD), "lean"], capture_output=True, text=True, timeout=BUILD_SECONDS
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stderr
    status = folder / "status"
    deadline = time.monotonic() + BUILD_SECONDS
    while not status.exists():
        assert time.monotonic() < deadline, f"no image after {BUILD_SECONDS} s: {folder}"
        time.sleep(POLL_SECONDS)
    log = (folder / "build.log").read_text(errors="replace")
    code = status.read_text().strip()
    shutil.rmtree(folder)  # read once: the module's fixture, on one worker
    assert code == "0", log[-3000:]
    return log


def end_build(stop: bool) -> None:
    """At the end of this process's session: wait for the build it started (another
    worker may still need it), or stop it (``stop``: the run was interrupted or told to
    stop early)."""
    process = _started.pop("lean", None)
    if process is None:
        return
    if stop and process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=BUILD_SECONDS)
