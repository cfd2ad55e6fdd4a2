"""Networked SecAgg+ over one in-memory hub: the aggregator's stages in the test's thread,
each client host's in its own (the real policy steps and loop, with inputs the test picks)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from privfl.config.horizontal import HflConfig, HflJob, HflParty
from privfl.learning import secagg
from privfl.parties.horizontal.advert_tags import HostKeys
from privfl.parties.horizontal.secure_aggregator import SecureRound, secure_collect
from privfl.parties.horizontal.secure_host import HostRound, serve_secure_round
from privfl.protocol.channel import Channel
from privfl.protocol.hfl_messages import RoundEnd
from privfl.protocol.memory import InMemoryHub
from privfl.protocol.messages import Message

DIMS = 16
ROUND = 1
WINDOW = 2.0  # the aggregator's window per stage: honest hosts answer in milliseconds
HOST_WAIT = 30.0  # a host's wait for the aggregator: only reached if a test is broken


def job_of(sizes: list[int], **settings: object) -> HflJob:
    """An aggregator and one client host per entry of ``sizes`` (its client count)."""
    parties = {"aggregator": HflParty("aggregator", "aggregator", "tcp://127.0.0.1:6000")}
    first = 0
    for i, size in enumerate(sizes):
        name = f"clients-{i + 1}"
        parties[name] = HflParty(name, "clients", "", first, size)
        first += size
    options: dict[str, object] = {
        "secure_aggregation": True,
        "secagg_group": 0,
        "update_clip": 1.0,
        "round_timeout": WINDOW,
        "timeout_seconds": HOST_WAIT,
        "epsilon_budget": math.inf,
    }
    config = HflConfig(clients=first, **(options | settings))  # type: ignore[arg-type]
    return HflJob(session="s-secagg", config=config, parties=parties)


def clients_of(job: HflJob, host: str) -> list[int]:
    spec = job.party(host)
    return list(range(spec.first_client, spec.first_client + spec.num_clients))


def inputs_of(job: HflJob, seed: int = 7) -> dict[int, np.ndarray]:
    """Each client's integer input (what ``client_input`` returns: signed, small)."""
    rng = np.random.default_rng(seed)
    return {c: rng.integers(-1000, 1000, DIMS) for c in range(job.config.clients)}


class Gone(Exception):
    """A host that stops mid-round (its process died, its link broke)."""


class Silent(Channel):
    """A host's channel that goes silent after ``sends`` messages."""

    def __init__(self, *args: object, sends: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.left = sends

    def send(self, peer: str, body: Message, round_: int = 0) -> None:
        if self.left <= 0:
            raise Gone
        self.left -= 1
        super().send(peer, body, round_)


@dataclass
class Net:
    """The hub, the aggregator's channel and what each host thread logged or raised."""

    job: HflJob
    hub: InMemoryHub = field(default_factory=InMemoryHub)
    errors: list[BaseException] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.aggregator = Channel(
            self.hub.transport("aggregator"), session=self.job.session, timeout=HOST_WAIT
        )
        # each host's CURVE key pair, as its kit's keys/ holds it (raw X25519 here)
        order = tuple(self.job.names("clients"))
        pairs = {h: secagg.KeyPair.fresh() for h in order}
        self.keys = {
            h: HostKeys(h, pairs[h].secret, {o: pairs[o].public for o in order if o != h}, order)
            for h in order
        }

    def host(
        self,
        name: str,
        inputs: dict[int, np.ndarray],
        sends: int | None = None,
        clients: list[int] | None = None,
        model: bytes = b"the round's model",
    ) -> None:
        """Start host ``name`` (honest; silent after ``sends`` messages if given; speaking
        for ``clients`` instead of its own if given; told it was sent ``model``, the digest
        of its round_start)."""
        transport = self.hub.transport(name)
        session = self.job.session
        if sends is None:
            channel = Channel(transport, session=session, timeout=HOST_WAIT)
        else:
            channel = Silent(transport, session=session, timeout=HOST_WAIT, sends=sends)
        group = self.job.config.secagg_group
        ids = clients_of(self.job, name) if clients is None else clients
        state = HostRound.start(ROUND, session, DIMS, ids, group, self.keys[name], model=model)

        def feed(client: int, size: int) -> np.ndarray:
            return inputs[client]

        def main() -> None:
            try:
                serve_secure_round(channel, "aggregator", state, feed, HOST_WAIT)
            except Gone:
                pass
            except BaseException as exc:
                self.errors.append(exc)

        thread = threading.Thread(target=main, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def asked(self) -> dict[str, list[int]]:
        return {h: clients_of(self.job, h) for h in self.job.names("clients")}


@contextmanager
def network(job: HflJob) -> Iterator[Net]:
    """A hub for ``job``; on exit the aggregator ends the job, as after its last round
    (a host left out mid-round waits for that), and every host thread has finished."""
    net = Net(job)
    yield net
    for host in job.names("clients"):
        net.aggregator.send(host, RoundEnd(ROUND, 0.0, True, "rounds"), ROUND)
    for thread in net.threads:
        thread.join(timeout=HOST_WAIT)
        assert not thread.is_alive(), f"{thread.name} did not finish"


def run_round(
    job: HflJob, inputs: dict[int, np.ndarray], silent: dict[str, int] | None = None
) -> tuple[list[tuple[list[int], np.ndarray]], SecureRound, Net]:
    """One secure round with every host of ``job``; ``silent`` maps a host to the number
    of messages it sends before it goes silent."""
    with network(job) as net:
        for name in job.names("clients"):
            net.host(name, inputs, (silent or {}).get(name))
        sums, state = secure_collect(job, net.aggregator, net.asked(), ROUND, DIMS)
    return sums, state, net


Attack = Callable[[Net], object]
