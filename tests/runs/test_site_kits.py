"""Per-site kits: one folder per site, own keys or imported public keys, started by start.sh."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from processes import privfl_here
from sites import make_sites

from privfl.config.vertical import load_job
from privfl.parties.vertical.runner import check_feature_count, load_data

WEAK = ["--key-bits", "512", "--allow-weak-keys", "--psi-key-bits", "1024"]
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def privfl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "privfl", *args], capture_output=True, text=True, timeout=60
    )


def test_by_default_no_secret_key_is_made_for_another_site(tmp_path: Path) -> None:
    out = tmp_path / "sites"

    made = privfl_here("init", "vfl", "--parties", "server,host,guest-a", "--out", str(out), *WEAK)

    assert made.returncode == 0, made.stderr
    assert not [p for p in out.rglob("*") if p.is_file() and "key" in p.name]
    assert "privfl keys gen" in made.stdout
    assert (out / "guest-a" / "start.sh").exists()


def test_all_keys_here_is_explicit_and_its_help_names_the_risk() -> None:
    shown = privfl_here("init", "vfl", "--help")
    both = privfl_here("init", "vfl", "--parties", "server,host,guest-a", "--own-keys",
                  "--all-keys-here", "--out", "x", *WEAK)  # fmt: skip

    help_text = " ".join(shown.stdout.split())
    assert "--all-keys-here" in help_text and "impersonate" in help_text
    assert both.returncode != 0 and "contradict" in both.stderr


def test_feature_counts_go_into_every_sites_job(tmp_path: Path) -> None:
    out = tmp_path / "sites"

    made = privfl_here("init", "vfl", "--parties", "server,host,guest-a", "--out", str(out),
                  "--feature-count", "guest-a=7", "--feature-count", "host=3", *WEAK)  # fmt: skip

    assert made.returncode == 0, made.stderr
    job = load_job(out / "server" / "job.toml")
    assert job.party("guest-a").declared_features == 7
    assert job.party("host").declared_features == 3
    assert job.fingerprint() == load_job(out / "guest-a" / "job.toml").fingerprint()


def test_each_site_gets_its_job_its_secret_and_only_public_peer_keys(tmp_path: Path) -> None:
    out = tmp_path / "sites"

    made = privfl_here(
        "init", "vfl", "--parties", "server,host,guest-a,guest-b", "--all-keys-here",
        "--out", str(out), *WEAK,
    )  # fmt: skip

    assert made.returncode == 0, made.stderr
    names = ["server", "host", "guest-a", "guest-b"]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    fingerprints = {load_job(out / n / "job.toml").fingerprint() for n in names}
    assert len(fingerprints) == 1  # every site runs the same job
    for name in names:
        keys = {p.name for p in (out / name / "keys").iterdir()}
        assert keys == {f"{n}.key" for n in names} | {f"{name}.key_secret"}
        secret = out / name / "keys" / f"{name}.key_secret"
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        assert os.access(out / name / "start.sh", os.X_OK)
        assert len((out / name / "FINGERPRINTS.txt").read_text().splitlines()) == 4
    roles = {n: s.role for n, s in load_job(out / "host" / "job.toml").parties.items()}
    assert roles == {"server": "server", "host": "host", "guest-a": "guest", "guest-b": "guest"}


def test_sites_with_their_own_keys_import_public_keys_and_train(tmp_path: Path) -> None:
    out = tmp_path / "sites"
    names = ["server", "host", "guest-a"]
    made = privfl_here(
        "init", "vfl", "--parties", ",".join(names), "--out", str(out),
        *WEAK, "--epochs", "2", "--label-epsilon", "inf",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert not (out / "host" / "keys").exists() or not any((out / "host" / "keys").iterdir())
    # Every site makes its own pair; the public halves travel, the secret ones never do.
    for name in names:
        gen = privfl_here("keys", "gen", "--party", name, "--out", str(out / name / "keys"))
        assert gen.returncode == 0 and "fingerprint" in gen.stdout
    for name in names:
        for peer in set(names) - {name}:
            src = out / peer / "keys" / f"{peer}.key"
            done = privfl_here("keys", "import", str(src), "--into", str(out / name / "keys"))
            assert done.returncode == 0, done.stderr
            assert done.stdout.split()[-1] in privfl_here("keys", "fingerprint", str(src)).stdout
    refused = privfl_here(
        "keys",
        "import",
        str(out / "host" / "keys" / "host.key_secret"),
        "--into",
        str(tmp_path),
    )
    assert refused.returncode == 1 and "SECRET" in refused.stderr

    sites = make_sites(tmp_path / "data", guests=1)
    data = {"host": sites.files["host"], "guest-a": sites.files["guest-1"]}
    procs = {}
    for name in names:
        extra = [] if name == "server" else ["--data", str(data[name]), "--id-column", "patient_id"]
        extra += ["--label-column", "diagnosis", "--no-progress"] if name == "host" else []
        with (tmp_path / f"{name}.log").open("wb") as log:
            procs[name] = subprocess.Popen(
                ["sh", str(out / name / "start.sh"), *extra], stdout=log, stderr=log, env=ENV
            )
    try:
        codes = {n: p.wait(timeout=120) for n, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == dict.fromkeys(names, 0), [(tmp_path / f"{n}.log").read_text() for n in names]
    (run,) = (out / "host" / "run").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["intersection_size"] == len(sites.shared)


def test_feature_counts_of_the_demo_split_keep_the_demo_columns(tmp_path: Path) -> None:
    # Prepare: the counts the demo split itself has (breast_cancer: host 10, guest-1 20).
    made = privfl_here("init", "vfl", "--out", str(tmp_path), "--feature-count", "guest-1=20",
                  "--feature-count", "host=10", *WEAK)  # fmt: skip
    assert made.returncode == 0, made.stderr

    # Act: each party loads its share of the demo data as `privfl vfl guest` would.
    job = load_job(tmp_path / "job.toml")
    loaded = {name: load_data(job, name, None, None) for name in ("host", "guest-1")}

    # Assert: the kit still runs on the demo data, with the declared counts.
    for name, count in (("host", 10), ("guest-1", 20)):
        assert len(job.party(name).columns) == count
        assert loaded[name].x_train.shape[1] == count
        check_feature_count(job, name, loaded[name])


def test_a_party_with_other_feature_counts_and_no_data_is_told_to_pass_data(
    tmp_path: Path,
) -> None:
    # Prepare: a count the demo split does not have, so guest-1 must bring its own CSV.
    made = privfl_here(
        "init", "vfl", "--out", str(tmp_path), "--feature-count", "guest-1=15", *WEAK
    )
    assert made.returncode == 0, made.stderr

    # Act
    ran = privfl("vfl", "guest", "--job", str(tmp_path / "job.toml"), "--party", "guest-1",
                 "--out", str(tmp_path / "out"))  # fmt: skip

    # Assert: no run on 0 features; one line naming --data, no traceback.
    assert load_job(tmp_path / "job.toml").party("guest-1").columns == ()
    assert ran.returncode == 1
    assert "--data" in ran.stderr and "feature_count = 15" in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1 and "Traceback" not in ran.stderr
