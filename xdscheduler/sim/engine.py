"""The study engine: jobs arrive, a policy places them, they train at the speed the cost model
gives under the links of the moment, and every decision and sample is recorded.

Time is discrete-event: the clock jumps to the next arrival, completion, restart or change of
the network, so days of workload run in seconds. The domains are reached through a gateway:
plain objects here (LocalDomains), Ray actors in `xdscheduler.runtime`.
"""

from __future__ import annotations

import itertools
import math
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from xdscheduler.perception.graph import ResourceGraph
from xdscheduler.planner.policies import Placement, Policy, evaluate
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.space import DATA, PIPELINE
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Job, Scenario
from xdscheduler.sim import reconfig
from xdscheduler.sim.domain import accepted
from xdscheduler.sim.reconfig import (
    CHECKPOINT,
    COMM_INIT_S,
    MAKE_BEFORE_BREAK,
    RESTART,
    RESTART_S,
    TRANSFER,
    Relocation,
    Swing,
)

CHECKPOINT_S = 1800.0  # jobs save a checkpoint every 30 minutes of training
PREPARING = "#next"  # suffix of the allocation a job holds for its next plan while preparing
LINK_DROP = 0.30  # re-plan when a link a job uses loses 30% of its bandwidth at placement,
RTT_RISE = 0.50  # or its RTT rises by half,
LOAD_SWING = 0.20  # or a domain it uses sees its background load swing by a fifth
# What a snapshot holds: everything the engine has done. The domains keep nothing else than
# the allocations, which the running jobs' placements restate.
SNAPSHOT = ("runs", "queue", "pending", "decisions", "samples", "rejected", "busy_gpu_s",
            "down", "outages", "next_sample_s", "last_step_s", "view", "graph", "now", "faults",
            "swings", "relocations")


class _Option(NamedTuple):
    """A make-before-break switch weighed for a trigger."""

    placement: Placement
    how: str  # make-before-break, or fallback (no room alongside: restart)
    rate: float  # tokens/s on it
    cost: reconfig.SwitchCost
    prepare_s: float
    pause_s: float
    charge_s: float  # reconfig.charge_s of it


def _same(a: Placement, b: Placement) -> bool:
    return (a.domains, a.gpus, a.plan) == (b.domains, b.gpus, b.plan)


@dataclass
class JobRun:
    """One job's life in one study."""

    spec: JobSpec
    tokens: float
    arrival_s: float
    priority: int
    start_s: float | None = None
    end_s: float | None = None
    done: float = 0.0  # tokens trained
    checkpoint: float = 0.0  # tokens safe in the last checkpoint
    next_checkpoint_s: float = math.inf
    placement: Placement | None = None
    rate: float = 0.0  # tokens per second now
    bytes_per_token: float = 0.0  # over the WAN
    price_per_gb: float = 0.0
    paused_until: float = 0.0
    replans: int = 0
    requeues: int = 0
    wan_gb: float = 0.0
    wan_cost: float = 0.0
    reference: tuple = ()  # links and loads when placed, for the re-plan triggers
    grow_tried: tuple = ()  # free accelerators when growing it last did not pay
    checkpoint_every_s: float = CHECKPOINT_S
    slowdown: float = 1.0  # a straggler in its placement stretches every step
    recovering: bool = False  # lost its accelerators to a fault; first call on the pools
    lost_gpu_s: float = 0.0  # work redone after faults, in accelerator-seconds
    next: Placement | None = None  # the plan being prepared alongside (make-before-break)
    switch_at: float = math.inf  # when it is ready and the job switches to it
    switch_pause_s: float = 0.0  # how long the switch stops training
    move: Relocation | None = None  # a relocation to other domains under way

    @property
    def preparing(self) -> dict[int, int]:
        """Accelerators taken for the next plan beyond those the job holds, by domain."""
        if self.next is None:
            return {}
        return reconfig.new_accelerators(self.placement, self.next)

    @property
    def running(self) -> bool:
        return self.placement is not None and self.end_s is None

    def status(self) -> str:
        if self.end_s is not None:
            return "completed"
        return "running" if self.placement is not None else "queued"


@dataclass
class Decision:
    time_s: float
    job: str
    action: str  # place | replan | requeue
    domains: dict[str, int]
    plan: dict
    explanation: str
    decision_ms: float
    free_before: dict[str, int]


@dataclass
class Results:
    policy: str
    jobs: list[JobRun]
    decisions: list[Decision]
    samples: list[dict]  # per domain per sample time
    rejected_samples: int
    end_s: float
    busy_gpu_s: float
    capacity_gpu_s: float
    down: dict[str, float] = field(default_factory=dict)  # domain -> time it was seen down
    wall_s: float = 0.0
    names: list[str] = field(default_factory=list)
    faults: dict | None = None  # what faults did and how the jobs recovered
    swings: list[Swing] = field(default_factory=list)  # every triggered re-plan, measured
    relocations: list[Relocation] = field(default_factory=list)  # moves to other domains


