"""The relayed pilot of docs/deploy.md §2a as containers (deploy/containers/).

deploy/containers/build.sh builds the lean image from this checkout (a Debian base made
by mmdebstrap or debootstrap, imported locally: no registry pull; cached, so a rebuild
reuses every layer that did not change), and deploy/containers/pilot.sh runs the relay,
the Server, the Host and a guest in it, each site alone on an internal podman network
that only the relay joins. The run must train to the end; while the Host trains,
`ss -ltn` in each site's network namespace shows no listener and `privfl health` in each
site's container says ``training``; the model must equal the plaintext oracle for the
same job and run (label DP off), which is what the process pilot
(tests/e2e/test_netns_relay.py) asserts of its model too.

Needs Linux, root, podman, runc, mmdebstrap (or debootstrap) and nsenter; skipped with
the reason where one is missing or podman cannot start a container here (.ci/run
installs them).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from container_images import missing, wait_for_build
from helpers import host_start, party_data
from relayed_kit import oracle, saved

from privfl.config.vertical import load_job

ROOT = Path(__file__).resolve().parents[2]
PILOT = ROOT / "deploy" / "containers" / "pilot.sh"
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs"]
SITES = ("server", "host", "guest-1")

# One worker runs both tests, last of all (tests/conftest.py); the images were started
# in the background when the tests were collected (container_images.py).
pytestmark = [pytest.mark.containers, pytest.mark.slow, pytest.mark.xdist_group("containers")]


@pytest.fixture(scope="module")
def lean_image() -> str:
    """The base and the lean image, once built; skip where podman cannot run here."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    log = wait_for_build()
    probe = subprocess.run(
        [*PODMAN, "run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024",
         "--ulimit", "nproc=1024:1024", "localhost/privfl-base:bookworm", "true"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"podman cannot start a container here: {probe.stderr.strip()[-300:]}")
    return log


def test_the_relayed_pilot_trains_to_the_end_in_containers(tmp_path: Path, lean_image: str) -> None:
    # Prepare: a 512-bit kit (test-sized keys behind their flag), label DP off; 8 epochs:
    # pilot.sh reads listeners and health after the Host's first, and `privfl health` must
    # still find every site training (with 4, the Server had ended first at load 28).
    work = tmp_path / "pilot"
    env = os.environ | {"PILOT_TAG": f"pfl-test-{os.getpid()}"}
    init = ["--key-bits", "512", "--allow-weak-keys", "--epochs", "8"]
    init += ["--label-epsilon", "inf", "--timeout", "120"]

    # Act
    done = subprocess.run(
        ["bash", str(PILOT), str(work), *init], capture_output=True, text=True, env=env,
        timeout=900,
    )  # fmt: skip

    # Assert: every party ended well; no site listened; each site was training, healthy.
    logs = {
        n: (work / f"{n}.log").read_text()[-1500:] for n in SITES if (work / f"{n}.log").exists()
    }
    assert done.returncode == 0, (done.stdout, done.stderr[-2000:], logs)
    assert {n: (work / f"exit-{n}.txt").read_text().strip() for n in SITES} == dict.fromkeys(
        SITES, "0"
    )
    assert {n: (work / f"listeners-{n}.txt").read_text() for n in SITES} == dict.fromkeys(SITES, "")
    health = {n: (work / f"health-{n}.txt").read_text() for n in SITES}
    assert all(line.startswith("training: ") for line in health.values()), health
    # The model is the plaintext oracle's for this job, from the Host's start and plan.
    job = load_job(work / "sites" / "host" / "job.toml")
    data = party_data(job)
    runs = work / "runs"
    want = oracle(job, data, host_start(runs), runs)
    for got, expected in zip(saved(job, data, runs), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


SAMPLERS = """
import numpy as np
from privfl.mechanisms.noise import add_discrete_gaussian, add_discrete_laplace, private_source
source, zeros = private_source(), np.zeros(20000)
laplace, gauss = add_discrete_laplace(zeros, 3.0, source), add_discrete_gaussian(zeros, 2.0, source)
print(np.abs(laplace).mean(), gauss.std())
"""


def test_the_stripped_opendp_library_still_draws_the_noise(lean_image: str) -> None:
    # The build strips OpenDP's symbol table: its samplers must still run, and draw the
    # right spread (discrete Laplace, scale 3: E|X| = 2.945; discrete Gaussian, σ = 2).
    done = subprocess.run(
        [*PODMAN, "run", "--rm", "--read-only", "--network", "none", "--ulimit",
         "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--entrypoint",
         "/opt/privfl/bin/python", "localhost/privfl:lean", "-c", SAMPLERS],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    mean_abs, std = map(float, done.stdout.split())
    # 20,000 draws: standard errors 0.021 (E|X|) and 0.010 (the std); 0.2 is over 9 of
    # them (a false failure far below 1e-6).
    assert abs(mean_abs - 2.945) < 0.2 and abs(std - 2.0) < 0.2, (mean_abs, std)
