"""The horizontal round as pure steps: sample, train locally, randomize, aggregate, evaluate.

The in-process simulator and the networked roles call these same functions, so
an experiment gives the same numbers whichever way it runs (up to timing drops).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from privfl.config.horizontal import DELTA_REPORTS, HflConfig
from privfl.data.images import Dataset, load_dataset
from privfl.data.population import ClientRows, client_rows
from privfl.learning.batched import BatchedSGD
from privfl.learning.batched_mlp import FusedMLPSGD, is_mlp
from privfl.learning.local_dp import private_local_train
from privfl.learning.models import build_model, get_flat, layer_slices, pick_device, set_flat
from privfl.learning.robust import combine
from privfl.mechanisms.accountants import nbafl_sigmas
from privfl.mechanisms.noise import NoiseSource, gaussian_grid, gaussian_release, seeded_source
from privfl.mechanisms.randomize import Calibration, calibrate, randomize


@dataclass
class Setup:
    """What every party derives identically from the job: data split, model shape, calibration."""

    config: HflConfig
    data: Dataset
    shards: ClientRows  # each client's row indices into ``data`` (index views, no copies)
    device: torch.device
    model: nn.Module
    slices: list[tuple[str, slice]]
    calib: Calibration
    _train: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def dims(self) -> int:
        return int(self.slices[-1][1].stop)

    def train_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The shared training set on the device (made once; clients index into it)."""
        if self._train is None:
            self._train = (
                torch.from_numpy(self.data.x_train).to(self.device),
                torch.from_numpy(self.data.y_train).to(self.device),
            )
        return self._train


def make_setup(config: HflConfig) -> Setup:
    """Load the data, split it among the clients (seeded) and build the initial model."""
    torch.manual_seed(config.seed)
    data = load_dataset(config.dataset, config.data_dir, config.test_size, config.seed)
    shards = client_rows(
        data.y_train, config.clients, config.dirichlet, config.seed, config.client_rows
    )
    device = pick_device(config.device)
    model = build_model(config.dataset, data.input_shape, data.num_classes).to(device)
    slices = layer_slices(model)
    initial_norm = float(get_flat(model).double().norm())  # public: from the job seed
    calib = calibrate(
        config, slices[-1][1].stop, shards.smallest, initial_norm, largest_shard=shards.largest
    )
    return Setup(config, data, shards, device, model, slices, calib)


def sample_clients(config: HflConfig, round_: int) -> list[int]:
    """The aggregator's K-of-N sample for a round (seeded by job seed and round; public)."""
    rng = np.random.default_rng([config.seed, round_, 1])
    k = max(1, round(config.fraction * config.clients))
    return sorted(rng.choice(config.clients, size=k, replace=False).tolist())


def noise_source(config: HflConfig, process: NoiseSource, *parts: int) -> NoiseSource:
    """The noise of one draw site: the process's CSPRNG, or (``seeded_noise``) one from the job.

    ``parts`` name the site (round, client, purpose) so seeded runs are reproducible.
    """
    return seeded_source(config.seed, *parts) if config.seeded_noise else process


def joins(config: HflConfig, client: int, round_: int, source: NoiseSource) -> bool:
    """Seed 003's random participation: joins with p, then drops out with q (the client decides).

    The coin is the client's own draw from its noise source (the OS CSPRNG), so nobody
    who knows the job seed can tell who took part.
    """
    if config.participation >= 1 and config.dropout == 0:
        return True
    rng = noise_source(config, source, round_, client, 2).rng
    return bool(rng.random() < config.participation and rng.random() >= config.dropout)


def report_indices(setup: Setup, last_update: torch.Tensor | None, round_: int) -> torch.Tensor:
    """The k coordinates of the *-topk mechanisms, from public information by default.

    Public: the largest coordinates of the last global update (round 1: a seeded
    random set). The private variant (the client's own update) is chosen in
    :func:`client_report` and leaks the index set.
    """
    k = setup.calib.k
    if last_update is None or not bool(last_update.abs().sum() > 0):
        gen = torch.Generator().manual_seed(setup.config.seed * 100_003 + round_)
        return torch.randperm(setup.dims, generator=gen)[:k].sort().values.to(setup.device)
    return torch.topk(last_update.abs(), k).indices.sort().values


