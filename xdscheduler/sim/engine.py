"""The study engine's core: the clock, one event queue, and the order of things at each event.

Jobs arrive, a policy places them, they train at the speed the cost model gives under the links
of the moment, and every decision and sample is recorded. Time is discrete-event: the clock
jumps to the next event (an arrival, a job finishing, a pause ending, a switch, a fault, the
next sample of the network), so days of workload run in seconds.

The core owns time, the job table and the view; parts, each in a module of its own, do the
rest and change the state only through the methods here:
- `sensing`: the domains' reports become the view; lost domains are noticed;
- `scheduling`: the order of the queue and the policy's decisions;
- `replanning`: triggers, adjustments on a job's own domains, relocations to others;
- `recovery` (`faults`): faults injected, detected and recovered, backup pools;
- `demand` (`demand`): the demand forecast's pools and holds for announced jobs;
- `measurement`: the decision log, samples, the recovery of every re-plan.

Three parts it owns carry the rest of its state changes, so the core keeps the loop and the
jobs' placements: `speeds` (`Speeds`: each job's estimate and speed, stragglers, what the model
learns of the truth), `switches` (`Switches`: make-before-break switches prepared, made,
cancelled) and `recorder` (`Recorder`: the decision log and usage metering and their listeners).
The parts and the helper modules above take the engine itself (`Engine`) as their seam.

Jobs train at the cost model's speed (`truth=None`), or at a study's ground truth (`sim.truth`)
that the policies never see: they decide on the nominal view, corrected by what they learn from
the rates they observe (`sim.correction`), and each placement's prediction is recorded.

A study and the RL environment drive the engine alike: `next_decision` runs to the next moment a
queued job may be placed and stops there; whoever decides places jobs with `place`.
The domains are reached through a gateway: plain objects (`sim.domain.LocalDomains`) or Ray
actors (`runtime.gateway.ActorDomains`).
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policy import Policy
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Job
from xdscheduler.sim import reconfig, scheduling
from xdscheduler.sim.domain import LocalDomains
from xdscheduler.sim.events import EventQueue
from xdscheduler.sim.jobs import JobRun
from xdscheduler.sim.measurement import Action, Results, SwingMeter, domain_samples
from xdscheduler.sim.recording import Recorder
from xdscheduler.sim.recovery import restore_s
from xdscheduler.sim.replanning import Replanning
from xdscheduler.sim.sensing import Sensing
from xdscheduler.sim.speeds import Speeds
from xdscheduler.sim.switching import Switches
from xdscheduler.sim.tenancy import TenancyState

if TYPE_CHECKING:
    from xdscheduler.sim.inputs import StudyInputs

DRAIN_FACTOR = 4.0  # after arrivals stop, queued jobs may drain for up to 3x as long
ARRIVAL, SAMPLE, FAULT, TICK = "arrival", "sample", "fault", "tick"  # the engine's own events
END = "end"  # the drain limit: the last moment the study runs to, whatever else is scheduled


@dataclass(frozen=True)
class DecisionPoint:
    """A moment at which queued jobs may be placed."""

    time_s: float
    queue: list[JobRun]  # in the order decisions take them


class Engine:
    """Runs one policy over one workload in one realisation of the network."""

    def __init__(
        self,
        inputs: StudyInputs,
        policy: Policy,
        domains=None,
        *,
        clock: Callable | None = None,
        tick_s: float | None = None,
        replan: reconfig.Switch = reconfig.Switch.MAKE_BEFORE_BREAK,
    ):
        """`domains`: the gateway to the domains (plain objects over the inputs' network by
        default); `clock`: called with each event's time (real-time mode sleeps there);
        `tick_s`: real-time mode's event every tick even when nothing happens."""
        scn, jobs, dynamics = inputs.scn, inputs.jobs, inputs.dynamics
        faults, horizon_s = inputs.faults, inputs.hours * 3600
        domains = domains if domains is not None else LocalDomains(scn.domains, dynamics)
        self.scn, self.policy, self.dynamics, self.domains = scn, policy, dynamics, domains
        self.base_view = ClusterView.from_scenario(scn)
        self.names = self.base_view.names
        order = sorted(jobs, key=lambda j: (j.arrival_s, j.name))
        classes = [d.accelerator.name for d in scn.domains]  # quota and price keys
        self.tenancy = TenancyState(scn.tenancy, classes) if scn.tenancy else None
        self.runs = [self._run_of(j, k) for k, j in enumerate(order)]
        self.horizon_s = horizon_s
        self.end_limit_s = horizon_s * DRAIN_FACTOR  # stop draining the queue after this
        self.clock, self.tick_s = clock, tick_s
        self.now = 0.0
        self.last_step_s: float | None = None  # the last event handled (None: none yet)
        self.pending = list(self.runs)  # not yet arrived, by arrival time
        self.queue: list[JobRun] = []
        self.active: list[JobRun] = []  # running, in the jobs' order
        self.view = self.base_view
        self.busy_gpu_s = 0.0  # accelerator-seconds held by the study's jobs
        self.useful_flop = 0.0  # model FLOPs trained while jobs arrive (the horizon)
        self.next_sample_s = 0.0
        self.events = EventQueue()
        self.sensing = Sensing(self.names)
        self.replanning = Replanning(replan)
        self.faults, self.demand = faults, inputs.demand
        self.speeds = Speeds(self, inputs.truth)  # None: the model's speeds
        self.switches = Switches(self)
        self.recorder = Recorder(self, classes, [d.price_per_gpu_hour for d in scn.domains])
        self.swing_meter = SwingMeter()
        self.samples: list[dict] = []
        self.link_samples: list[dict] = []  # the jobs' traffic on each WAN link they cross
        self._deciding = False  # stopped at a decision point, the rest of the step to come
        for key, t in (
            (ARRIVAL, self.runs[0].arrival_s if self.runs else math.inf),
            (SAMPLE, 0.0),
            (FAULT, faults.next_time() if faults else math.inf),
            (END, self.end_limit_s),
        ):
            self.events.schedule(key, t)

    def _run_of(self, job: Job, index: int) -> JobRun:
        spec, priority = JobSpec.of(job), job.priority
        if self.tenancy:  # a tenant's priority is a floor for its jobs'
            priority = self.tenancy.priority(job.tenant, priority)
            spec = replace(spec, priority=priority)
        return JobRun(spec, job.tokens, job.arrival_s, priority, index, job.tenant)

    # ------------------------------------------------------------------ the loop

    def run(self, until_s: float | None = None) -> Results:
        """Run the study (to `until_s`), the engine's policy deciding."""
        while (point := self.next_decision(until_s)) is not None:
            scheduling.decide(self, self.policy, point.time_s)
        return self.results()

    def next_decision(self, until_s: float | None = None) -> DecisionPoint | None:
        """Run to the next moment queued jobs may be placed and stop there; None once nothing
        more happens by `until_s` or the study is over."""
        stop = self.end_limit_s if until_s is None else min(until_s, self.end_limit_s)
        if self._deciding:
            self._after_decisions()
            if self.finished:
                return None
        while (t := self.next_event()) <= stop and t < math.inf:
            if self.clock:
                self.clock(t)
            self._before_decisions(t)
            if self.queue:
                self._deciding = True
                return DecisionPoint(t, scheduling.decision_order(self.queue))
            self._after_decisions()
            if self.finished:
                return None
        return None

    def replay(self, until_s: float) -> None:
        """Run to `until_s` as fast as it goes, whatever the clock (a controller that takes
        over from one that died catches up; its listener checks each decision again)."""
        clock, self.clock = self.clock, None
        try:
            self.run(until_s=until_s)
        finally:
            self.clock = clock

    def hand_over(self, policy: Policy) -> None:
        """From now on `policy` decides and re-plans (a rollout continued by another)."""
        self.policy = policy

    def step(self, t: float) -> None:
        """Everything that happens at time t, the engine's policy deciding."""
        self._before_decisions(t)
        scheduling.decide(self, self.policy, t)
        self._after_decisions()

    def next_event(self) -> float:
        return self.events.next_time(self.now, include_now=self.last_step_s != self.now)

    def _before_decisions(self, t: float) -> None:
        """What happens at t before queued jobs are decided, in order."""
        self._advance(t)
        self.last_step_s = t
        if self.demand:
            pools = self.demand.step(self, t)
            if pools and self.faults:
                self.faults.resize(pools)
        if self.faults:
            self.faults.apply(self, t)
        if self.tenancy:
            self.tenancy.evict_due(self, t)
        seen = self.sensing.observe(
            self.domains,
            self.base_view,
            t,
            self.faults.cut if self.faults else set(),
            scheduling.held_back(self),
        )
        for name in seen.lost:  # first: a job on a domain found dead now did not finish there
            self._evacuate(name, t)
        self.view = self.speeds.corrected(seen.view)
        self._complete(t)
        self.replanning.switch_due(self, t)
        self.replanning.relocations_due(self, t)
        while self.pending and self.pending[0].arrival_s <= t:
            self.queue.append(self.pending.pop(0))
        self.events.schedule(ARRIVAL, self.pending[0].arrival_s if self.pending else math.inf)
        if t >= self.next_sample_s:
            self.replanning.retrigger(self, t)

    def _after_decisions(self) -> None:
        """What happens at the decision point's time after the decisions."""
        t = self.now
        traffic = None
        if t >= self.next_sample_s:  # links and loads change on the dynamics' grid
            for r in [r for r in self.active if len(r.placed.domains) > 1]:
                self.speeds.update(r)  # links change the speed of jobs across domains
            self.samples += domain_samples(
                t, self.view, self.held(), len(self.queue), self.dynamics.load(t)
            )
            traffic = self.speeds.traffic()
            self.link_samples += traffic.samples(t, self.view)
            self.recorder.metering.flush(t, self.active)
            self.next_sample_s = t + self.dynamics.step_s
            self.events.schedule(SAMPLE, self.next_sample_s)
        self.speeds.reshare(traffic)  # jobs that now share links with more or fewer others
        self.swing_meter.close(t, self.replanning.settled)
        if self.faults:
            self.events.schedule(FAULT, self.faults.next_time())
        if self.tick_s:
            self.events.schedule(TICK, t + self.tick_s)
        self._deciding = False

    def held(self) -> list[int]:
        """Accelerators the running jobs hold in each domain, with those of plans being
        prepared alongside."""
        held = [0] * len(self.names)
        for r in self.active:
            for taken in (r.placed.taken, r.preparing):
                for i, n in taken.items():
                    held[i] += n
        return held

    @property
    def finished(self) -> bool:
        idle = not self.pending and not self.queue and not self.active
        return idle or self.now >= self.end_limit_s

    # ------------------------------------------------------------------ progress

    def _advance(self, t: float) -> None:
        if t > self.now:
            if self.tenancy:
                self.tenancy.meter(self.active, t - self.now)
            for r in self.active:
                self.busy_gpu_s += r.hold(t - self.now)
                self.useful_flop += r.advance(self.now, t, self.horizon_s) * r.flops_per_token
        self.now = t

    def _complete(self, t: float) -> None:
        for r in [r for r in self.active if r.finished_training]:
            self.switches.cancel(r)
            r.end_s = t
            self.release(r)
            self.active.remove(r)
            self.wake(r)

    def wake(self, r: JobRun) -> None:
        """The job's own events (finishing, a pause ending) as its state now says."""
        self.events.schedule(("finish", r.name), r.finish_s(self.now))
        self.events.schedule(("resume", r.name), r.resume_s(self.now))

    # ------------------------------------------------------------------ jobs

    def place(self, r: JobRun, p: Placement) -> None:
        """Start a queued job now on a placement decided in this step."""
        self.start(r, p, Action.PLACE)
        self.queue.remove(r)

    def start(self, r: JobRun, p: Placement, action: Action, restore: bool = False) -> None:
        """The job takes placement p now (decided in this step, so its estimate holds);
        `restore`: it comes back from a fault and loads its checkpoint first."""
        t = self.now
        before = {d.name: d.free_gpus for d in self.view.domains}
        self.domains.apply(r.name, p.taken, t)
        r.placement = p
        self.recorder.metering.touch(r, t)
        if r.start_s is None:
            r.start_s = t
        if self.faults:
            r.checkpoint_every_s = self.faults.checkpoint_every_s(self.scn, r)
        r.next_checkpoint_s = t + r.checkpoint_every_s
        if restore or r.recovering or r.resuming:  # load the checkpoint, then train
            # (preempted, it also wrote the checkpoint while the reclaiming job started)
            r.paused_until = t + restore_s(self.scn, r) * (2 if r.resuming else 1)
            if self.faults and (restore or r.recovering):
                self.faults.resumed(r.name, r.paused_until)
            r.recovering = r.resuming = False
        self.replanning.placed(self, r)
        self.speeds.update(r, p.estimate, placed=True)
        self.recorder.decision(r, action, p, p.explanation, p.decision_ms, before)
        self.take(p.taken)
        if r not in self.active:
            insort(self.active, r, key=lambda x: x.index)

    def replan_spec(self, r: JobRun) -> JobSpec:
        """What a running job may be re-planned to: its spec, within its tenant's quota (what
        it holds and the room its tenant has left)."""
        if self.tenancy is None:
            return r.spec
        room = self.tenancy.room(self.tenancy.used(self.active), r.tenant)
        if room is None or r.placed.total_gpus + room >= r.spec.gpus_max:
            return r.spec
        cap = r.placed.total_gpus + room
        return replace(r.spec, gpus_max=cap, gpus_min=min(r.spec.gpus_min, cap))

    def restart(self, r: JobRun, new: Placement, pause_s: float) -> None:
        """Save, stop, and start the new plan `pause_s` from now."""
        self.release(r)
        r.save()
        r.paused_until = self.now + pause_s
        self.start(r, new, Action.REPLAN)

    def requeue(self, r: JobRun, recovering: bool) -> None:
        """Back to the queue, holding nothing (`recovering`: with first call on the pools)."""
        r.placement, r.rate, r.requeues = None, 0.0, r.requeues + 1
        r.recovering = recovering
        self.active.remove(r)
        self.queue.append(r)
        self.wake(r)

    def preempt(self, r: JobRun, why: str, lose_work: bool = False) -> None:
        """The job saves a checkpoint (`lose_work`: it cannot, and goes back to its last one),
        gives its accelerators back and waits in the queue; when it starts again it pays for
        writing and loading that checkpoint."""
        self.switches.cancel(r)
        r.lose_work() if lose_work else r.save()
        self.release(r)
        self.recorder.decision(r, Action.REQUEUE, r.placed, why, 0.0)
        r.next_checkpoint_s, r.paused_until, r.resuming = math.inf, 0.0, True
        self.requeue(r, recovering=False)

    def _evacuate(self, name: str, t: float) -> None:
        """Jobs on a lost domain go back to the queue from their last checkpoint."""
        index = self.names.index(name)
        for r in [r for r in self.active if index in r.placed.domains]:
            self.switches.cancel(r)
            self.domains.release(r.name)
            self.recorder.decision(
                r,
                Action.REQUEUE,
                r.placed,
                f"domain {name} is down; resume "
                f"from the checkpoint at {r.checkpoint / r.tokens:.0%}",
                0.0,
            )
            r.lose_work()
            r.next_checkpoint_s, r.paused_until = math.inf, 0.0
            self.requeue(r, recovering=self.faults is not None)
        self.queue.sort(key=lambda r: (r.arrival_s, r.name))

    def release(self, r: JobRun) -> None:
        """The job's accelerators go back to its domains."""
        self.domains.release(r.name)
        self.view = self.view.adjust_free(r.placed.taken)

    def take(self, taken: dict[int, int]) -> None:
        """The accelerators `taken` (by domain) are no longer free in the view."""
        self.view = self.view.adjust_free({i: -n for i, n in taken.items()})

    def pause(self, r: JobRun, until_s: float) -> None:
        """The job trains nothing until `until_s` (inf: until something frees it)."""
        r.paused_until = until_s
        self.wake(r)

    def rewind(self, r: JobRun, tokens: float | None = None) -> None:
        """Back to its last checkpoint (or to `tokens`, a checkpoint it moved with)."""
        if tokens is None:
            r.lose_work()
        else:
            r.done = r.checkpoint = tokens
        self.wake(r)

    # ------------------------------------------------------------------ records

    @property
    def down(self) -> dict[str, float]:
        return self.sensing.down

    def status(self) -> dict:
        return {
            "now_s": self.now,
            "queued": len(self.queue),
            "pending": len(self.pending),
            "running": len(self.active),
            "completed": sum(r.end_s is not None for r in self.runs),
            "down": sorted(self.down),
            "finished": self.finished,
        }

    def results(self) -> Results:
        metering = self.recorder.metering
        metering.flush(self.now, self.active)  # what was used since the last sample
        capacity = sum(d.total_gpus for d in self.base_view.domains)
        return Results(
            self.policy.name,
            self.runs,
            self.recorder.decisions,
            self.samples,
            self.sensing.rejected,
            self.now,
            self.busy_gpu_s,
            capacity * self.now,
            self.sensing.first_down(),
            names=list(self.names),
            useful_flop=self.useful_flop,
            single_domain=bool(getattr(self.policy, "single_domain", False)),
            faults=self.faults.summary(self.runs) if self.faults else None,
            demand=self.demand.summary() if self.demand else None,
            swings=list(self.swing_meter.records),
            relocations=list(self.replanning.relocations),
            predictions=list(self.speeds.predictions),
            link_samples=self.link_samples,
            tenants=self.tenancy.figures(self.runs, metering.prices, self.now)
            if self.tenancy
            else None,
        )
