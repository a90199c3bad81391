"""A job's life in one study: its state, its progress, and what it cost.

The record is the engine's: the engine changes what the event queue depends on (placement,
speed, pauses); the methods here change only what is the job's own (progress, checkpoints,
counters). Other parts read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import JobSpec
from xdscheduler.sim import reconfig

CHECKPOINT_S = 1800.0  # jobs save a checkpoint every 30 minutes of training
DONE_TOLERANCE = 1e-9  # a job within this share of its tokens has finished


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"


@dataclass
class JobRun:
    """One job's life in one study."""

    spec: JobSpec
    tokens: float
    arrival_s: float
    priority: int
    index: int = 0  # its place among the study's jobs (arrival, then name): the order of passes
    tenant: str = "default"  # whose job: queues and metrics are shown per tenant
    start_s: float | None = None
    end_s: float | None = None
    done: float = 0.0  # tokens trained
    checkpoint: float = 0.0  # tokens safe in the last checkpoint
    next_checkpoint_s: float = math.inf
    checkpoint_every_s: float = CHECKPOINT_S
    placement: Placement | None = None
    rate: float = 0.0  # tokens per second now
    bytes_per_token: float = 0.0  # over the WAN
    price_per_gb: float = 0.0
    paused_until: float = 0.0
    slowdown: float = 1.0  # a straggler in its placement stretches every step
    recovering: bool = False  # lost its accelerators to a fault; first call on the pools
    resuming: bool = False  # gave its accelerators back: loads its checkpoint when it restarts
    replans: int = 0
    requeues: int = 0
    wan_gb: float = 0.0
    wan_cost: float = 0.0
    lost_gpu_s: float = 0.0  # work redone after faults, in accelerator-seconds
    gpu_s: dict[int, float] = field(default_factory=dict)  # accelerator-seconds held, by domain
    next: Placement | None = None  # the plan being prepared alongside (make-before-break)
    switch_at: float = math.inf  # when it is ready and the job switches to it
    switch_pause_s: float = 0.0  # how long the switch stops training

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def flops_per_token(self) -> float:
        return self.spec.flops_per_token

    @property
    def running(self) -> bool:
        return self.placement is not None and self.end_s is None

    @property
    def on(self) -> Placement:
        """The placement it runs on (a queued job has none)."""
        if self.placement is None:
            raise ValueError(f"job {self.name} is not placed")
        return self.placement

    @property
    def state(self) -> JobState:
        if self.end_s is not None:
            return JobState.COMPLETED
        return JobState.RUNNING if self.placement is not None else JobState.QUEUED

    @property
    def left(self) -> float:
        return self.tokens - self.done

    @property
    def finished_training(self) -> bool:
        return self.done >= self.tokens * (1 - DONE_TOLERANCE)

    @property
    def preparing(self) -> dict[int, int]:
        """Accelerators taken for the next plan beyond those the job holds, by domain."""
        if self.next is None:
            return {}
        return reconfig.new_accelerators(self.on, self.next)

    @property
    def held_gpus(self) -> int:
        """Accelerators it holds now: its placement's and those of a plan being prepared."""
        return self.on.total_gpus + sum(self.preparing.values())

    def finish_s(self, now: float) -> float:
        """When it finishes at its speed now (inf while it trains nothing)."""
        if not self.running or self.rate <= 0:
            return math.inf
        return max(now, self.paused_until) + self.left / self.rate

    def resume_s(self, now: float) -> float:
        """When its pause ends (inf when it is not paused)."""
        return self.paused_until if self.running and self.paused_until > now else math.inf

    def advance(self, now: float, t: float, window_end_s: float = math.inf) -> float:
        """Train from `now` to `t` (after any pause), saving checkpoints on their schedule, and
        hold its accelerators; returns the tokens trained before `window_end_s`."""
        start = max(now, self.paused_until)
        gained = min(self.rate * max(t - start, 0.0), self.left)
        self.done += gained
        gb = gained * self.bytes_per_token / 1e9
        self.charge_wan(gb, gb * self.price_per_gb)
        while self.next_checkpoint_s <= t:
            self.checkpoint = self.done
            self.next_checkpoint_s += self.checkpoint_every_s
        return min(gained, self.rate * max(min(t, window_end_s) - start, 0.0))

    def hold(self, dt: float) -> float:
        """Its accelerators (and those of a plan being prepared) held for `dt` more seconds,
        metered by domain (what it is billed for); returns the accelerator-seconds."""
        for taken in (self.on.taken, self.preparing):
            for i, n in taken.items():
                self.gpu_s[i] = self.gpu_s.get(i, 0.0) + n * dt
        return self.held_gpus * dt

    def charge_wan(self, gb: float, cost: float) -> None:
        """What crossed the WAN for it goes on its bill."""
        self.wan_gb += gb
        self.wan_cost += cost

    def save(self) -> None:
        """A checkpoint now (a job alive enough to write one before it moves)."""
        self.checkpoint = self.done

    def lose_work(self) -> None:
        """Back to the last checkpoint; what was trained since is work to redo."""
        lost = self.done - self.checkpoint
        if lost > 0 and self.rate > 0:
            self.lost_gpu_s += lost / self.rate * self.on.total_gpus
        self.done = self.checkpoint

    def count_replan(self) -> None:
        self.replans += 1
