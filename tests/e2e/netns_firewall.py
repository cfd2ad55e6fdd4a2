"""Make the current network namespace drop every inbound TCP connection attempt (nftables).

Run as ``ip netns exec NS python netns_firewall.py``. The machine may have no `nft` or
`iptables` binary, so the rule is written over netlink with pyroute2: an ``input`` hook
chain with one rule, ``meta l4proto tcp  tcp flags & (syn|ack) == syn  drop`` — every
SYN that would open a connection *to* this namespace is dropped, while the SYN-ACKs and
the rest of connections it opens itself pass. Prints ``ok`` once the rule is in place.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from pyroute2.nftables.expressions import genex, verdict
from pyroute2.nftables.main import NFTables

TABLE, CHAIN = "privfl_test", "no_inbound"
NFT_META_L4PROTO, NFT_PAYLOAD_TRANSPORT_HEADER, NF_DROP = 16, 2, 0
SYN, SYN_ACK = b"\x02", b"\x12"


def expression(name: str, **fields: Any) -> list[dict[str, Any]]:
    return [genex(name, OrderedDict(fields))]


def value(data: bytes) -> dict[str, Any]:
    return {"attrs": [("NFTA_DATA_VALUE", data)]}


def no_inbound_connections() -> None:
    nft = NFTables(nfgen_family=2)  # ip
    nft.table("add", name=TABLE)
    nft.chain("add", table=TABLE, name=CHAIN, hook="input", type="filter", policy=1)
    nft.rule(
        "add",
        table=TABLE,
        chain=CHAIN,
        expressions=(
            expression("meta", key=NFT_META_L4PROTO, dreg=1),
            expression("cmp", sreg=1, op=0, data=value(b"\x06")),  # TCP
            expression("payload", dreg=1, base=NFT_PAYLOAD_TRANSPORT_HEADER, offset=13, len=1),
            expression("bitwise", sreg=1, dreg=1, len=1, mask=value(SYN_ACK), xor=value(b"\0")),
            expression("cmp", sreg=1, op=0, data=value(SYN)),  # SYN without ACK
            verdict(code=NF_DROP),
        ),
    )


if __name__ == "__main__":
    no_inbound_connections()
    print("ok")