def batch_order_generator(config: HflConfig, round_: int, client: int) -> torch.Generator:
    """The client's batch order for plain SGD: from the job seed (a non-private choice)."""
    return torch.Generator().manual_seed(config.seed * 1_000_003 + round_ * 1009 + client)


def train_clients(
    setup: Setup,
    clients: list[int],
    global_weights: torch.Tensor,
    round_: int,
    source: NoiseSource | None = None,
) -> torch.Tensor:
    """Local training of ``clients`` from the global weights: their weights ``[clients, dims]``.

    With ``batched`` the clients train as one stacked computation, each exactly as
    :func:`local_train` trains it (the MLP by its fused step unless ``fused_mlp`` is
    off, other models by ``vmap``); DP-SGD/FSDP local training stays one client after
    another.
    """
    cfg = setup.config
    if not cfg.batched or cfg.local_dp != "none" or not clients:
        trained = [local_train(setup, c, global_weights, round_, source) for c in clients]
        return torch.stack(trained) if trained else global_weights.new_empty((0, setup.dims))
    kind = FusedMLPSGD if is_mlp(setup.model) and cfg.fused_mlp else BatchedSGD
    trainer = kind(setup.model, lr=cfg.lr, batch_size=cfg.batch_size, mu=cfg.fedprox_mu)
    gens = {c: batch_order_generator(cfg, round_, c) for c in clients}
    rows = [setup.shards[c] for c in clients]

    def orders(i: int, n: int) -> torch.Tensor:
        return torch.randperm(n, generator=gens[clients[i]])

    return trainer.train(global_weights, rows, orders, cfg.local_epochs, setup.train_tensors())


