"""`privfl init vfl|hfl --relay` writes the job docs/deploy.md §2a has a site edit by hand.

The written job must fingerprint exactly as the hand-edited one (same session, same
parties, ``via = "relay"`` and no endpoint), and the relay's key pair must sit where
`privfl relay` looks for it: the kit's key folder, or only the relay's own folder in a
per-site kit, each site holding its public half.
"""

from __future__ import annotations

import tomllib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from click.testing import CliRunner, Result

from privfl.cli import main
from privfl.config.horizontal import load_hfl_job
from privfl.config.vertical import load_job

WEAK = ["--key-bits", "512", "--allow-weak-keys"]
RELAY = "tcp://relay.example.org:443"
SESSION = uuid.UUID(int=7)


def init(mode: str, out: Path, *args: str) -> Result:
    extra = WEAK if mode == "vfl" else ["--clients", "4"]
    return CliRunner().invoke(main, ["init", mode, "--out", str(out), *extra, *args])


def hand_edited(direct: Path, relayed: tuple[str, ...] | None = None) -> Path:
    """The §2a edit of a direct job, as sites (and the tests) did it before --relay."""
    data = tomllib.loads(direct.read_text())
    for name, table in data["parties"].items():
        if relayed is None or name in relayed:
            table["via"], table["endpoint"] = "relay", ""
    data["relay"] = {"endpoint": RELAY}
    path = direct.with_name("hand-edited.toml")
    path.write_text(tomli_w.dumps(data))
    return path


@pytest.mark.parametrize(
    ("mode", "load"), [("vfl", load_job), ("hfl", load_hfl_job)], ids=["vfl", "hfl"]
)
def test_a_relayed_init_fingerprints_as_the_hand_edited_direct_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, load: Callable[[Path], Any]
) -> None:
    # Prepare: both kits get the same session id, so only the relay edit may differ.
    monkeypatch.setattr(uuid, "uuid4", lambda: SESSION)

    # Act
    direct = init(mode, tmp_path / "direct")
    relayed = init(mode, tmp_path / "relayed", "--relay", RELAY)

    # Assert
    assert direct.exit_code == 0 and relayed.exit_code == 0, direct.output + relayed.output
    ours = load(tmp_path / "relayed" / "job.toml")
    theirs = load(hand_edited(tmp_path / "direct" / "job.toml"))
    assert ours.fingerprint() == theirs.fingerprint()
    assert ours.relay.endpoint == RELAY
    assert all(s.via == "relay" and not s.endpoint for s in ours.parties.values())
    assert not any(s.via for s in load(tmp_path / "direct" / "job.toml").parties.values())
    keys = tmp_path / "relayed" / ours.keys_dir
    assert (keys / "relay.key").exists() and (keys / "relay.key_secret").exists()
    assert not (tmp_path / "direct" / ours.keys_dir / "relay.key").exists()


def test_relayed_picks_the_parties_behind_the_relay_the_others_keep_their_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(uuid, "uuid4", lambda: SESSION)
    port = ["--base-port", "17000"]

    direct = init("vfl", tmp_path / "direct", *port)
    mixed = init("vfl", tmp_path / "mixed", *port, "--relay", RELAY, "--relayed", "host, guest-1")

    assert direct.exit_code == 0 and mixed.exit_code == 0, direct.output + mixed.output
    job = load_job(tmp_path / "mixed" / "job.toml")
    assert {n: s.via for n, s in job.parties.items()} == {
        "server": "",
        "host": "relay",
        "guest-1": "relay",
    }
    assert job.party("server").endpoint == "tcp://127.0.0.1:17000"
    edited = hand_edited(tmp_path / "direct" / "job.toml", ("host", "guest-1"))
    assert job.fingerprint() == load_job(edited).fingerprint()


def test_per_site_kits_give_the_relay_secret_to_the_relay_folder_alone(tmp_path: Path) -> None:
    sites = ["server", "host", "guest-a"]

    made = init("vfl", tmp_path, "--parties", ",".join(sites), "--all-keys-here", "--relay", RELAY)

    assert made.exit_code == 0, made.output
    relay_keys = tmp_path / "relay" / "keys"
    assert sorted(p.name for p in relay_keys.iterdir()) == sorted(
        [*(f"{s}.key" for s in sites), "relay.key", "relay.key_secret"]
    )
    for site in sites:
        keys = sorted(p.name for p in (tmp_path / site / "keys").iterdir())
        assert "relay.key" in keys and "relay.key_secret" not in keys
        assert load_job(tmp_path / site / "job.toml").relay.endpoint == RELAY
    prints = {load_job(tmp_path / f / "job.toml").fingerprint() for f in [*sites, "relay"]}
    assert len(prints) == 1


def test_per_site_kits_without_keys_still_give_the_relay_its_job_file(tmp_path: Path) -> None:
    made = init("vfl", tmp_path, "--parties", "server,host,guest-a", "--relay", RELAY)

    assert made.exit_code == 0, made.output
    assert load_job(tmp_path / "relay" / "job.toml").relay.endpoint == RELAY
    assert list((tmp_path / "relay" / "keys").iterdir()) == []
    assert "privfl keys gen --party relay" in made.output


@pytest.mark.parametrize("mode", ["vfl", "hfl"])
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--relayed", "host"], "--relayed needs --relay tcp://HOST:PORT"),
        (["--relay", "relay.example.org:443"], "write tcp://HOST:PORT"),
        (["--relay", "tcp://relay.example.org"], "write tcp://HOST:PORT"),
        (["--relay", "tcp://relay.example.org:0"], "write tcp://HOST:PORT"),
        (["--relay", RELAY, "--relayed", "nobody"], "--relayed names 'nobody', which is not in"),
    ],
    ids=["relayed-alone", "no-scheme", "no-port", "port-0", "unknown-party"],
)
def test_a_wrong_relay_option_is_one_line_and_writes_no_job(
    tmp_path: Path, mode: str, args: list[str], says: str
) -> None:
    result = init(mode, tmp_path / "kit", *args)

    assert result.exit_code == 1, result.output
    assert result.output.startswith("privfl: error: ") and says in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert not (tmp_path / "kit" / "job.toml").exists()
