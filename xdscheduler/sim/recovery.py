"""Faults and recovery in a study: injected at their time, noticed after the detectors' delay,
recovered.

A node fault (crash, GPU error, straggler) stalls or slows the job on that node; once detected,
the node is replaced from its domain's backup pool and the job restored from its last
checkpoint, or, with the pool empty, the job is re-planned elsewhere. A domain outage stalls its
jobs until detected, then they resume elsewhere from their checkpoints with first call on every
pool. A cut link stalls the jobs across it until they are re-planned. Lost work and the time
each job stood still are recorded per incident.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from xdscheduler.faults.checkpointing import checkpoint_cost_s, plan_checkpoints
from xdscheduler.faults.failure_model import GPUS_PER_NODE, FaultEvent
from xdscheduler.sim.measurement import Action, percentile
from xdscheduler.sim.records import FaultSummary
from xdscheduler.sim.scheduling import with_pools

if TYPE_CHECKING:
    from xdscheduler.sim.engine import Engine

WARMUP_S = 60.0  # after loading a checkpoint: rebuild communicators, warm up, first steps
MISSED_S = 600.0  # a fault the detectors miss surfaces as a collective timeout (NCCL watchdog)
NODE_KINDS = ("node_crash", "gpu_error", "straggler")


@dataclass
class Incident:
    event: FaultEvent
    jobs: dict[str, float | None] = field(default_factory=dict)  # job hit -> when it resumed
    detected_s: float | None = None  # None: missed by the detectors (found by a timeout)
    noticed_s: float = math.inf
    how: str = ""

    @property
    def job(self) -> str | None:
        return next(iter(self.jobs), None)

    def hit(self, job: str) -> None:
        self.jobs.setdefault(job, None)

    def to_json(self) -> dict:
        return {**asdict(self), "event": self.event.to_json()}


def restore_s(scn, r, p=None) -> float:
    """Seconds for job r to load its checkpoint onto placement p (its own by default): read back
    at the storage bandwidth of p's first domain, then warm up."""
    p = r.placement if p is None else p
    io_gbps = scn.domains[p.domains[0]].storage.io_gbps
    return checkpoint_cost_s(r.spec.arch.params, io_gbps / 8) + WARMUP_S


