"""What the live controller knows of each job (`JobRecord`), and the rounds of questions it asks
its domains' agents (`Rounds`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

import ray
from ray.exceptions import RayActorError, RayTaskError

from xdscheduler.live.jobs import JobRow, LiveJob
from xdscheduler.planner.space import SINGLE

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup

    from xdscheduler.planner.placement import Placement

Answer = TypeVar("Answer")

WARMUP_STEPS = 3  # a run's first steps (allocation, first collectives) say nothing of speed
# A run's step time is what its last this many steps took: enough that a few jittery steps do
# not move it, few enough that a slowdown shows within as many steps, however long it ran
RECENT_STEPS = 30
FINAL = ("done", "failed", "cancelled")


class Rounds(Generic[Answer]):
    """One question asked of every domain's agent every `every_s`, at most one under way per
    domain: nothing here waits for an answer, and a slow domain delays no other."""

    def __init__(self, every_s: float):
        self.every_s, self.asked_at = every_s, 0.0
        self.under_way: dict[str, tuple[ray.ObjectRef, float]] = {}  # domain -> (ref, asked)

    def answers(self) -> dict[str, Answer | RayActorError | RayTaskError]:
        """Per domain, its answer that came back since the last call (the error, if it
        failed)."""
        if not self.under_way:
            return {}
        refs = [r for r, _ in self.under_way.values()]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        out: dict[str, Answer | RayActorError | RayTaskError] = {}
        for n, (ref, _) in [(n, v) for n, v in self.under_way.items() if v[0] in ready]:
            del self.under_way[n]
            try:
                out[n] = ray.get(ref)
            except (RayActorError, RayTaskError) as err:
                out[n] = err
        return out

    def due(self) -> bool:
        """Whether a round is due now (then it counts as asked)."""
        if time.time() - self.asked_at < self.every_s:
            return False
        self.asked_at = time.time()
        return True

    def ask(self, name: str, call: Callable[[], ray.ObjectRef]) -> None:
        """`call()` (an ObjectRef) for domain `name`, unless its last answer is still due."""
        if name not in self.under_way:
            self.under_way[name] = (call(), time.time())

    def waiting_s(self, name: str, now: float) -> float:
        """How long the domain's question under way has waited (0: none)."""
        return now - self.under_way[name][1] if name in self.under_way else 0.0


