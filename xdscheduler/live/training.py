"""The mechanics every worker of a live job runs on under Ray Train's TorchTrainer: the run's
configuration, its process groups, its checkpoints. The job's own training code (the built-in
GPT's, or the user's) sees them through `live.plan.Plan`.

Data parallelism is hierarchical, as the cost model assumes: gradients are summed inside each
domain, exchanged across domains by one leader per domain (the only traffic on the WAN), and
broadcast back inside the domain. With `diloco_h` > 0 the domains train apart and average their
weights every H steps (DiLoCo's outer step, here plain averaging). Rank 0 checkpoints every
`checkpoint_every` steps to the run's storage; a run started again under the same name resumes
from the last checkpoint, on whatever workers it now has.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from pydantic import Field, PositiveInt, model_validator

from xdscheduler.live.shape import GptShape
from xdscheduler.schema import Strict

ASK_EVERY = 5  # steps between two questions to the controller: go on?
# What the controller answers: go on; stop now (cancelled, or given up for lost: save nothing);
# save a checkpoint and stop (preempted: it resumes from there later)
GO, STOP, SAVE_AND_STOP = 0, 1, 2
BUILT_IN = "xdscheduler.live.gpt:train"  # the training code of a job that names none
# Ray Train's controller polls its workers every 2 s by default, and a worker's report (each
# checkpoint) waits until the one before it was polled: every checkpoint stalled training about
# 1 s. Polled every 0.5 s, a checkpoint costs tens of ms, and a dead worker is heard sooner.
TRAIN_POLL_ENV, TRAIN_POLL_S = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", 0.5


def trainer_env(dashboard: str | None, gcs: str) -> dict[str, str]:
    """The environment of a task that drives a Ray Train run on the cluster whose GCS is at
    `gcs` (HOST:PORT) and whose dashboard is `dashboard` (None: unknown, then found through
    the GCS); the run's controller and workers inherit it. Ray Train's placement-group
    cleaner asks the dashboard's state API about the run's controller; left to find the
    cluster itself, it reads Ray's default temp folder, not this cluster's, waits 10 s for an
    answer that never comes, and every run ended 12 s late (a job's move, its done, its
    recovery). The poll interval is the user's where they set it."""
    where = {"RAY_API_SERVER_ADDRESS": dashboard} if dashboard else {"RAY_ADDRESS": gcs}
    return {TRAIN_POLL_ENV: os.environ.get(TRAIN_POLL_ENV, str(TRAIN_POLL_S)), **where}


class TrainConfig(Strict):
    """What one job's workers train: the model, the batch, how long, how to sync."""

    job: str
    shape: GptShape = GptShape()
    global_batch: int = Field(default=16, gt=0, le=4096)
    steps: int = Field(default=60, gt=0, le=1_000_000)
    lr: float = Field(default=3e-3, gt=0, le=1)
    seed: int = Field(default=0, ge=0)
    diloco_h: int = Field(default=0, ge=0, le=10_000)  # 0: synchronous every step
    micro_batch: int = Field(default=0, ge=0, le=4096)  # per forward pass; 0: a rank's share
    attempt: int = Field(default=0, ge=0)  # which placement of the job this run is
    checkpoint_every: int = Field(default=10, gt=0)
    threads: int = Field(default=1, gt=0, le=256)  # torch threads per worker
    controller: str | None = None  # the named actor that hears each step (None: nobody)
    storage: str | None = None  # the runs' storage: resume from the newest checkpoint there
    entrypoint: str = BUILT_IN  # module:function, called with the worker's Plan
    script: str | None = None  # or a Python file run as __main__ (Plan.current() inside)
    config: dict[str, Any] = Field(default_factory=dict)  # the job's own settings, for its code
    placement_group: str | None = None  # the run's placement group (the controller's)
    launched_at: float | None = None  # wall clock of the run's launch, for its start-up stages
    # samples a step each domain's ranks take together: the planner's split by the domains'
    # speeds (empty: the global batch evenly over every rank)
    domain_batch: dict[str, PositiveInt] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _whole_batch(self) -> TrainConfig:
        if self.domain_batch and sum(self.domain_batch.values()) != self.global_batch:
            raise ValueError(
                f"domain_batch {self.domain_batch} sums to {sum(self.domain_batch.values())}; "
                f"the domains' samples must add up to global_batch {self.global_batch}"
            )
        return self


def accumulate(model, tokens, micro_batch: int):
    """Gradients of the mean loss over `tokens`, a micro-batch at a time, as the plan says;
    the mean loss."""
    total = 0.0
    for part in tokens.split(micro_batch or len(tokens)):
        loss = model.loss(part) * (len(part) / len(tokens))
        loss.backward()
        total = total + loss.detach()
    return total


def share(batch: int, world: int, rank: int) -> int:
    """Rank's samples of the global batch: as even as can be, the first ranks one more."""
    return batch // world + (rank < batch % world)


def rank_batches(
    global_batch: int, domain_batch: dict[str, int], members: dict[str, list[int]]
) -> dict[int, int]:
    """Samples a step each rank takes: its domain's (`domain_batch`, split by the domains'
    speeds) as evenly as can be over the domain's ranks; the global batch evenly over every
    rank where no split names exactly the run's domains."""
    if set(domain_batch) != set(members):
        world = sum(len(ranks) for ranks in members.values())
        return {r: share(global_batch, world, r) for ranks in members.values() for r in ranks}
    return {
        r: share(domain_batch[d], len(ranks), i)
        for d, ranks in members.items()
        for i, r in enumerate(ranks)
    }