class Engine:
    """Runs one policy over one workload in one realisation of the network."""

    def __init__(self, scn: Scenario, jobs: list[Job], policy: Policy, dynamics, domains,
                 horizon_s: float, drain_factor: float = 4.0, clock: Callable | None = None,
                 tick_s: float | None = None, faults=None, replan: str = MAKE_BEFORE_BREAK):
        self.scn, self.policy, self.dynamics, self.domains = scn, policy, dynamics, domains
        self.base_view = ClusterView.from_scenario(scn)
        self.names = self.base_view.names
        self.runs = sorted((JobRun(JobSpec.of(j), j.tokens, j.arrival_s, j.priority)
                            for j in jobs), key=lambda r: (r.arrival_s, r.spec.name))
        self.horizon_s = horizon_s
        self.end_limit_s = horizon_s * drain_factor  # stop draining the queue after this
        self.clock = clock  # called with each event time (real-time mode sleeps there)
        self.tick_s = tick_s  # real-time mode: an event every tick even when nothing happens
        self.now = 0.0
        self.queue: list[JobRun] = []
        self.pending = list(self.runs)  # not yet arrived, by arrival time
        self.decisions: list[Decision] = []
        self.samples: list[dict] = []
        self.rejected = 0
        self.busy_gpu_s = 0.0
        self.down: dict[str, float] = {}  # domains down now, since when
        self.outages: list[tuple[str, float, float | None]] = []  # every loss, and its return
        self.next_sample_s = 0.0
        self.last_step_s: float | None = None
        self.view = self.base_view
        self.graph = ResourceGraph(self.names)  # what the domains' reports say, kept current
        self.on_decision: Callable | None = None  # called with (index, Decision) as logged
        self.faults = faults  # a sim.recovery.Faults, or None
        self.replan = replan  # how running jobs move: make-before-break, or the old restart
        self.swings: list[Swing] = []
        self._open: list[tuple[Swing, JobRun]] = []  # swings not yet closed, with their job
        self.relocations: list[Relocation] = []

    # ------------------------------------------------------------------ the loop

    def run(self, until_s: float | None = None, progress: Callable | None = None) -> Results:
        stop = self.end_limit_s if until_s is None else min(until_s, self.end_limit_s)
        while True:
            t = self.next_event()
            if t > stop or t == math.inf:
                break
            if self.clock:
                self.clock(t)
            self.step(t)
            if progress:
                progress(t)
            if self.finished:
                break
        return self.results()

    def step(self, t: float) -> None:
        """Everything that happens at time t, in order."""
        self._advance(t)
        self.last_step_s = t
        if self.faults:
            self.faults.apply(self, t)
        self._observe(t)  # first: a job on a domain found dead now did not finish there
        self._complete(t)
        self._switch_due(t)
        self._relocations_due(t)
        while self.pending and self.pending[0].arrival_s <= t:
            self.queue.append(self.pending.pop(0))
        if t >= self.next_sample_s:
            self._retrigger(t)
        self._schedule(t)
        if t >= self.next_sample_s:  # links and loads change on the dynamics' grid
            self._refresh_rates()
            self._sample(t)
            self.next_sample_s = t + self.dynamics.step_s
        self._close_swings(t)

    def next_event(self) -> float:
        times = [self.next_sample_s]
        if self.faults:
            times.append(self.faults.next_time())
        if self.tick_s:
            times.append(self.now + self.tick_s)
        if self.pending:
            times.append(self.pending[0].arrival_s)
        for r in self.runs:
            if r.running:
                start = max(self.now, r.paused_until)
                if r.rate > 0:
                    times.append(start + (r.tokens - r.done) / r.rate)
                if r.paused_until > self.now:
                    times.append(r.paused_until)
                if r.next is not None:
                    times.append(r.switch_at)
                if r.move is not None and r.move.phase in ("wait", "copy"):
                    times.append(r.move.at_s)
        fresh = self.last_step_s != self.now  # nothing has happened at `now` yet
        later = [x for x in times if x > self.now or (fresh and x == self.now)]
        return min(later) if later else math.inf

    # ------------------------------------------------------------------ progress

    def _advance(self, t: float) -> None:
        dt_total = t - self.now
        for r in self.runs:
            if not r.running or dt_total <= 0:
                continue
            self.busy_gpu_s += (r.placement.total_gpus + sum(r.preparing.values())) * dt_total
            dt = max(t - max(self.now, r.paused_until), 0.0)
            gained = min(r.rate * dt, r.tokens - r.done)
            r.done += gained
            r.wan_gb += gained * r.bytes_per_token / 1e9
            r.wan_cost += gained * r.bytes_per_token / 1e9 * r.price_per_gb
            while r.next_checkpoint_s <= t:
                r.checkpoint = r.done
                r.next_checkpoint_s += r.checkpoint_every_s
        self.now = t

    def _complete(self, t: float) -> None:
        for r in self.runs:
            if r.running and r.done >= r.tokens * (1 - 1e-9):
                self._cancel_switch(r)
                r.end_s = t
                self.domains.release(r.spec.name)
                self._return_gpus(r.placement)

    # ------------------------------------------------------------------ perception

    def _observe(self, t: float) -> None:
        """Gather the domains' reports; a domain that does not answer is down."""
        reports = self.domains.reports(t)
        free, reserved = {}, {}
        k = len(self.names)
        bw, rtt = np.zeros((k, k)), np.zeros((k, k))
        index = {n: i for i, n in enumerate(self.names)}
        for i, (name, report) in enumerate(zip(self.names, reports, strict=True)):
            if report is None:
                self.graph.mark_down(name, t)
                if name not in self.down:
                    self.down[name] = t
                    self.outages.append((name, t, None))
                    self._evacuate(name, t)
                continue
            if name in self.down:  # back (an outage ended, or its actor was replaced)
                self.outages = [(n, a, t if n == name and b is None else b)
                                for n, a, b in self.outages]
                del self.down[name]
            good, rejected = accepted(report, t)
            self.rejected += len(rejected)
            self.graph.update(report, good)
            free[name], reserved[name] = report.free_gpus, report.reserved_gpus
            for other, (gbps, ms) in report.links.items():  # each end reports its outbound
                bw[i, index[other]], rtt[i, index[other]] = gbps, ms
        if self.faults:
            for a, b in self.faults.cut:
                bw[a, b] = bw[b, a] = 0.0
            free = {n: f - self.faults.pool.get(n, 0) for n, f in free.items()}  # held back
        pooled = self.faults.pool if self.faults else None
        view = self.base_view.with_free(free, reserved, pooled).with_links(
            bw, np.maximum(rtt, rtt.T))
        self.view = view.with_down(set(self.down)).with_indicators(self.graph.values)

    def _evacuate(self, name: str, t: float) -> None:
        """Jobs on a lost domain go back to the queue from their last checkpoint."""
        index = self.names.index(name)
        for r in self.runs:
            if r.running and index in r.placement.domains:
                self._cancel_switch(r)
                self.domains.release(r.spec.name)
                self._log(t, r, "requeue", r.placement, f"domain {name} is down; resume from "
                          f"the checkpoint at {r.checkpoint / r.tokens:.0%}", 0.0)
                self._lose_work(r)
                r.placement, r.rate, r.requeues = None, 0.0, r.requeues + 1
                r.next_checkpoint_s, r.paused_until = math.inf, 0.0
                r.recovering = self.faults is not None
                self.queue.append(r)
        self.queue.sort(key=lambda r: (r.arrival_s, r.spec.name))

    # ------------------------------------------------------------------ decisions

    def _schedule(self, t: float) -> None:
        if not self.queue:
            return
        order = self.ordered_queue()
        by_name = {r.spec.name: r for r in order}
        urgent = [r for r in order if r.recovering]
        if urgent and self.faults:  # jobs that lost their accelerators may use the pools
            for p in self.policy.decide([r.spec for r in urgent], self._with_pools(), t):
                self.place(by_name[p.job], p)
            order = [r for r in order if r in self.queue]
        for p in self.policy.decide([r.spec for r in order], self.view, t):
            self.place(by_name[p.job], p)

    def ordered_queue(self) -> list[JobRun]:
        """The queue in the order decisions take it: priority, then arrival."""
        return sorted(self.queue, key=lambda r: (-r.priority, r.arrival_s, r.spec.name))

    def place(self, r: JobRun, p: Placement) -> None:
        """Start a queued job now; decisions taken outside `step` (the RL agents) come here."""
        self._start(r, p, self.now, "place")
        self.queue.remove(r)

    def _start(self, r: JobRun, p: Placement, t: float, action: str) -> None:
        before = {d.name: d.free_gpus for d in self.view.domains}
        self.domains.apply(r.spec.name, p.taken, t)
        r.placement = p
        if r.start_s is None:
            r.start_s = t
        if self.faults:
            r.checkpoint_every_s = self._checkpoint_every(r)
        r.next_checkpoint_s = t + r.checkpoint_every_s
        if r.recovering:  # back from a fault: load the checkpoint, then train
            r.recovering, r.paused_until = False, t + self._restore_s(r)
            self.faults.resumed(r.spec.name, r.paused_until)
        r.reference = self._reference(p, t)
        self._rate(r)
        self._log(t, r, action, p, p.explanation, p.decision_ms, before)
        self._take_gpus(p.taken)

    def _retrigger(self, t: float) -> None:
        """Re-plan running jobs whose links or domains changed enough, or that started smaller
        than they asked while accelerators have since come free, when moving pays."""
        free = tuple(d.available for d in self.view.domains)
        for r in self.runs:
            if not r.running or r.paused_until > t or r.next is not None or r.move is not None:
                continue
            grow = (not self.queue and r.placement.total_gpus < r.spec.gpus_max
                    and sum(free) >= r.placement.total_gpus and r.grow_tried != free)
            cause = self._triggered(r, t) or ("grow" if grow else "")
            if not cause:
                continue
            r.grow_tried = free
            if self.replan != RESTART:
                self._respond(r, t, cause)
                continue
            new = self.policy.replan(r.spec, r.placement, self.view)
            if new is None or _same(new, r.placement):
                self._kept(r, t, cause)
                continue
            self._restart(r, new, t, cause)

    def _kept(self, r: JobRun, t: float, cause: str, rate: float | None = None) -> None:
        """A trigger that left the plan as it was: new reference, and a record of it."""
        r.reference = self._reference(r.placement, t)
        rate = self._rate_of(r, r.placement) if rate is None else rate
        self._record(r, Swing(r.spec.name, cause, "kept", t, r.rate, rate, rate, r.done,
                              end_s=t))

    def _record(self, r: JobRun, s: Swing) -> None:
        self.swings.append(s)
        if s.end_s is None:
            self._open.append((s, r))

    def _restart(self, r: JobRun, new: Placement, t: float, cause: str) -> None:
        """The old move: save, stop, and start the new plan RESTART_S later."""
        new_rate = self._rate_of(r, new)
        left = r.tokens - r.done
        if left / new_rate + RESTART_S >= left / max(r.rate, 1e-9):
            self._kept(r, t, cause)
            return  # moving would not pay for the restart
        moved = reconfig.switch_cost(r.placement, new, r.spec.arch.params, self.view).wan_gb
        self._record(r, Swing(r.spec.name, cause, RESTART, t, r.rate,
                              self._rate_of(r, r.placement), new_rate, r.done,
                              pause_s=RESTART_S, wan_gb=moved))
        self.domains.release(r.spec.name)
        self._return_gpus(r.placement)
        r.checkpoint, r.replans, r.paused_until = r.done, r.replans + 1, t + RESTART_S
        self._start(r, new, t, "replan")

    def _respond(self, r: JobRun, t: float, cause: str) -> None:
        """A trigger's response: at once, the best plan on the domains the job holds (state
        re-laid over their fabric only), when that pays; then, as a separate decision, a
        relocation to other domains, only when it pays for all it costs (`reconfig.charge_s`:
        the job's time and the accelerator-seconds it holds idle or redoing work)."""
        left = r.tokens - r.done
        now_rate = self._rate_of(r, r.placement)
        held = self.view.with_down({n for i, n in enumerate(self.names)
                                    if i not in r.placement.domains})
        here = self.policy.replan(r.spec, r.placement, held)
        far = [p for p in (here, self.policy.replan(r.spec, r.placement, self.view))
               if p is not None and not _same(p, r.placement)]
        adjust = self._switch_option(r, here, now_rate, left) if (
            here is not None and not _same(here, r.placement)) else None
        if adjust is None or adjust.cost.wan_gb > 0 or adjust.charge_s >= left / now_rate:
            adjust = None  # what needs the WAN is a relocation, weighed below
            self._kept(r, t, cause, now_rate)
        else:
            self._adjust(r, adjust, t, cause, now_rate)
        # Relocations are weighed from where the adjustment leaves the job.
        base, rate = (adjust.placement, adjust.rate) if adjust else (r.placement, now_rate)
        moves = [m for p in far for m in self._relocations(r, base, p, rate, left, cause, t)]
        # It must pay the job (its charge) and the cluster: no more accelerator-seconds to
        # finish than staying takes.
        best = min((m for m in moves if m.gpu_s <= m.stay_gpu_s), key=lambda m: m.charge_s,
                   default=None)
        if best is not None and best.charge_s < best.stay_s:
            self._plan_relocation(r, best, t)

    def _switch_option(self, r: JobRun, p: Placement, now_rate: float, left: float) -> _Option:
        """A make-before-break switch from the job's placement to p: its pause, and its
        charge."""
        rate, cost, extra = self._move_cost(r, r.placement, p)
        if cost.alongside:
            finish, idle = reconfig.switch_charge(left, now_rate, rate, r.placement.total_gpus,
                                                  extra, cost.prepare_s, cost.pause_s)
            return _Option(p, MAKE_BEFORE_BREAK, rate, cost, cost.prepare_s, cost.pause_s,
                           reconfig.charge_s(finish, idle, p.total_gpus))
        pause = RESTART_S + cost.pause_s  # a restart moves the same state, and more slowly
        return _Option(p, "fallback", rate, cost, 0.0, pause, reconfig.charge_s(
            pause + left / rate, p.total_gpus * pause, p.total_gpus))

    def _move_cost(self, r: JobRun, base: Placement,
                   p: Placement) -> tuple[float, reconfig.SwitchCost, int]:
        """The job's rate on p, what moving there from `base` costs, and how many accelerators
        it takes beside those `base` holds."""
        rate, window = self._speed(r, p)
        cost = reconfig.switch_cost(base, p, r.spec.arch.params, self.view, window)
        return rate, cost, sum(reconfig.new_accelerators(base, p).values())

    def _relocations(self, r: JobRun, base: Placement, p: Placement, base_rate: float,
                     left: float, cause: str, t: float) -> list[Relocation]:
        """The two ways to move from `base` to p across the WAN, each with its charge (none
        when p sends nothing over the WAN, or has no room alongside)."""
        if not reconfig.crosses_wan(base, p, self.view):
            return []
        rate, cost, extra = self._move_cost(r, base, p)
        if not cost.alongside:
            return []
        held, gpus = base.total_gpus, p.total_gpus
        stay_s, stay_gpu_s = left / base_rate, held * left / base_rate

        def move(how: str, at_s: float, transfer_s: float, hold_s: float, pause_s: float,
                 charge: tuple[float, float], before_s: float, extra_s: float) -> Relocation:
            """`charge`: its (finish s, idle accelerator-s); `before_s` from now to the switch,
            `extra_s` of it with the target's new accelerators held."""
            finish, idle = charge
            return Relocation(r.spec.name, cause, how, t, p, at_s, transfer_s, hold_s, pause_s,
                              cost.wan_gb, cost.wan_cost, reconfig.charge_s(finish, idle, gpus),
                              stay_s, reconfig.gpu_seconds(finish, before_s, held, extra,
                                                           extra_s, gpus), stay_gpu_s)

        before = cost.prepare_s + cost.pause_s
        transfer = move(TRANSFER, t, cost.pause_s, cost.prepare_s, cost.pause_s,
                        reconfig.switch_charge(left, base_rate, rate, held, extra,
                                               cost.prepare_s, cost.pause_s), before, before)
        wait = max(r.next_checkpoint_s - t, 0.0)
        hold = max(self._restore_s(r, p), COMM_INIT_S)
        copy = move(CHECKPOINT, t + wait, cost.wan_s, hold, 0.0,
                    reconfig.checkpoint_charge(left, base_rate, rate, held, extra, wait,
                                               cost.wan_s, hold), wait + cost.wan_s + hold, hold)
        return [transfer, copy]

    def _adjust(self, r: JobRun, m: _Option, t: float, cause: str, now_rate: float) -> None:
        """Start a switch on the job's own domains: prepared alongside, or (no room) restarted."""
        self._record(r, Swing(r.spec.name, cause, m.how, t, r.rate, now_rate, m.rate, r.done,
                              m.prepare_s, m.pause_s))
        r.replans += 1
        new = m.placement
        if m.how == "fallback":
            self.domains.release(r.spec.name)
            self._return_gpus(r.placement)
            r.checkpoint, r.paused_until = r.done, t + m.pause_s
            self._start(r, new, t, "replan")
            return
        before = {d.name: d.free_gpus for d in self.view.domains}
        self._prepare(r, new, t, t + m.prepare_s, m.pause_s)
        self._log(t, r, "replan", new, f"{cause}: prepared alongside for {m.prepare_s:.0f} s, "
                  f"then a {m.pause_s:.2f} s switch; {new.explanation}", new.decision_ms, before)

    def _plan_relocation(self, r: JobRun, m: Relocation, t: float) -> None:
        self.relocations.append(m)
        r.move = m
        if m.how == TRANSFER and r.next is None:  # nothing before it: the target taken now,
            self._take(r, m, t)                   # before another job's decision counts it
        how = ("a paused transfer" if m.how == TRANSFER else
               f"its checkpoint at {m.at_s:.0f} s, copied")
        self._log(t, r, "relocate", m.target, f"{m.cause}: relocate by {how} "
                  f"({m.wan_gb:.0f} GB, {m.transfer_s:.0f} s over the WAN); charged "
                  f"{m.charge_s:.0f} s against {m.stay_s:.0f} s staying; "
                  f"{m.target.explanation}", m.target.decision_ms)

    def _relocations_due(self, t: float) -> None:
        """Relocations move on: a checkpoint written starts its copy; a copy done, or the
        adjustment before a transfer done, takes the target's accelerators alongside."""
        for r in self.runs:
            m = r.move
            if m is None or not r.running or m.phase not in ("wait", "copy") or m.at_s > t:
                continue
            if m.phase == "wait" and m.how == CHECKPOINT:
                m.checkpoint, m.phase, m.at_s = r.checkpoint, "copy", t + m.transfer_s
                self._charge_wan(r, m)
                continue
            if r.next is None and r.paused_until <= t:  # else a switch is under way: its
                self._take(r, m, t)                      # end is an event

    def _take(self, r: JobRun, m: Relocation, t: float) -> None:
        """The target's accelerators taken alongside the job's, until the switch; a target
        no longer there cancels the relocation."""
        if not self._target_free(r, m):
            m.phase, r.move = "cancelled", None
            return
        if m.how == TRANSFER:
            self._charge_wan(r, m)
        m.phase = "held"
        self._prepare(r, m.target, t, t + m.hold_s, m.pause_s)

    def _prepare(self, r: JobRun, new: Placement, t: float, switch_at: float,
                 pause_s: float) -> None:
        """The accelerators of `new` the job does not hold are taken alongside its own until
        `switch_at`, when it switches with a `pause_s` pause."""
        r.next, r.switch_at, r.switch_pause_s = new, switch_at, pause_s
        self.domains.apply(r.spec.name + PREPARING, r.preparing, t)
        self._take_gpus(r.preparing)

    def _drop_next(self, r: JobRun) -> None:
        """Give back the accelerators taken for the next plan; the job has none after."""
        self.domains.release(r.spec.name + PREPARING)
        self.view = self.view.adjust_free(r.preparing)
        r.next, r.switch_at = None, math.inf

    def _target_free(self, r: JobRun, m: Relocation) -> bool:
        """The relocation's target is up and its accelerators free beside the job's."""
        extra = reconfig.new_accelerators(r.placement, m.target)
        return not any(self.names[d] in self.down for d in m.target.domains) and all(
            n <= self.view.domains[d].available for d, n in extra.items())

    def _charge_wan(self, r: JobRun, m: Relocation) -> None:
        """The state a relocation sends across domains goes on the job's WAN bill."""
        r.wan_gb += m.wan_gb
        r.wan_cost += m.wan_cost

    def _relocated(self, r: JobRun, m: Relocation, old: Placement, t: float) -> None:
        """A relocation's switch: through a checkpoint, the job goes back to it (redoing what
        the old plan trained since), and what was lost is recorded."""
        extra = sum(reconfig.new_accelerators(old, m.target).values())
        if m.how == CHECKPOINT:
            m.redone = r.done - m.checkpoint
            since = t - (m.at_s - m.transfer_s)  # from the checkpoint to the switch
            r.done = r.checkpoint = m.checkpoint
            m.lost_s, m.lost_gpu_s = since, old.total_gpus * since + extra * m.hold_s
        else:
            m.lost_s = m.pause_s
            m.lost_gpu_s = (old.total_gpus + extra) * m.pause_s + extra * m.hold_s
        m.phase, m.switch_s, r.move = "done", t, None
        r.replans += 1

    def _switch_due(self, t: float) -> None:
        """Jobs whose next plan is ready switch to it now (or drop it if a domain of it fell)."""
        for r in self.runs:
            if r.next is None or r.switch_at > t or not r.running:
                continue
            if any(self.names[d] in self.down for d in r.next.domains):
                self._cancel_switch(r)
                continue
            new, pause, old = r.next, r.switch_pause_s, r.placement
            self._drop_next(r)
            self.domains.release(r.spec.name)
            self._return_gpus(old)
            # The job's accelerators stay its own: re-established, not asked for anew.
            self.domains.restore(r.spec.name, new.taken)
            r.placement, r.paused_until = new, t + pause
            if self.faults:
                r.checkpoint_every_s = self._checkpoint_every(r)
            r.reference = self._reference(new, t)
            self._rate(r)
            self._take_gpus(new.taken)
            if r.move is not None and r.move.phase == "held":
                self._relocated(r, r.move, old, t)

    def _cancel_switch(self, r: JobRun) -> None:
        """Give back what was taken for a next plan that will not happen; a relocation under
        way stops with it."""
        if r.move is not None:
            r.move.phase, r.move = "cancelled", None
        if r.next is None:
            return
        self._drop_next(r)
        for s, run in self._open:
            if run is r:
                s.aborted = True

    def _close_swings(self, t: float) -> None:
        """A re-plan's record closes once its job trains at the target rate with nothing
        pending (a relocation preparing after it is a decision of its own); a job that ended,
        or that a fault took, closes it unrecovered. Only the open records are looked at."""
        still = []
        for s, r in self._open:
            if s.aborted:
                continue
            if not r.running or r.recovering:
                s.aborted = True
            elif (r.next is None or (r.move is not None and r.move.phase == "held")) and (
                    r.paused_until <= t and r.rate >= s.target * (1 - 1e-9)):
                s.end_s, s.tokens = t, r.done - s.done0
            else:
                still.append((s, r))
        self._open = still

    def _return_gpus(self, p: Placement) -> None:
        self.view = self.view.adjust_free(p.taken)

    def _take_gpus(self, taken: dict[int, int]) -> None:
        self.view = self.view.adjust_free({i: -n for i, n in taken.items()})

    def _links_of(self, p: Placement) -> list[tuple[int, int]]:
        d = p.domains
        if p.kind == PIPELINE:
            return list(itertools.pairwise(d))
        if p.kind == DATA:
            return [(a, b) for i, a in enumerate(d) for b in d[i + 1:]]
        return []

    def _reference(self, p: Placement, t: float) -> tuple:
        """What the triggers compare against: the links and loads a placement sees now."""
        bw, rtt = self.view.bandwidth_gbps, self.view.rtt_ms
        load = np.array([d.reserved_gpus / max(d.total_gpus, 1) for d in self.view.domains])
        links = self._links_of(p)
        return (np.array([min(bw[a, b], bw[b, a]) for a, b in links]),
                np.array([rtt[a, b] for a, b in links]), load[list(p.domains)])

    def _triggered(self, r: JobRun, t: float) -> str:
        """What fired a re-plan ("" for nothing): an RTT rise, a load swing, a bandwidth drop."""
        bw_ref, rtt_ref, load_ref = r.reference
        bw_now, rtt_now, load_now = self._reference(r.placement, t)
        if np.any(rtt_now >= (1 + RTT_RISE) * rtt_ref):
            return "rtt"
        if np.any(np.abs(load_now - load_ref) >= LOAD_SWING * load_ref):
            return "load"
        return "bandwidth" if np.any(bw_now <= (1 - LINK_DROP) * bw_ref) else ""

    # ------------------------------------------------------------------ speed

    def _refresh_rates(self) -> None:
        """Links change the speed of jobs that span domains; the rest keep theirs."""
        for r in self.runs:
            if r.running and len(r.placement.domains) > 1:
                self._rate(r)

    def refresh_rate(self, r: JobRun) -> None:
        self._rate(r)

    def _rate_of(self, r: JobRun, p: Placement) -> float:
        """Tokens/s the job would train at on placement p under the links now."""
        return self._speed(r, p)[0]

    def _speed(self, r: JobRun, p: Placement) -> tuple[float, float]:
        """Tokens/s on placement p under the links now, and the seconds of each step in which
        optimizer state could stream (`reconfig.stream_window_s`)."""
        est, _ = evaluate(p, r.spec, self.view)
        window = reconfig.stream_window_s(est) * r.slowdown
        return r.spec.global_batch * r.spec.seq / (float(est.step_time_s[0]) * r.slowdown), window

    def _rate(self, r: JobRun) -> None:
        est, price = evaluate(r.placement, r.spec, self.view)
        step = float(est.step_time_s[0]) * r.slowdown
        tokens = r.spec.global_batch * r.spec.seq
        r.rate = tokens / step
        r.bytes_per_token = float(est.cross_domain_bytes[0]) / tokens
        r.price_per_gb = price

    # ------------------------------------------------------------------ faults

    def recover(self, r: JobRun, t: float, replace: bool, save: bool = False) -> None:
        """A job hit by a detected fault: back to its last checkpoint (or to now, when it is
        alive and can `save` first), on the same placement with the failed node replaced from
        the pool, or re-planned on what is free (pools included), or queued first in line."""
        self._cancel_switch(r)
        if save:
            r.checkpoint = r.done
        self._lose_work(r)
        if replace:
            r.paused_until = t + self._restore_s(r) * (2 if save else 1)  # write, then read
            self.faults.resumed(r.spec.name, r.paused_until)
            return
        self.domains.release(r.spec.name)
        self._return_gpus(r.placement)
        new = self.policy.replan(r.spec, r.placement, self._with_pools().adjust_free(
            {i: -n for i, n in r.placement.taken.items()}))
        r.recovering, r.replans = True, r.replans + 1
        if new is None:
            r.placement, r.rate, r.requeues = None, 0.0, r.requeues + 1
            self.queue.append(r)
            return
        self._start(r, new, t, "recover")

    def _lose_work(self, r: JobRun) -> None:
        lost = r.done - r.checkpoint
        if lost > 0 and r.rate > 0:
            r.lost_gpu_s += lost / r.rate * r.placement.total_gpus
        r.done = r.checkpoint

    def _with_pools(self) -> ClusterView:
        """The view with the backup pools free: what jobs hit by faults may take."""
        free = {n: d.free_gpus + (self.faults.pool.get(n, 0) if n not in self.down else 0)
                for n, d in zip(self.names, self.view.domains, strict=True)}
        return self.view.with_free(free, pooled={n: 0 for n in self.names})

    def _restore_s(self, r: JobRun, p: Placement | None = None) -> float:
        """Seconds to load the job's checkpoint onto placement p (its own by default)."""
        from xdscheduler.sim.recovery import restore_s

        p = r.placement if p is None else p
        return restore_s(r.spec.arch.params, p.total_gpus,
                         self.scn.domains[p.domains[0]].storage.io_gbps)

    def _checkpoint_every(self, r: JobRun) -> float:
        """Young/Daly: the interval that balances writing checkpoints against redoing work."""
        from xdscheduler.faults.checkpointing import checkpoint_cost_s, plan_checkpoints
        from xdscheduler.faults.failure_model import GPUS_PER_NODE

        p = r.placement
        write = checkpoint_cost_s(r.spec.arch.params,
                                  self.scn.domains[p.domains[0]].storage.io_gbps / 8)
        nodes = max(1, -(-p.total_gpus // GPUS_PER_NODE))
        return plan_checkpoints(nodes, write, self._restore_s(r),
                                self.faults.node_rate_per_hour).interval_s

    # ------------------------------------------------------------------ records

    def _log(self, t, r, action, p, why, ms, before=None) -> None:
        names = {self.names[i]: g for i, g in p.taken.items()}
        self.decisions.append(Decision(t, r.spec.name, action, names, p.plan.as_dict(), why,
                                       ms, before or {}))
        if self.on_decision:
            self.on_decision(len(self.decisions) - 1, self.decisions[-1])

    # ------------------------------------------------------------------ persistence

    def snapshot(self) -> bytes:
        """The engine's state and the policy's memory, to resume from after a crash."""
        state = {k: getattr(self, k) for k in SNAPSHOT}
        state["policy"] = self.policy.state() if hasattr(self.policy, "state") else None
        return pickle.dumps(state)

    def restore(self, blob: bytes) -> None:
        """Continue from a snapshot: the domains get the running jobs' allocations back."""
        state = pickle.loads(blob)
        memory = state.pop("policy")
        for k, v in state.items():
            setattr(self, k, v)
        if memory is not None:
            self.policy.restore(memory)
        for r in self.runs:
            if r.running:
                self.domains.restore(r.spec.name, r.placement.taken)
                if r.preparing:
                    self.domains.restore(r.spec.name + PREPARING, r.preparing)
        runs = {r.spec.name: r for r in self.runs}
        self._open = [(s, runs[s.job]) for s in self.swings if s.end_s is None and not s.aborted]

    def _sample(self, t: float) -> None:
        busy = [0] * len(self.names)  # one pass over the jobs, not one per domain
        for r in self.runs:
            if r.running:
                for i, n in itertools.chain(r.placement.taken.items(), r.preparing.items()):
                    busy[i] += n
        load = self.dynamics.load(t)
        for i, d in enumerate(self.view.domains):
            total = d.total_gpus
            self.samples.append({"time_s": t, "domain": d.name, "gpus_total": total,
                                 "gpus_busy": busy[i], "utilization": busy[i] / max(total, 1),
                                 "queue_len": len(self.queue),
                                 "background_load": float(load[i])})

    def _first_down(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, start, _ in self.outages:
            out.setdefault(name, start)
        return out

    @property
    def finished(self) -> bool:
        idle = not self.pending and not self.queue and not any(r.running for r in self.runs)
        return idle or self.now >= self.end_limit_s

    def status(self) -> dict:
        return {"now_s": self.now, "queued": len(self.queue), "pending": len(self.pending),
                "running": sum(r.running for r in self.runs),
                "completed": sum(r.end_s is not None for r in self.runs),
                "down": sorted(self.down), "finished": self.finished}

    def results(self) -> Results:
        capacity = sum(d.total_gpus for d in self.base_view.domains)
        return Results(self.policy.name, self.runs, self.decisions, self.samples, self.rejected,
                       self.now, self.busy_gpu_s, capacity * self.now, self._first_down(),
                       names=list(self.names),
                       faults=self.faults.summary(self.runs) if self.faults else None,
                       swings=list(self.swings), relocations=list(self.relocations))