@dataclass
class JobRecord:
    job: LiveJob
    submitted: float
    status: str = "queued"  # queued, running (a run of it is under way), done, failed, cancelled
    placement: dict = field(default_factory=dict)  # domains, workers, plan, why, predicted
    step: int = 0
    loss: float | None = None
    first_loss: float | None = None
    first_loss_step: int = 0  # the step first_loss was heard at
    step_times: list = field(default_factory=list)
    heard_at: list = field(default_factory=list)  # (step, wall time) of each step as heard
    attempts: int = 0
    priority: int = 1  # its own, at least its tenant's floor
    run: ray.ObjectRef | None = None  # the runner task's
    group: PlacementGroup | None = (
        None  # the run's placement group (this controller's: removed on every way out)
    )
    cancel: bool = False
    cancel_at: float | None = None  # when its user cancelled it
    chosen: Placement | None = None  # what it runs on (this controller's decision)
    observed: int = 0  # steps the correction has seen of this run
    placed_at: float = 0.0  # when this run was launched
    stepped_at: float | None = None  # when this run's last step was heard (None: none yet)
    marks: dict = field(default_factory=dict)  # this run's start-up stages (wall clock)
    startup_s: float | None = None  # from launch to its first step: what a restart costs
    moving: dict | None = None  # a better placement found: stop at the next ask, queue again
    preempting: dict | None = None  # preempted: checkpoint at the next ask, queue again
    failures: int = 0  # runs in a row that failed (an error, the watchdog)
    checkpointed: int = 0  # the step of its last checkpoint (as far as heard)
    # its steps across domains over the model's, what its link's factor does not take of the
    # difference (all of it where its WAN time is hidden, as DiLoCo's is;
    # Correction.observe_run): the job's own, wherever it crosses, not its domains'
    unexplained: float = 1.0

    def across(self, p: Placement) -> float:
        """What to multiply the model's step on `p` by for this job."""
        return self.unexplained if p.kind != SINGLE else 1.0

    def hear(self, metrics: dict) -> None:
        """One step of its run: where it is, its loss, how long it took."""
        now = time.time()
        if self.startup_s is None and self.placed_at:
            self.startup_s = now - self.placed_at
        step, loss = int(metrics["step"]), float(metrics["loss"])
        # reports may cross: a run's latest step stands (a new run may resume from an earlier one)
        if self.stepped_at is None or step >= self.step:
            self.step, self.loss = step, loss
        self.stepped_at = now
        if self.first_loss is None or step < self.first_loss_step:
            self.first_loss, self.first_loss_step = loss, step
        self.step_times.append(float(metrics["step_time_s"]))
        self.heard_at.append((step, now))
        if step % self.job.checkpoint_every == 0:
            self.checkpointed = max(self.checkpointed, step)

    @property
    def shown(self) -> str:
        """Its status as `xds jobs` shows it: a running job's stage of life too."""
        if self.status != "running":
            return self.status
        if self.cancel:
            return "cancelling"
        if self.preempting is not None:
            return "preempting"
        if self.moving is not None:
            return "moving"
        return "starting" if self.stepped_at is None else "running"

    def measured(self) -> float | None:
        """Step time of this run now: the median of its last RECENT_STEPS steps since it
        warmed up (a few steps can be far off when the machine is busy). A run that averages
        its domains' weights every H steps takes that sync in one step of H: the median over
        its whole rounds of H steps of their mean step, so the sync counts as it does in the
        job's time (None before one whole round: its steps alone would leave the sync out)."""
        tail = self.step_times[WARMUP_STEPS:][-RECENT_STEPS:]
        crossing = len(self.placement.get("domains", {})) > 1
        h = (self.placement.get("diloco_h") or 1) if crossing else 1
        first = self.step - len(tail) + 1  # the step number of tail[0]; syncs end rounds
        start = -(first - 1) % h
        rounds = [statistics.fmean(tail[i : i + h]) for i in range(start, len(tail) - h + 1, h)]
        return statistics.median(rounds) if rounds else None

    def wall_step_s(self) -> float | None:
        """Wall seconds a step of this run takes now, over its recent steps: with what it does
        between its steps (its input batches, reports, checkpoints), which its step times leave
        out, and what finishing it takes (None before two steps past its warm-up)."""
        seen = self.heard_at[WARMUP_STEPS:][-RECENT_STEPS:]
        if len(seen) < 2 or seen[-1][0] <= seen[0][0]:
            return None
        (first, t0), (last, t1) = seen[0], seen[-1]
        return (t1 - t0) / (last - first)

    def measure_afresh(self) -> None:
        """Forget the steps seen so far: they tell nothing of the run's new conditions (a new
        placement, a link that changed under it)."""
        self.step_times, self.heard_at, self.observed = [], [], 0

    def row(self) -> dict:
        j = self.job
        return JobRow(
            job=j.name,
            status=self.shown,
            tenant=j.tenant,
            priority=self.priority,
            entrypoint=j.script or j.entrypoint,
            step=self.step,
            steps=j.steps,
            loss=self.loss,
            first_loss=self.first_loss,
            domains=self.placement.get("domains", {}),
            kind=self.placement.get("kind"),
            plan=self.placement.get("plan"),
            reason=self.placement.get("reason"),
            predicted_step_s=self.placement.get("predicted_step_s"),
            corrected_step_s=self.placement.get("corrected_step_s"),
            measured_step_s=self.measured(),
            wall_step_s=self.wall_step_s(),
            attempts=self.attempts,
            startup_s=self.startup_s,
        ).model_dump()
