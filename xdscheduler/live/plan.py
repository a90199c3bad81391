"""Bring your own training code: what a live job's code is given on each of its workers.

A job file names its code, `entrypoint: package.module:function` (called with the worker's
`Plan`) or `script: path/to/train.py` (run as `__main__`; `Plan.current()` inside), importable
or readable on the cluster's nodes. It runs under Ray Train's TorchTrainer, a process per
worker, with the process group already joined (gloo on CPUs, NCCL on GPUs). The plan says
where the worker stands (its rank, its domain, the ranks of every domain of the run), what the
scheduler decided (DiLoCo every H steps or every step synchronous, the micro-batch), and gives
the few calls that make the code a good citizen of the live plane:

    def train(plan: Plan) -> None:
        model = build(plan.model).to(plan.device)          # plan.model: the job's shape
        opt = torch.optim.AdamW(model.parameters(), lr=plan.lr)
        start = plan.resume(model, opt)                     # from the newest checkpoint (or 0)
        for step in range(start, plan.steps):
            t0 = time.perf_counter()
            loss = ...; loss.backward()                     # this rank's share: plan.batch
            plan.sync_gradients(model)                      # the mean over the right ranks
            opt.step(); opt.zero_grad()
            plan.outer_sync(model, step + 1)                # DiLoCo: the domains' mean, every H
            if not plan.step(step + 1, loss, time.perf_counter() - t0, model, opt):
                break                                       # cancelled, moved, preempted, lost

`plan.step` reports the step to the controller (its loss and time feed `xds jobs`, the online
correction and the watchdog), checkpoints the model and optimizer through Ray Train every
`checkpoint_every` steps, and every few steps asks the controller whether to go on. The
built-in GPT (`live.gpt.train`) and the Hugging Face example (`live.examples.hf_gpt2.train`)
are written this way.
"""

from __future__ import annotations

import importlib
import runpy
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xdscheduler.live.shape import GptShape
from xdscheduler.live.state import DOMAIN_LABEL
from xdscheduler.live.training import (
    ASK_EVERY,
    GO,
    SAVE_AND_STOP,
    DomainSync,
    TrainConfig,
    checkpoint,
    rank_batches,
    resume,
)

if TYPE_CHECKING:
    from ray.actor import ActorHandle

_current: Plan | None = None


@dataclass
class Plan:
    """One worker's view of its job's run (see the module's docstring)."""

    job: str
    rank: int
    world_size: int
    local_rank: int
    domain: str  # this worker's domain
    domains: dict[str, list[int]]  # every domain of the run -> its ranks
    diloco_h: int  # 0: gradients averaged over every rank each step; H: see outer_sync
    steps: int  # train until this step
    start_step: int  # where this run began (set by resume)
    global_batch: int
    batch: int  # this rank's share of the global batch
    domain_batch: int  # its domain's ranks' together (uneven over domains of unlike speeds)
    micro_batch: int  # samples per forward pass the plan chose (0: the whole share)
    lr: float
    seed: int
    checkpoint_every: int
    model: GptShape  # the job's `model:` block: what the planner planned with
    config: dict[str, Any]  # the job's `config:` block, for the code itself
    device: Any  # torch.device: cuda:N on a GPU worker, cpu otherwise
    _run: _Run = field(repr=False)
    losses: list[float] = field(default_factory=list)  # each step's mean loss, this run

    @staticmethod
    def current() -> Plan:
        """The plan of this worker (inside a job's `script:`)."""
        if _current is None:
            raise RuntimeError("no live job runs in this process")
        return _current

    def resume(self, model, opt) -> int:
        """Load the newest whole checkpoint of the job into `model` and `opt`, then give every
        rank rank 0's weights; the step to go on from (0: none yet)."""
        self.start_step = resume(model, opt, self._run.cfg.storage, self.job, self.device)
        self._run.sync.broadcast_params(model)
        self._run.marks["resumed"] = time.time()
        self._run.accelerate()
        return self.start_step

    def sync_gradients(self, model) -> None:
        """The gradient of the mean loss over every rank's samples, or (DiLoCo) over this
        domain's ranks' samples, where `loss.backward()` gave each rank its own mean's."""
        cross = self.diloco_h == 0
        over = self.global_batch if cross else self.domain_batch
        self._run.sync.gradients(model, self.batch / over, cross)

    def outer_sync(self, model, step: int) -> None:
        """Under DiLoCo, at every H-th step: every rank takes the mean of the domains' weights,
        each domain's weighted by its samples."""
        if self.diloco_h and step % self.diloco_h == 0:
            self._run.sync.average_params(model, self.batch / self.global_batch)

    def mean(self, value) -> float:
        """The mean of a scalar tensor over every rank."""
        return self._run.sync.mean(value.detach().to(self.device))

    def step(self, step: int, loss, step_time_s: float, model, opt) -> bool:
        """Step `step` (1-based) is done: report it, checkpoint when due, and say whether to go
        on (False: stop now, every rank at once)."""
        self.losses.append(self.mean(loss))
        return self._run.step(step, self.losses[-1], step_time_s, model, opt)