def local_train(
    setup: Setup,
    client: int,
    global_weights: torch.Tensor,
    round_: int,
    source: NoiseSource | None = None,
) -> torch.Tensor:
    """E epochs of mini-batch SGD on the client's rows, FedProx term ``μ/2 ‖w − w_g‖²`` if μ > 0.

    The batch order of plain SGD comes from the job seed (a non-private choice); DP-SGD's
    Poisson sampling and noise come from ``source`` (required when ``local_dp`` is on).
    """
    cfg = setup.config
    model = setup.model
    set_flat(model, global_weights)
    model.train()
    rows = setup.shards[client]
    x = torch.from_numpy(setup.data.x_train[rows]).to(setup.device)
    y = torch.from_numpy(setup.data.y_train[rows]).to(setup.device)
    gen = batch_order_generator(cfg, round_, client)
    if cfg.local_dp != "none":  # DP-SGD / FSDP local training (privfl.learning.local_dp)
        if source is None:
            raise ValueError("private local training needs a noise source")
        private_local_train(
            model, x, y, method=cfg.local_dp, epochs=cfg.local_epochs, batch_size=cfg.batch_size,
            lr=cfg.lr, noise_multiplier=cfg.local_noise, clip=cfg.local_clip,
            rank=cfg.fsdp_rank, rng=noise_source(cfg, source, round_, client, 3).rng,
        )  # fmt: skip
        return get_flat(model)
    optimiser = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    anchor = [p.detach().clone() for p in model.parameters()]
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(cfg.local_epochs):
        order = torch.randperm(len(rows), generator=gen).to(setup.device)
        for start in range(0, len(rows), cfg.batch_size):
            batch = order[start : start + cfg.batch_size]
            optimiser.zero_grad()
            loss = loss_fn(model(x[batch]), y[batch])
            if cfg.fedprox_mu > 0:
                prox = sum(
                    ((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor, strict=True)
                )
                loss = loss + cfg.fedprox_mu / 2 * prox
            loss.backward()
            optimiser.step()
    return get_flat(model)


def client_report(
    setup: Setup,
    client: int,
    global_weights: torch.Tensor,
    indices: torch.Tensor,
    round_: int,
    source: NoiseSource,
) -> torch.Tensor:
    """Train locally and apply the local randomizer: the only thing that leaves the client.

    ``source`` is the client process's CSPRNG generator (:func:`private_source`); with
    the research option ``seeded_noise`` the noise is derived from the job instead.
    """
    weights = local_train(setup, client, global_weights, round_, source)
    return randomize_weights(setup, client, weights, global_weights, indices, round_, source)


# Stacked weights per computation when ``batch_clients`` is 0, in floats: on the CPU a
# group that fits the caches (measured fastest on digits' MLP: 128 clients of 19,466
# weights, among 16..1000); on a GPU large groups (≈ 4,000 of that MLP) to fill it.
AUTO_GROUP_FLOATS = {"cpu": 2_500_000, "cuda": 80_000_000}


def group_size(setup: Setup) -> int:
    """How many clients train as one stacked computation (``batch_clients``; 0 = auto)."""
    floats = AUTO_GROUP_FLOATS.get(setup.device.type, AUTO_GROUP_FLOATS["cpu"])
    return setup.config.batch_clients or max(1, floats // setup.dims)


def client_reports(
    setup: Setup,
    clients: list[int],
    global_weights: torch.Tensor,
    indices: torch.Tensor,
    round_: int,
    source: NoiseSource,
) -> list[torch.Tensor]:
    """:func:`client_report` of many clients, trained :func:`group_size` at a time.

    Only one group's trained weights are held at once: memory grows with the
    reports of the round, not with the population.
    """
    reports: list[torch.Tensor] = []
    step = group_size(setup)
    for first in range(0, len(clients), step):
        group = clients[first : first + step]
        trained = train_clients(setup, group, global_weights, round_, source)
        reports += [
            randomize_weights(setup, c, w, global_weights, indices, round_, source)
            for c, w in zip(group, trained, strict=True)
        ]
    return reports


def randomize_weights(
    setup: Setup,
    client: int,
    weights: torch.Tensor,
    global_weights: torch.Tensor,
    indices: torch.Tensor,
    round_: int,
    source: NoiseSource,
) -> torch.Tensor:
    """The client's local randomizer on its trained weights (noise from ``source``)."""
    cfg = setup.config
    if cfg.mechanism in DELTA_REPORTS and not cfg.topk_public:
        indices = torch.topk((weights - global_weights).abs(), setup.calib.k).indices.sort().values
    noise = noise_source(cfg, source, round_, client, 1)
    return randomize(cfg, setup.calib, weights, global_weights, setup.slices, indices, noise)


def aggregate(
    setup: Setup,
    global_weights: torch.Tensor,
    reports: list[torch.Tensor],
    round_: int,
    source: NoiseSource,
    clients: int = 0,
) -> torch.Tensor:
    """The job's ``aggregation`` rule over the reports (weights), or ``θ_{t−1} +`` that rule
    over the updates for the top-k mechanisms (:mod:`privfl.learning.robust`).
    ``clients``: how many clients were asked for the reports (the trimmed mean's count).

    With NbAFL's server noise (mean only), discrete ``N(0, σ_D²)`` is added to the average
    before broadcast (from the aggregator's CSPRNG ``source``).
    """
    if not reports:
        return global_weights
    cfg = setup.config
    mean = combine(torch.stack(reports), cfg.aggregation, cfg.trim_fraction, clients)
    new = global_weights + mean if cfg.mechanism in DELTA_REPORTS else mean
    if cfg.mechanism == "gaussian" and cfg.server_noise:
        _, sigma_d = nbafl_sigmas(
            C=cfg.clip_norm,
            m=setup.shards.smallest,
            N=cfg.clients,
            T=cfg.rounds,
            L=1,
            epsilon=cfg.epsilon,
            delta=cfg.delta,
        )
        if sigma_d > 0:
            noise = noise_source(cfg, source, round_, 0, 4)
            grid = gaussian_grid(sigma_d, 1)
            noisy = gaussian_release(new.double().cpu().numpy(), sigma_d, grid, noise)
            new = torch.from_numpy(noisy).to(dtype=new.dtype, device=new.device)
    return new


@torch.no_grad()
def evaluate(setup: Setup, weights: torch.Tensor) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of the global model on the test split."""
    model = setup.model
    set_flat(model, weights)
    model.eval()
    x = torch.from_numpy(setup.data.x_test).to(setup.device)
    y = torch.from_numpy(setup.data.y_test).to(setup.device)
    correct, loss = 0, 0.0
    for start in range(0, len(y), 1024):
        logits = model(x[start : start + 1024])
        loss += float(nn.functional.cross_entropy(logits, y[start : start + 1024], reduction="sum"))
        correct += int((logits.argmax(dim=1) == y[start : start + 1024]).sum())
    return correct / len(y), loss / len(y)
