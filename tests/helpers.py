"""Run every party of a vertical job in threads over one in-memory hub, never waiting forever."""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from privfl.config.vertical import (
    DataConfig,
    JobConfig,
    LabelDPConfig,
    ModelConfig,
    PartySpec,
    TrainingConfig,
)
from privfl.crypto.paillier import PublicKey as PaillierKey
from privfl.data.tables import IdTable
from privfl.data.views import PartyData, demo_columns
from privfl.errors import PeerAborted, PrivflError, ProtocolError
from privfl.parties.audit import FILE_NAME as AUDIT
from privfl.parties.vertical.runner import load_data, run_party
from privfl.protocol import codec
from privfl.protocol.channel import Channel
from privfl.protocol.memory import InMemoryHub, InMemoryTransport
from privfl.protocol.messages import Header, Hello, Kind, Message, PublicKeyMessage, Resume
from privfl.tools.experiments import vfl_models

TEST_KEY_BITS = 512


class Crash(PrivflError):
    """The injected failure of a DyingTransport."""


UNCOUNTED = (Kind.PROGRESS, Kind.AUDIT_HEAD)


class Crashes:
    """When each crashed party of one in-memory run died (``DyingTransport``)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}


class DyingTransport:
    """An in-memory transport whose k-th send fails, and every send after it (as a crashed
    process's would): a best-effort send (progress, an audit head) that swallows the
    first failure does not let the party live on. The crash is noted in ``crashes``."""

    def __init__(
        self, inner: InMemoryTransport, after: int, crashes: Crashes | None = None
    ) -> None:
        self.name = inner.name
        self._inner = inner
        self._left = after
        self._crashes = crashes or Crashes()

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        # Count protocol messages only: how many progress reports and audit heads go out
        # depends on timing, and the tests name the step to die at by its message count.
        if codec.decode_header(frames[0]).kind not in UNCOUNTED:
            self._left -= 1
        if self._left <= 0:
            self._crashes.at.setdefault(self.name, time.monotonic())
            raise Crash(f"{self.name} crashed on purpose")
        self._inner.send(peer, frames)

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        if self.name in self._crashes.at:  # a dead process reads nothing (no peer's Abort)
            raise Crash(f"{self.name} crashed on purpose")
        return self._inner.recv(timeout)

    def close(self) -> None:
        self._inner.close()


class WatchingTransport:
    """An in-memory transport that reports a crashed peer as lost, as a ZeroMQ transport
    reports a peer whose connection dropped: its waits end at once (Channel._check_links)
    instead of after the job's timeout."""

    grace = 0.0  # the peer's process is gone: nothing to wait for

    def __init__(self, inner: InMemoryTransport, crashes: Crashes) -> None:
        self.name = inner.name
        self._inner = inner
        self._crashes = crashes

    def lost_peers(self) -> dict[str, float]:
        now = time.monotonic()
        return {n: now - at for n, at in self._crashes.at.items() if n != self.name}

    def send(self, peer: str, frames: Sequence[bytes]) -> None:
        self._inner.send(peer, frames)

    def try_send(self, peer: str, frames: Sequence[bytes]) -> bool:
        return self._inner.try_send(peer, frames)

    def recv(self, timeout: float) -> tuple[str, list[bytes]] | None:
        return self._inner.recv(timeout)

    def close(self) -> None:
        self._inner.close()


# The in-memory runs' Hosts draw no training.png: a plot costs ~0.5 CPU-s a run and
# only tests/parties/test_private_files.py reads one (it passes plots=True).
NO_PLOTS = {"plots": False}


class PartyHung(Exception):
    """A party thread was still running when the harness stopped waiting for it."""


PLAN_COMMIT = "ab" * 32  # a batch-plan commitment (the Server relays it unchecked)


def memory_job(
    guests: int = 1,
    *,
    epochs: int = 3,
    epsilon: float = math.inf,
    timeout: float = 20.0,
    seed: int = 0,
    flipback_every: int = 0,
    flipback_fraction: float = 0.02,
    dataset: str = "breast_cancer",
    model: ModelConfig | None = None,
    **training: Any,
) -> JobConfig:
    """A demo job (seed 004's column split) for the in-memory hub, with weak test keys."""
    columns = demo_columns(guests, dataset)
    names = ["server", "host", *[f"guest-{i + 1}" for i in range(guests)]]
    parties = {
        name: PartySpec(name, name.split("-")[0], f"mem://{name}", columns.get(name, ()))
        for name in names
    }
    return JobConfig(
        session=uuid.uuid4().hex,
        parties=parties,
        key_bits=TEST_KEY_BITS,
        allow_weak_keys=True,
        timeout_seconds=timeout,
        seed=seed,
        training=TrainingConfig(epochs=epochs, **training),
        label_dp=LabelDPConfig(
            epsilon=epsilon, flipback_every=flipback_every, flipback_fraction=flipback_fraction
        ),
        model=model or ModelConfig(),
        data=DataConfig(dataset=dataset),
    )


def run_parties(
    names: Collection[str], act: Callable[[str], Any], join: float = 120.0
) -> dict[str, Any]:
    """``act(name)`` for every party in its own thread; each result or exception by name."""
    results: dict[str, Any] = {}

    def party(name: str) -> None:
        try:
            results[name] = act(name)
        except Exception as exc:
            results[name] = exc

    threads = [threading.Thread(target=party, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join)
    return results


def run_in_threads(
    job: JobConfig,
    hub: InMemoryHub,
    out: Path,
    *,
    silent: Collection[str] = (),
    jobs: Mapping[str, JobConfig] | None = None,
    data: Mapping[str, PartyData] | None = None,
    join_timeout: float | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run each party of ``job`` in its own thread; return its result or its exception.

    Every transport is opened before any thread starts (a message sent to a party
    whose inbox does not exist yet would fail). ``silent`` parties get an inbox but
    never run. ``jobs``/``data`` replace a party's job or rows; ``options`` adds keyword
    arguments to a party's ``run_party`` (``resume``, ``redraw_labels``; ``plots``: the
    Host draws none unless asked, see :data:`NO_PLOTS`). Threads are daemons
    joined against one deadline: a party still running then is reported as
    :class:`PartyHung`, so a protocol bug fails the test instead of hanging it.
    """
    jobs = jobs or {}
    data = data or {}
    options = options or {}
    transports = {name: hub.transport(name) for name in job.parties}
    results: dict[str, Any] = {}

    def party(name: str) -> None:
        try:
            results[name] = run_party(
                jobs.get(name, job),
                name,
                out / name,
                data=data.get(name),
                transport=transports[name],
                **{**NO_PLOTS, **options.get(name, {})},
            )
        except BaseException as exc:  # the test inspects it
            results[name] = exc

    threads = {
        name: threading.Thread(target=party, args=(name,), name=f"party-{name}", daemon=True)
        for name in job.parties
        if name not in silent
    }
    for thread in threads.values():
        thread.start()
    limit = job.timeout_seconds + 30.0 if join_timeout is None else join_timeout
    deadline = time.monotonic() + limit
    try:
        for name, thread in threads.items():
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                results[name] = PartyHung(f"{name} still running after {limit:g} s")
    finally:
        for name in silent:
            transports[name].close()
    return results


def run_resumable(
    job: JobConfig,
    out: Path,
    *,
    resume: bool = False,
    die: tuple[str, int] | None = None,
    label_seed: int | None = None,
    tables: Mapping[str, IdTable | None] | None = None,
    hub: InMemoryHub | None = None,
) -> dict[str, Any]:
    """Every party in a thread over a fresh hub; returns results or exceptions.

    ``die``: that party's transport fails on its k-th send; the others then see it lost
    (as they would a crashed process's connection) and stop. ``label_seed``: the Host
    flips its labels and draws its initial weights with a seeded generator (not
    private), so two runs flip and start alike.
    ``tables``: a party's id table. Fails the test if a party hangs. Hosts draw no
    plots (:data:`NO_PLOTS`).
    """
    hub = hub or InMemoryHub(record=False)
    crashes = Crashes()
    transports: dict[str, Any] = {
        name: WatchingTransport(hub.transport(name), crashes) for name in job.parties
    }
    if die is not None:
        transports[die[0]] = DyingTransport(transports[die[0]]._inner, die[1], crashes)
    results: dict[str, Any] = {}

    def party(name: str) -> None:
        seeded = label_seed is not None and name == job.host
        try:
            results[name] = run_party(
                job,
                name,
                out / name,
                transport=transports[name],
                resume=resume,
                table=(tables or {}).get(name),
                label_rng=np.random.default_rng(label_seed) if seeded else None,
                **NO_PLOTS,
            )
        except BaseException as exc:  # the test inspects it
            results[name] = exc

    threads = [threading.Thread(target=party, args=(n,), daemon=True) for n in job.parties]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(job.timeout_seconds * 3 + 30)
        assert not thread.is_alive(), "a party hung"
    return results


@dataclass
class ServerUnderTest:
    """The real Server in a thread, and the Host and Guest channels a test plays."""

    job: JobConfig
    out: Path
    host: Channel
    guest: Channel
    key: PaillierKey
    thread: threading.Thread
    result: dict[str, Any]

    def ask(self, by: Channel, msg: Message) -> Message:
        """Send to the Server and wait for its answer (PeerAborted if it stops instead)."""
        by.send("server", msg, getattr(msg, "epoch", 0))
        return by.expect({Kind.DECRYPTED, Kind.EPOCH_RESULT}, {"server"}).body

    def refused(self, attacker: str, kind: str, by: Channel, msg: Message) -> str:
        """The request is refused, audited, and the session ends naming the attacker."""
        with pytest.raises(PeerAborted, match=f"server: {attacker} "):
            self.ask(by, msg)
        self.thread.join(15)
        error = self.result["server"]
        assert isinstance(error, ProtocolError) and str(error).startswith(attacker), error
        assert "\n" not in str(error)
        records = [json.loads(line) for line in (self.out / AUDIT).read_text().splitlines()]
        want = {"direction": "refused", "peer": attacker, "kind": kind}.items()
        assert any(want <= r.items() for r in records), records[-3:]
        return str(error)


ServerT = TypeVar("ServerT", bound=ServerUnderTest)


def start_server(
    played: type[ServerT],
    tmp_path: Path,
    job: JobConfig,
    rows: int,
    features: tuple[int, int],
) -> ServerT:
    """Start the real Server; play both handshakes (Hello, public key, resume from scratch).

    ``features``: the Host's and the Guest's column counts their Hellos announce.
    """
    hub = InMemoryHub(record=False)
    transports = {name: hub.transport(name) for name in job.parties}
    result: dict[str, Any] = {}

    def serve() -> None:
        try:
            result["server"] = run_party(job, "server", tmp_path, transport=transports["server"])
        except BaseException as exc:  # the test inspects it
            result["server"] = exc

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    host, guest = (
        Channel(transports[n], session=job.session, timeout=10, fresh_rule=False)
        for n in job.parties
        if n != "server"
    )
    print_ = job.fingerprint()
    host.send("server", Hello("host", print_, rows, features[0], plan_commit=PLAN_COMMIT))
    guest.send("server", Hello("guest", print_, rows, features[1], plan_commit=PLAN_COMMIT))
    public = guest.expect({Kind.PUBLIC_KEY}, {"server"}).body
    assert isinstance(public, PublicKeyMessage)
    host.expect({Kind.PUBLIC_KEY}, {"server"})
    host.expect({Kind.CHECKPOINTS}, {"server"})
    host.send("server", Resume(completed=0))
    key = PaillierKey.from_n(public.n, public.h_s)
    return played(job, tmp_path, host, guest, key, thread, result)


def failures(results: Mapping[str, Any]) -> dict[str, BaseException]:
    """The parties that ended with an exception."""
    return {n: r for n, r in results.items() if isinstance(r, BaseException)}


def decoded_traffic(hub: InMemoryHub) -> list[tuple[str, str, Header, Message]]:
    """Every message the hub carried, decoded: (sender, receiver, header, body)."""
    out = []
    for sent in hub.sent:
        header, body = codec.decode(sent.frames)
        out.append((sent.sender, sent.receiver, header, body))
    return out


def read_model(out: Path, name: str) -> dict[str, Any]:
    """A party's saved model.json."""
    return dict(json.loads((out / name / "model.json").read_text()))


def host_start(out: Path, host: str = "host") -> np.ndarray:
    """The Host's private initial weights of a run, ``(features + 1, k)``, bias row last.

    Read from the Host's own model.json: the centralised twin starts where the Host did.
    """
    return vfl_models.host_start(out / host / "model.json")


def host_plan(out: Path, job: Any, x_host: np.ndarray, host: str = "host") -> list[Any]:
    """The run's batch plan (from the joint seed in the Host's model.json): the twin's."""
    return vfl_models.host_plan(out / host / "model.json", job, x_host)


def zero_start(glm: Any, x: np.ndarray, *_: Any, **__: Any) -> np.ndarray:
    """A stand-in for ``learning.start.host_start``: the Host at zero, as it once started."""
    return np.zeros((x.shape[1], glm.outputs))


def read_summary(out: Path) -> dict[str, Any]:
    """The Host's summary.json."""
    return dict(json.loads((out / "host" / "summary.json").read_text()))


def party_data(job: JobConfig) -> dict[str, PartyData]:
    """Each data holder's rows as run_party would load them."""
    return {name: load_data(job, name, None, None) for name in [job.host, *job.guests]}


def with_labels(data: PartyData, y_train: np.ndarray) -> PartyData:
    """The same rows with other training labels."""
    return replace(data, y_train=np.asarray(y_train, dtype=np.int64))