class _Run:
    """The mechanics behind a Plan: the process groups, the controller, the checkpoints."""

    def __init__(self, cfg: TrainConfig, sync: DomainSync, marks: dict[str, float]):
        import ray

        self.cfg, self.sync, self.marks = cfg, sync, marks
        self.listener = ray.get_actor(cfg.controller) if cfg.controller else None
        self.first, self.joined = True, False

    def accelerate(self) -> None:
        """From here on this worker is one of its domain's accelerators (a local cluster holds
        it to their share of the cores). Its start (imports, the model built, the checkpoint
        read) was host work: outside the share, as a host's CPUs do it beside a GPU."""
        if not self.joined:
            from xdscheduler.live import quota

            quota.join()
            self.joined = True

    def _ask(self, listener: ActorHandle, step: int) -> int:
        """The controller's order at `step` (`LiveController.stopped`)."""
        import ray

        order: ray.ObjectRef[int] = listener.stopped.remote(self.cfg.job, self.cfg.attempt, step)
        return ray.get(order)

    def step(self, step: int, loss: float, step_time_s: float, model, opt) -> bool:
        self.accelerate()  # code that never resumed: from its first step
        cfg, rank = self.cfg, self.sync.rank
        metrics: dict[str, float | dict[str, float]] = {
            "step": step,
            "loss": loss,
            "step_time_s": step_time_s,
            "attempt": cfg.attempt,
        }
        if self.first and cfg.launched_at is not None:  # the stages of its start, from launch
            self.marks["first_step"] = time.time()
            metrics["startup"] = {k: t - cfg.launched_at for k, t in self.marks.items()}
        self.first = False
        if self.listener is not None and rank == 0:
            self.listener.heard.remote(cfg.job, metrics)
        # no storage (a run outside the live plane): nothing to checkpoint to
        saving = cfg.storage is not None and (step % cfg.checkpoint_every == 0 or step == cfg.steps)
        # every few steps, and before each checkpoint: a run cancelled, or one the controller
        # gave up for lost, stops, every rank at the same step, and saves nothing its successor
        # could resume from; one preempted saves first
        if self.listener is not None and (saving or step % ASK_EVERY == 0):
            order = self.sync.agree(self._ask(self.listener, step) if rank == 0 else GO)
            if order == SAVE_AND_STOP:
                checkpoint(model, opt, step, metrics, rank)
            if order != GO:
                return False
        if saving:
            checkpoint(model, opt, step, metrics, rank)
        return True


def entrypoint(cfg: TrainConfig):
    """The job's training code: a callable taking the Plan."""
    if cfg.script:
        return lambda plan: runpy.run_path(cfg.script, run_name="__main__")
    module, _, name = cfg.entrypoint.partition(":")
    return getattr(importlib.import_module(module), name)


def make_plan(
    cfg: TrainConfig,
    rank: int,
    world: int,
    local_rank: int,
    domain: str,
    device,
    marks: dict[str, float],
) -> Plan:
    """The plan of one worker, its process groups made (every rank at once)."""
    sync = DomainSync(domain, rank, world, device)
    marks["groups"] = time.time()
    batches = rank_batches(cfg.global_batch, cfg.domain_batch, sync.members)
    return Plan(
        job=cfg.job,
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        domain=domain,
        domains=sync.members,
        diloco_h=cfg.diloco_h,
        steps=cfg.steps,
        start_step=0,
        global_batch=cfg.global_batch,
        batch=batches[rank],
        domain_batch=sum(batches[r] for r in sync.members[domain]),
        micro_batch=cfg.micro_batch,
        lr=cfg.lr,
        seed=cfg.seed,
        checkpoint_every=cfg.checkpoint_every,
        model=cfg.shape,
        config=cfg.config,
        device=device,
        _run=_Run(cfg, sync, marks),
    )


def train_loop(config: dict) -> None:
    """Ray Train's per-worker function: join the domain's accelerators, make the plan, run the
    job's code with it."""
    global _current
    entered = time.time()
    import ray
    import torch
    from ray import train
    from ray.train.torch import get_device

    cfg = TrainConfig.model_validate(config)
    torch.set_num_threads(cfg.threads)
    device = get_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    labels = ray.get_runtime_context().get_node_labels()
    # Ray's stub says list[str]: a node's labels are strings
    domain: str = labels.get(DOMAIN_LABEL, "local")  # type: ignore[assignment]
    torch.manual_seed(cfg.seed)
    plan = make_plan(cfg, rank, world, ctx.get_local_rank(), domain, device, {"loop": entered})
    code = entrypoint(cfg)
    _current = plan
    try:
        code(plan)
    finally:
        _current = None
