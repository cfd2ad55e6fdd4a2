"""``[relay]`` and ``via``: who is relayed is fingerprinted, how a site reaches the relay is not."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from privfl.config.horizontal import hfl_from_dict
from privfl.config.relay import RelayConfig, relayed_peers
from privfl.config.vertical import from_dict, to_dict
from privfl.errors import ConfigError


def job_data(**host: Any) -> dict[str, Any]:
    """A three-party vertical job; ``host`` adds keys to the Host's table."""
    return {
        "session": "s",
        "key_bits": 512,
        "allow_weak_keys": True,
        "parties": {
            "server": {"role": "server", "endpoint": "tcp://127.0.0.1:5550"},
            "host": {"role": "host", "endpoint": "tcp://127.0.0.1:5551", "columns": [0], **host},
            "guest": {"role": "guest", "endpoint": "tcp://127.0.0.1:5552", "columns": [1]},
        },
        "relay": {"endpoint": "tcp://relay.example.org:443"},
    }


def test_a_relayed_party_needs_no_endpoint_and_its_peers_reach_it_through_the_relay() -> None:
    data = job_data(via="relay")
    del data["parties"]["host"]["endpoint"]

    job = from_dict(data)

    assert job.party("host").via == "relay" and job.party("host").endpoint == ""
    assert relayed_peers(job.parties, "server", ["host", "guest"]) == {"host"}
    assert relayed_peers(job.parties, "host", ["server", "guest"]) == {"server", "guest"}
    assert from_dict(to_dict(job)) == job


def test_via_is_fingerprinted_and_the_relay_table_is_not() -> None:
    direct, relayed = from_dict(job_data()), from_dict(job_data(via="relay"))
    elsewhere = replace(
        relayed, relay=RelayConfig(endpoint="tcp://10.0.0.9:443", socks_proxy="p:1")
    )

    assert direct.fingerprint() != relayed.fingerprint()
    assert elsewhere.fingerprint() == relayed.fingerprint()
    assert from_dict({**job_data(), "relay": {}}).fingerprint() == direct.fingerprint()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["parties"]["host"].update(via="relais"), 'via must be "relay"'),
        (lambda d: d["parties"]["host"].update(via="relay") or d.pop("relay"), "no relay"),
        (lambda d: d["parties"].update(relay=d["parties"].pop("guest")), "may not be called"),
        (lambda d: d["parties"]["host"].pop("endpoint"), "parties.host.endpoint is missing"),
        (lambda d: d["relay"].update(endpont="x"), "did you mean relay.endpoint"),
    ],
    ids=["via-typo", "no-relay", "named-relay", "direct-no-endpoint", "relay-key-typo"],
)
def test_relay_mistakes_are_one_clear_line(change: Any, message: str) -> None:
    data = job_data()
    change(data)

    with pytest.raises(ConfigError, match=message):
        from_dict(data)


def test_horizontal_jobs_take_via_and_relay_alike() -> None:
    data: dict[str, Any] = {
        "session": "h",
        "parties": {
            "aggregator": {"role": "aggregator", "via": "relay"},
            "hosts": {"role": "clients", "num_clients": 2},
        },
    }
    with pytest.raises(ConfigError, match="no relay"):
        hfl_from_dict(data)

    job = hfl_from_dict({**data, "relay": {"endpoint": "tcp://r:443"}})

    assert job.party("aggregator").via == "relay"
    assert "relay" not in job.canonical_data()