class Faults:
    """The study's fault events with their detection delays, and the backup pools."""

    def __init__(
        self,
        events: list[FaultEvent],
        delays: list[float | None],
        pool: dict[str, int],
        node_rate_per_hour: float,
        seed: int = 0,
    ):
        self.node_rate_per_hour = node_rate_per_hour  # for Young/Daly intervals
        self.incidents = [
            Incident(
                e,
                detected_s=None if d is None else e.time_s + d,
                noticed_s=e.time_s + (MISSED_S if d is None else d),
            )
            for e, d in zip(events, delays, strict=True)
        ]
        self.spare = dict(pool)  # whole nodes in the pools now (less those out for repair)
        self.reserve = dict(pool)  # what the pools hold when every node is whole
        self.floor = dict(pool)  # from failure rates: forecast-sized pools never go below
        self.rng = np.random.default_rng(seed)
        self.todo = [(i.event.time_s, 0, k) for k, i in enumerate(self.incidents)]
        self.todo += [(i.noticed_s, 1, k) for k, i in enumerate(self.incidents)]
        self.todo += [
            (i.event.time_s + i.event.duration_s, 2, k) for k, i in enumerate(self.incidents)
        ]
        self.todo.sort()
        self.cut: set[tuple[int, int]] = set()

    def next_time(self) -> float:
        return self.todo[0][0] if self.todo else math.inf

    def apply(self, eng: Engine, t: float) -> None:
        """Every phase of every incident due by t: injection, notice, repair."""
        while self.todo and self.todo[0][0] <= t:
            _, phase, k = self.todo.pop(0)
            inc = self.incidents[k]
            (self._inject, self._notice, self._repair)[phase](eng, inc, t)

    # ------------------------------------------------------------------ phases

    def _inject(self, eng: Engine, inc: Incident, t: float) -> None:
        e = inc.event
        if e.kind in NODE_KINDS:
            r = self._victim(eng, e.target.split("/")[0])
            if r is None:
                inc.how = "idle node: no job hit"
                return
            inc.hit(r.spec.name)
            if e.kind == "straggler":
                eng.speeds.set_slowdown(r, e.slowdown)
            else:
                eng.pause(r, math.inf)  # the step in flight never finishes
        elif e.kind == "domain_outage":
            i = eng.names.index(e.target)
            for r in [r for r in eng.active if i in r.placed.domains]:
                eng.pause(r, math.inf)
                inc.hit(r.spec.name)
        elif e.kind == "link_cut":
            for r in _across(eng, e.target):
                eng.pause(r, math.inf)
                inc.hit(r.spec.name)

    def _notice(self, eng: Engine, inc: Incident, t: float) -> None:
        e = inc.event
        if e.kind == "domain_outage":
            eng.domains.set_health(eng.names.index(e.target), False)
            inc.how = "domain lost: its jobs resume elsewhere from their checkpoints"
            return
        if e.kind == "link_cut":
            a, b = (eng.names.index(n) for n in e.target.split("|"))
            self.cut.add((a, b))
            for r in _across(eng, e.target):
                self.recover(eng, r, t, replace=False)
            inc.how = "link cut: jobs across it re-planned"
            return
        r = next((x for x in eng.active if x.spec.name == inc.job), None)
        if r is None:
            return
        d = e.target.split("/")[0]
        slow = e.kind == "straggler"  # alive, only slow: save first, lose nothing
        if self.spare.get(d, 0) >= GPUS_PER_NODE:
            self.spare[d] -= GPUS_PER_NODE  # back when the node is repaired
            inc.how = f"node replaced from {d}'s backup pool, " + (
                "checkpoint saved and reloaded" if slow else "restored from checkpoint"
            )
            # its speed is estimated again once placed
            eng.speeds.set_slowdown(r, 1.0, refresh=False)
            self.recover(eng, r, t, replace=True, save=slow)
        elif slow:
            inc.how = "pool empty: the job runs on, slower, until the node recovers"
            inc.jobs[r.spec.name] = t  # degraded, never stopped
        else:
            inc.how = "pool empty: re-planned on what is free, restored from checkpoint"
            self.recover(eng, r, t, replace=False)

    def _repair(self, eng: Engine, inc: Incident, t: float) -> None:
        e = inc.event
        if e.kind in NODE_KINDS and inc.how.startswith("node replaced"):
            d = e.target.split("/")[0]
            self.spare[d] = min(self.spare[d] + GPUS_PER_NODE, self.reserve[d])
        elif e.kind == "straggler":
            for r in eng.runs:
                if r.spec.name == inc.job and r.slowdown != 1.0:
                    eng.speeds.set_slowdown(r, 1.0)
        elif e.kind == "domain_outage":
            eng.domains.set_health(eng.names.index(e.target), True)
        elif e.kind == "link_cut":
            a, b = (eng.names.index(n) for n in e.target.split("|"))
            self.cut.discard((a, b))

    def resize(self, targets: dict[str, int]) -> None:
        """New pool sizes: nodes out for repair stay owed, so a shrink may leave none spare."""
        for d, n in targets.items():
            self.spare[d] = max(self.spare.get(d, 0) + n - self.reserve.get(d, 0), 0)
            self.reserve[d] = n

    def _victim(self, eng: Engine, domain: str):
        """The job on the failed node: each accelerator of the domain equally likely."""
        i = eng.names.index(domain)
        runs = [r for r in eng.active if i in r.placed.domains]
        held = np.array([r.placed.taken[i] for r in runs] + [0], dtype=float)
        total = max(eng.base_view.domains[i].total_gpus, int(held.sum()))
        held[-1] = total - held[:-1].sum()  # idle or other tenants' accelerators
        k = int(self.rng.choice(len(held), p=held / held.sum()))
        return runs[k] if k < len(runs) else None

    def recover(self, eng: Engine, r, t: float, replace: bool, save: bool = False) -> None:
        """A job hit by a detected fault: back to its last checkpoint (or to now, when it is
        alive and can `save` first), on the same placement with the failed node replaced from
        the pool, or re-planned on what is free (pools included), or queued first in line."""
        eng.switches.cancel(r)
        if save:
            r.save()
        eng.rewind(r)
        if replace:
            eng.pause(r, t + restore_s(eng.scn, r) * (2 if save else 1))  # write, then read
            self.resumed(r.spec.name, r.paused_until)
            return
        eng.release(r)
        new = eng.policy.replan(
            eng.replan_spec(r),
            r.placement,
            with_pools(eng, eng.speeds.links_left(r)).adjust_free(
                {i: -n for i, n in r.placement.taken.items()}
            ),
        )
        r.count_replan()
        if new is None:
            eng.requeue(r, recovering=True)
            return
        eng.start(r, new, Action.RECOVER, restore=True)

    def checkpoint_every_s(self, scn, r) -> float:
        """Young/Daly: the interval that balances writing checkpoints against redoing work."""
        p = r.placement
        write = checkpoint_cost_s(r.spec.arch.params, scn.domains[p.domains[0]].storage.io_gbps / 8)
        nodes = max(1, -(-p.total_gpus // GPUS_PER_NODE))
        return plan_checkpoints(nodes, write, restore_s(scn, r), self.node_rate_per_hour).interval_s

    def resumed(self, job: str, t: float) -> None:
        """A job hit by open incidents runs again from `t` (after its restore)."""
        for inc in self.incidents:
            if inc.jobs.get(job, 0.0) is None and inc.event.time_s <= t:
                inc.jobs[job] = t

    def summary(self, runs) -> FaultSummary:
        """What the faults did and how the jobs recovered."""
        recovery = [
            max(v for v in inc.jobs.values() if v is not None) - inc.event.time_s
            for inc in self.incidents
            if inc.jobs and all(v is not None for v in inc.jobs.values())
        ]
        interrupted = [
            v - inc.event.time_s
            for inc in self.incidents
            for v in inc.jobs.values()
            if v is not None
        ]
        detected = [
            inc.detected_s - inc.event.time_s
            for inc in self.incidents
            if inc.detected_s is not None
        ]
        kinds = [inc.event.kind for inc in self.incidents]
        return FaultSummary(
            injected=len(self.incidents),
            injected_by_kind={k: kinds.count(k) for k in sorted(set(kinds))},
            detected=len(detected),
            jobs_hit=sum(len(inc.jobs) for inc in self.incidents),
            unrecovered=sum(v is None for inc in self.incidents for v in inc.jobs.values()),
            detection_s_p50=percentile(detected, 50),
            detection_s_p99=percentile(detected, 99),
            recovery_s_p50=percentile(recovery, 50),
            recovery_s_max=max(recovery) if recovery else 0.0,
            interrupted_s_max=max(interrupted) if interrupted else 0.0,
            lost_work_gpu_h=sum(r.lost_gpu_s for r in runs) / 3600,
            backup_pool_gpus=dict(self.reserve),
            backup_pool_floor_gpus=dict(self.floor),
        )


def _across(eng: Engine, link: str) -> list:
    """Running jobs with both ends of the link `a|b` among their domains."""
    a, b = (eng.names.index(n) for n in link.split("|"))
    return [r for r in eng.active if {a, b} <= set(r.placed.domains)]


MAX_POOL_SHARE = 0.125  # never hold back more than an eighth of a domain


def backup_pool(
    scn, node_rate_per_hour: float, repair_h: float, quantile: float = 0.99
) -> dict[str, int]:
    """Accelerators each domain holds back: enough whole nodes to replace every node that is
    down at once with probability `quantile` (Poisson in failures × repair time), at least one
    node and at most MAX_POOL_SHARE of the domain in whole nodes (beyond it, re-planning is the
    cheaper cure): so none in a domain too small to spare one node (a node held back from two
    would be half of it).
    """
    from scipy.stats import poisson

    out = {}
    for d in scn.domains:  # node faults and stragglers alike take a node from the pool
        nodes = max(1, -(-d.gpus // GPUS_PER_NODE))
        lam = nodes * node_rate_per_hour * repair_h
        cap = int(nodes * MAX_POOL_SHARE)
        out[d.name] = GPUS_PER_NODE * min(cap, max(1, int(poisson.ppf(quantile, lam))))
    return out


def study_faults(scn, seed: int, hours: float, scale: float) -> Faults:
    """The study's faults: published rates × scale, each fault's detection delay measured by
    running the detectors on its simulated heartbeat and log streams, and the backup pools
    sized from failure rates (the floor of the demand forecast's pools, `sim.demand`)."""
    from xdscheduler.faults.bench import detection_delay_s, fit_log_model
    from xdscheduler.faults.failure_model import NODE_REPAIR_S, Cluster, FailureModel, on_domains

    model = FailureModel(scale=scale)
    events = on_domains(model.generate(Cluster.of_scenario(scn), hours * 3600, seed), scn)
    log_model = fit_log_model(seed)
    delays = [
        detection_delay_s(e.kind, seed * 100_003 + k, log_model) for k, e in enumerate(events)
    ]
    rate = model.node_per_hour * scale
    repair_h = float(np.mean(NODE_REPAIR_S)) / 3600
    replaced = (model.node_per_hour + model.straggler_per_node_hour) * scale
    return Faults(events, delays, backup_pool(scn, replaced, repair_h), rate, seed)


def false_alarms(trials: int, seed: int) -> int:
    """Verdicts the detectors give on fault-free streams (heartbeat jitter, benign log bursts)."""
    from xdscheduler.faults.bench import fit_log_model, run_trial
    from xdscheduler.faults.detector import DetectorConfig

    model, rng = fit_log_model(seed), np.random.default_rng([seed, 7])
    return sum(len(run_trial(rng, None, model, DetectorConfig())) for _ in range(trials))