class DomainSync:
    """Process groups of one job: every domain's ranks, and the domains' leaders (lowest rank
    of each domain). Every rank builds every group, in the same order, as torch requires."""

    def __init__(self, domain: str, rank: int, world: int, device=None):
        import torch.distributed as dist

        domains = [""] * world  # every rank's domain, once gathered
        dist.all_gather_object(domains, domain)
        self.names = sorted(set(domains))
        self.members = {d: [r for r in range(world) if domains[r] == d] for d in self.names}
        self.groups = {d: dist.new_group(self.members[d]) for d in self.names}
        leaders = [self.members[d][0] for d in self.names]
        self.cross = dist.new_group(leaders) if len(leaders) > 1 else None
        self.domain, self.rank, self.world = domain, rank, world
        self.leader = self.members[domain][0]
        self.device = device  # where the small tensors of `agree` go (NCCL: the GPU)

    def _flat(self, tensors):
        import torch

        return torch.cat([t.reshape(-1) for t in tensors])

    def _unflat(self, flat, tensors) -> None:
        at = 0
        for t in tensors:
            t.copy_(flat[at : at + t.numel()].view_as(t))
            at += t.numel()

    def hierarchical_sum(self, flat, cross: bool):
        """Sum over the domain, then (when `cross`) over domains through the leaders only."""
        import torch.distributed as dist

        group = self.groups[self.domain]
        dist.reduce(flat, dst=self.leader, group=group)
        if cross and self.cross is not None and self.rank == self.leader:
            dist.all_reduce(flat, group=self.cross)
        dist.broadcast(flat, src=self.leader, group=group)
        return flat

    def gradients(self, model, weight: float, cross: bool = True) -> None:
        """The gradient of the mean loss over every rank's samples (`cross`), or over the
        domain's (DiLoCo): each rank's, of the mean over its own, weighted by its share of
        those samples (`weight`), then summed."""
        grads = [p.grad for p in model.parameters()]
        flat = self.hierarchical_sum(self._flat(grads) * weight, cross)
        self._unflat(flat, grads)

    def average_params(self, model, weight: float) -> None:
        """DiLoCo's outer step: every rank takes the mean of the domains' weights, each
        domain's weighted by its samples (its ranks hold the same weights; `weight`: this
        rank's share of the step's samples)."""
        import torch

        params = [p.data for p in model.parameters()]
        with torch.no_grad():
            flat = self._flat(params) * weight
            self._unflat(self.hierarchical_sum(flat, cross=True), params)

    def broadcast_params(self, model) -> None:
        import torch.distributed as dist

        for p in model.parameters():
            dist.broadcast(p.data, src=0)

    def agree(self, value: int) -> int:
        """Rank 0's value, on every rank."""
        import torch
        import torch.distributed as dist

        t = torch.tensor([int(value)], device=self.device)
        dist.broadcast(t, src=0)
        return int(t.item())

    def mean(self, value) -> float:
        import torch.distributed as dist

        v = value.clone()
        dist.all_reduce(v)
        return float(v) / self.world


def resume(model, opt, storage: str | None, job: str, device=None) -> int:
    """Load the job's newest complete checkpoint; the step to start from (0: none).

    Ray Train's own record of the latest checkpoint lags the uploads (its controller hears the
    workers' reports in rounds), so a run lost between the two would go back further than it
    must: the checkpoints themselves, in the run's storage, say which step is newest."""
    import torch
    from ray import train

    if storage is None:  # a run outside the live plane: it keeps no checkpoints
        return 0
    for folder in newest_checkpoints(storage, job):
        try:
            state = torch.load(folder.open("state.pt"), weights_only=True, map_location=device)
        except (OSError, RuntimeError, EOFError):
            continue  # cut short by the failure: the one before it is whole
        break
    else:
        ckpt = train.get_checkpoint()
        if ckpt is None:
            return 0
        with ckpt.as_directory() as where:
            state = torch.load(
                os.path.join(where, "state.pt"), weights_only=True, map_location=device
            )
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return int(state["step"])


class StoredFolder:
    """A checkpoint folder in the run's storage (a local path or any URI pyarrow reads)."""

    def __init__(self, fs, path: str):
        self.fs, self.path = fs, path

    def open(self, name: str):
        import io

        with self.fs.open_input_stream(f"{self.path}/{name}") as f:
            return io.BytesIO(f.read())

    def step(self) -> int:
        try:
            return int(self.open("step").read())
        except (OSError, ValueError):
            return -1


def newest_checkpoints(storage: str, job: str) -> list[StoredFolder]:
    """The job's checkpoint folders, the newest step first."""
    from pyarrow import fs as pafs

    filesystem, root = (
        pafs.FileSystem.from_uri(storage)
        if "://" in storage
        else (pafs.LocalFileSystem(), os.path.abspath(storage))
    )
    selector = pafs.FileSelector(f"{root}/{job}", allow_not_found=True)
    folders = [
        StoredFolder(filesystem, info.path)
        for info in filesystem.get_file_info(selector)
        if info.type == pafs.FileType.Directory and info.base_name.startswith("checkpoint_")
    ]
    return sorted((f for f in folders if f.step() >= 0), key=StoredFolder.step, reverse=True)


def checkpoint(model, opt, step: int, metrics: dict, rank: int) -> None:
    """Every rank reports; rank 0 with the model and optimizer (all ranks hold the same)."""
    import torch
    from ray import train

    if rank != 0:
        train.report(metrics, checkpoint=None)
        return
    with tempfile.TemporaryDirectory() as folder:
        torch.save(
            {"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
            os.path.join(folder, "state.pt"),
        )
        with open(os.path.join(folder, "step"), "w") as f:  # written last: a whole folder
            f.write(str(step))
        train.report(metrics, checkpoint=train.Checkpoint.from_directory(folder))
