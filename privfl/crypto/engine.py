"""Where a party's heavy Paillier work runs: its own process pool (default), its own Ray
cluster, or its own GPU (``cuda``: obfuscators and decryptions in torch, privfl.crypto.gpu_pool).

The engine is a site-local setting (``privfl vfl host --engine ray``), never part of the
shared job: the peers cannot tell which one a party uses, since the results are the same.
A Ray cluster sees what the party's worker processes see (its feature columns, its
ciphertexts), so every node of it must belong to the party's own institution; the key
holder's primes stay on the party's machine unless ``private_on_cluster`` says otherwise
(docs/deploy.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from privfl.errors import ConfigError

if TYPE_CHECKING:  # the CLI reads ENGINES without loading the crypto
    from privfl.crypto.pools import NoisePool

ENGINES = ("pool", "ray", "cuda")


@dataclass(frozen=True, slots=True)
class Engine:
    """A party's choice of workers: ``pool`` (processes on this machine), ``ray`` or ``cuda``.

    ``address`` (Ray): ``"auto"`` joins the cluster this machine belongs to,
    ``"ray://head:10001"`` a remote head; None starts a cluster of this machine alone.
    ``private_on_cluster`` (Ray, key holder): also send the private primes to the
    cluster's workers, for CRT obfuscators and decryptions; off, they stay in processes
    on this machine. ``device`` (cuda): the torch device; ``"cpu"`` runs the same code on
    CPU torch (tests, and the bench's reference figures).
    """

    kind: str = "pool"
    address: str | None = None
    private_on_cluster: bool = False
    device: str = "cuda"

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}, not {self.kind!r}")
        if self.kind != "ray" and (self.address or self.private_on_cluster):
            raise ConfigError("--ray-address and --ray-private-key need --engine ray")
        if self.kind == "cuda":
            from privfl.crypto.gpu_pool import load_torch

            load_torch(self.device)  # a missing torch or device is a one-line error now

    def pool(
        self,
        n: int,
        workers: int = 0,
        h_s: int = 0,
        *,
        nice: int | None = None,
        primes: tuple[int, int] | None = None,
        noise: bool = True,
    ) -> NoisePool:
        """The party's workers for a key with modulus ``n`` (see :class:`NoisePool`);
        ``nice`` None: the pool's background priority for its obfuscators; ``noise``
        False: no obfuscator workers (a party that only decrypts)."""
        from privfl.crypto.pools import BACKGROUND_NICE, NoisePool

        nice = BACKGROUND_NICE if nice is None else nice
        if self.kind == "pool":
            return NoisePool(n, workers, h_s, nice, primes, noise=noise)
        if self.kind == "cuda":
            from privfl.crypto.gpu_pool import GpuPool

            return GpuPool(n, self.device, h_s=h_s, primes=primes, workers=workers, noise=noise)
        from privfl.crypto.ray_pool import RayPool

        return RayPool(
            n,
            workers,
            h_s,
            nice,
            primes,
            address=self.address,
            private_on_cluster=self.private_on_cluster,
            noise=noise,
        )


POOL = Engine()
