"""Faults in a study: injected at their time, noticed after the detectors' delay, recovered.

A node fault (crash, GPU error, straggler) stalls or slows the job on that node; once detected,
the node is replaced from its domain's backup pool and the job restored from its last
checkpoint, or, with the pool empty, the job is re-planned elsewhere. A domain outage stalls its
jobs until detected, then they resume elsewhere from their checkpoints with first call on every
pool. A cut link stalls the jobs across it until they are re-planned. Lost work and the time
each job stood still are recorded per incident.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from xdscheduler.faults.checkpointing import checkpoint_cost_s
from xdscheduler.faults.failure_model import GPUS_PER_NODE, FaultEvent

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


def restore_s(params: float, gpus: int, storage_io_gbps: float) -> float:
    """Reading the checkpoint back (at the domain's storage bandwidth) and warming up."""
    return checkpoint_cost_s(params, storage_io_gbps / 8) + WARMUP_S


class Faults:
    """The study's fault events with their detection delays, and the backup pools."""

    def __init__(self, events: list[FaultEvent], delays: list[float | None],
                 pool: dict[str, int], node_rate_per_hour: float, seed: int = 0):
        self.node_rate_per_hour = node_rate_per_hour  # for Young/Daly intervals
        self.incidents = [Incident(e, detected_s=None if d is None else e.time_s + d,
                                   noticed_s=e.time_s + (MISSED_S if d is None else d))
                          for e, d in zip(events, delays, strict=True)]
        self.spare = dict(pool)  # whole nodes in the pools now (less those out for repair)
        self.reserve = dict(pool)  # what the pools hold when every node is whole
        self.floor = dict(pool)  # from failure rates: forecast-sized pools never go below
        self.planner = None  # a forecast.planning.DemandPlanner: pools and holds by forecast
        self.rng = np.random.default_rng(seed)
        self.todo = [(i.event.time_s, 0, k) for k, i in enumerate(self.incidents)]
        self.todo += [(i.noticed_s, 1, k) for k, i in enumerate(self.incidents)]
        self.todo += [(i.event.time_s + i.event.duration_s, 2, k)
                      for k, i in enumerate(self.incidents)]
        self.todo.sort()
        self.cut: set[tuple[int, int]] = set()

    def for_policy(self, name: str) -> Faults:
        """A fresh copy for one policy's run: the same faults, and a demand series of its own
        (a forecast service keeps one model per series, fitted on that series' history)."""
        mine = copy.deepcopy(self)
        if mine.planner is not None:
            mine.planner.series = f"{self.planner.series}-{name}"
        return mine

    @property
    def pool(self) -> dict[str, int]:
        """What the engine holds back from placements: spare nodes and known-job holds."""
        held = self.planner.held if self.planner else {}
        return {d: n + held.get(d, 0) for d, n in {**held, **self.spare}.items()}

    def next_time(self) -> float:
        return self.todo[0][0] if self.todo else math.inf

    def apply(self, eng, t: float) -> None:
        if self.planner:
            targets = self.planner.step(eng, t)
            if targets:
                self._resize(targets)
        while self.todo and self.todo[0][0] <= t:
            _, phase, k = self.todo.pop(0)
            inc = self.incidents[k]
            (self._inject, self._notice, self._repair)[phase](eng, inc, t)

    # ------------------------------------------------------------------ phases

    def _inject(self, eng, inc: Incident, t: float) -> None:
        e = inc.event
        if e.kind in NODE_KINDS:
            r = self._victim(eng, e.target.split("/")[0])
            if r is None:
                inc.how = "idle node: no job hit"
                return
            inc.hit(r.spec.name)
            if e.kind == "straggler":
                r.slowdown = e.slowdown
                eng.refresh_rate(r)
            else:
                r.paused_until = math.inf  # the step in flight never finishes
        elif e.kind == "domain_outage":
            i = eng.names.index(e.target)
            for r in eng.runs:
                if r.running and i in r.placement.domains:
                    r.paused_until = math.inf
                    inc.hit(r.spec.name)
        elif e.kind == "link_cut":
            a, b = (eng.names.index(n) for n in e.target.split("|"))
            for r in eng.runs:
                if r.running and {a, b} <= set(r.placement.domains):
                    r.paused_until = math.inf
                    inc.hit(r.spec.name)

    def _notice(self, eng, inc: Incident, t: float) -> None:
        e = inc.event
        if e.kind == "domain_outage":
            eng.domains.set_health(eng.names.index(e.target), False)
            inc.how = "domain lost: its jobs resume elsewhere from their checkpoints"
            return
        if e.kind == "link_cut":
            a, b = (eng.names.index(n) for n in e.target.split("|"))
            self.cut.add((a, b))
            for r in eng.runs:
                if r.running and {a, b} <= set(r.placement.domains):
                    eng.recover(r, t, replace=False)
            inc.how = "link cut: jobs across it re-planned"
            return
        r = next((x for x in eng.runs if x.spec.name == inc.job and x.running), None)
        if r is None:
            return
        d = e.target.split("/")[0]
        slow = e.kind == "straggler"  # alive, only slow: save first, lose nothing
        if self.spare.get(d, 0) >= GPUS_PER_NODE:
            self.spare[d] -= GPUS_PER_NODE  # back when the node is repaired
            inc.how = (f"node replaced from {d}'s backup pool, "
                       + ("checkpoint saved and reloaded" if slow else "restored from checkpoint"))
            r.slowdown = 1.0
            eng.recover(r, t, replace=True, save=slow)
        elif slow:
            inc.how = "pool empty: the job runs on, slower, until the node recovers"
            inc.jobs[r.spec.name] = t  # degraded, never stopped
        else:
            inc.how = "pool empty: re-planned on what is free, restored from checkpoint"
            eng.recover(r, t, replace=False)

    def _repair(self, eng, inc: Incident, t: float) -> None:
        e = inc.event
        if e.kind in NODE_KINDS and inc.how.startswith("node replaced"):
            d = e.target.split("/")[0]
            self.spare[d] = min(self.spare[d] + GPUS_PER_NODE, self.reserve[d])
        elif e.kind == "straggler":
            for r in eng.runs:
                if r.spec.name == inc.job and r.slowdown != 1.0:
                    r.slowdown = 1.0
                    if r.running:
                        eng.refresh_rate(r)
        elif e.kind == "domain_outage":
            eng.domains.set_health(eng.names.index(e.target), True)
        elif e.kind == "link_cut":
            a, b = (eng.names.index(n) for n in e.target.split("|"))
            self.cut.discard((a, b))

    def _resize(self, targets: dict[str, int]) -> None:
        """New pool sizes: nodes out for repair stay owed, so a shrink may leave none spare."""
        for d, n in targets.items():
            self.spare[d] = max(self.spare.get(d, 0) + n - self.reserve.get(d, 0), 0)
            self.reserve[d] = n

    def _victim(self, eng, domain: str):
        """The job on the failed node: each accelerator of the domain equally likely."""
        i = eng.names.index(domain)
        runs = [r for r in eng.runs if r.running and i in r.placement.domains]
        held = np.array([r.placement.taken[i] for r in runs] + [0], dtype=float)
        total = max(eng.base_view.domains[i].total_gpus, int(held.sum()))
        held[-1] = total - held[:-1].sum()  # idle or other tenants' accelerators
        k = int(self.rng.choice(len(held), p=held / held.sum()))
        return runs[k] if k < len(runs) else None

    def resumed(self, job: str, t: float) -> None:
        """A job hit by open incidents runs again from `t` (after its restore)."""
        for inc in self.incidents:
            if inc.jobs.get(job, 0.0) is None and inc.event.time_s <= t:
                inc.jobs[job] = t

    def summary(self, runs) -> dict:
        """The report's `faults` block (detector figures are filled in by the caller)."""
        recovery = [max(v for v in inc.jobs.values()) - inc.event.time_s
                    for inc in self.incidents
                    if inc.jobs and all(v is not None for v in inc.jobs.values())]
        interrupted = [v - inc.event.time_s for inc in self.incidents
                       for v in inc.jobs.values() if v is not None]
        detected = [inc.detected_s - inc.event.time_s for inc in self.incidents
                    if inc.detected_s is not None]
        kinds = [inc.event.kind for inc in self.incidents]
        return {
            "injected": len(self.incidents),
            "injected_by_kind": {k: kinds.count(k) for k in sorted(set(kinds))},
            "detected": len(detected),
            "jobs_hit": sum(len(inc.jobs) for inc in self.incidents),
            "unrecovered": sum(v is None for inc in self.incidents for v in inc.jobs.values()),
            "detection_s_p50": percentile(detected, 50),
            "detection_s_p99": percentile(detected, 99),
            "recovery_s_p50": percentile(recovery, 50),
            "recovery_s_max": max(recovery) if recovery else 0.0,
            "interrupted_s_max": max(interrupted) if interrupted else 0.0,
            "lost_work_gpu_h": sum(r.lost_gpu_s for r in runs) / 3600,
            "backup_pool_gpus": self.reserve,
            "backup_pool_floor_gpus": self.floor,
            **({"forecast": self.planner.summary()} if self.planner else {}),
        }


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile of the values; None where there are none."""
    return float(np.percentile(values, q)) if values else None


MAX_POOL_SHARE = 0.125  # never hold back more than an eighth of a domain


def backup_pool(scn, node_rate_per_hour: float, repair_h: float, quantile: float = 0.99
                ) -> dict[str, int]:
    """Accelerators each domain holds back: enough whole nodes to replace every node that is
    down at once with probability `quantile` (Poisson in failures × repair time), at least one
    node and at most MAX_POOL_SHARE of the domain (beyond it, re-planning is the cheaper cure).
    """
    from scipy.stats import poisson

    out = {}
    for d in scn.domains:  # node faults and stragglers alike take a node from the pool
        nodes = max(1, -(-d.gpus // GPUS_PER_NODE))
        lam = nodes * node_rate_per_hour * repair_h
        cap = max(1, int(nodes * MAX_POOL_SHARE))
        out[d.name] = GPUS_PER_NODE * min(cap, max(1, int(poisson.ppf(quantile, lam))))
    return out


def study_faults(scn, seed: int, hours: float, scale: float, forecast_url: str | None = None
                 ) -> Faults:
    """The study's faults: published rates × scale, each fault's detection delay measured by
    running the detectors on its simulated heartbeat and log streams, and the backup pools:
    sized from failure rates, then resized every hour from the demand forecast, which also
    pre-allocates for the scenario's announced jobs (`forecast_url`: ask a running Serve app's
    POST /forecast rather than the forecaster in process)."""
    from xdscheduler.faults.bench import detection_delay_s, fit_log_model
    from xdscheduler.faults.failure_model import NODE_REPAIR_S, Cluster, FailureModel
    from xdscheduler.forecast.planning import DemandPlanner

    model = FailureModel(scale=scale)
    events = model.generate(Cluster.of_scenario(scn), hours * 3600, seed)
    log_model = fit_log_model(seed)
    delays = [detection_delay_s(e.kind, seed * 100_003 + k, log_model)
              for k, e in enumerate(events)]
    rate = model.node_per_hour * scale
    repair_h = float(np.mean(NODE_REPAIR_S)) / 3600
    replaced = (model.node_per_hour + model.straggler_per_node_hour) * scale
    out = Faults(events, delays, backup_pool(scn, replaced, repair_h), rate, seed)
    out.planner = DemandPlanner(dict(out.floor), {j.name for j in scn.jobs}, forecast_url, seed)
    return out


def false_alarms(trials: int, seed: int) -> int:
    """Verdicts the detectors give on fault-free streams (heartbeat jitter, benign log bursts)."""
    from xdscheduler.faults.bench import fit_log_model, run_trial
    from xdscheduler.faults.detector import DetectorConfig

    model, rng = fit_log_model(seed), np.random.default_rng([seed, 7])
    return sum(len(run_trial(rng, None, model, DetectorConfig())) for _ in range(trials))
