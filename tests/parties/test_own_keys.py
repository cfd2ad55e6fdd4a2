"""A party refuses to start with a key pair its peers cannot know it by."""

from __future__ import annotations

from pathlib import Path

import pytest

from privfl.errors import ConfigError
from privfl.parties.session import check_own_public
from privfl.protocol.keys import KeyRing, generate_keypair, load_secret_keypair


def test_a_secret_key_that_does_not_match_its_public_half_is_refused(tmp_path: Path) -> None:
    # Prepare: the secret line of host's file replaced by another pair's secret.
    _, secret_file = generate_keypair(tmp_path, "host")
    _, other = generate_keypair(tmp_path, "other")
    wrong = load_secret_keypair(other)[1]
    right = load_secret_keypair(secret_file)[1]
    secret_file.write_text(secret_file.read_text().replace(right.decode(), wrong.decode()))

    # Act / Assert
    with pytest.raises(ConfigError, match="does not match its public half"):
        load_secret_keypair(secret_file)


def test_a_new_pair_under_an_old_public_key_file_is_refused(tmp_path: Path) -> None:
    # Prepare: host made a new pair elsewhere; its kit still holds the .key the peers have.
    public_file, _ = generate_keypair(tmp_path / "kit", "host")
    _, new_secret = generate_keypair(tmp_path / "new", "host")
    public, secret = load_secret_keypair(new_secret)
    ring = KeyRing(name="host", public=public, secret=secret)

    # Act / Assert: refused, naming the file; the matching pair passes.
    with pytest.raises(ConfigError, match=r"host\.key .* does not match our secret key"):
        check_own_public(public_file, ring)
    check_own_public(new_secret.with_suffix(".key"), ring)
