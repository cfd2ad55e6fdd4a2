"""The relay settings both job files share: ``[relay]`` and each party's ``via``.

``[parties.NAME] via = "relay"`` makes that party reach every peer through the relay
(it opens no port, so its ``endpoint`` may be left out); a direct party reaches its
relayed peers through the relay too, and its direct peers as before. ``[relay]`` says
where the relay is and which key it proves: site-local (each site may reach the relay
by its own address or through its own SOCKS5 proxy), so it is left out of the job
fingerprint; who is relayed (``via``) is agreed by all and fingerprinted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from privfl.errors import ConfigError

RELAY_NAME = "relay"  # the relay's key files: <keys_dir>/relay.key and relay.key_secret
VIA_RELAY = "relay"


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """Where the relay listens and the key it proves (site-local: not fingerprinted)."""

    endpoint: str = ""  # tcp://relay.example.org:443, as this site reaches it
    public_key: str = ""  # the relay's z85 CURVE public key; "" = <keys_dir>/relay.key
    socks_proxy: str = ""  # host:port of a SOCKS5 proxy this site must go out through


class RelayedParty(Protocol):
    """What the relay checks need of a party spec."""

    @property
    def name(self) -> str: ...

    @property
    def via(self) -> str: ...


def check_relay(parties: Iterable[RelayedParty], relay: RelayConfig) -> None:
    """Refuse an unknown ``via``, a party named like the relay, or relayed parties and no relay."""
    relayed = []
    for party in parties:
        if party.name == RELAY_NAME:
            raise ConfigError(
                f"a party may not be called {RELAY_NAME!r}: the name is the relay's own "
                "(its key files); rename the party"
            )
        if party.via not in ("", VIA_RELAY):
            raise ConfigError(
                f'parties.{party.name}.via must be "{VIA_RELAY}" (reach peers through the '
                f"relay) or left out (direct), not {party.via[:40]!r}"
            )
        if party.via:
            relayed.append(party.name)
    if relayed and not relay.endpoint:
        raise ConfigError(
            f"{', '.join(relayed)} reach their peers through the relay (via = "
            f'"{VIA_RELAY}"), but the job has no relay: set [relay] endpoint = '
            '"tcp://HOST:PORT" (where `privfl relay` listens)'
        )


def relayed_peers(parties: Mapping[str, RelayedParty], name: str, peers: Iterable[str]) -> set[str]:
    """The peers ``name`` reaches through the relay: all of them if it is relayed itself,
    else those that are."""
    if parties[name].via:
        return set(peers)
    return {peer for peer in peers if parties[peer].via}
