"""What a study records as it runs: the decision log, samples of every domain, the recovery of
every triggered re-plan, and what it all adds up to (`Results`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from xdscheduler.sim.records import FaultSummary, Forecast


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile of the values; None where there are none."""
    return float(np.percentile(values, q)) if values else None


class Action(StrEnum):
    """What a logged decision did to its job."""

    PLACE = "place"  # a queued job started
    REPLAN = "replan"  # a running job moved to a new plan
    RELOCATE = "relocate"  # a running job set off to other domains
    RECOVER = "recover"  # a job hit by a fault re-placed
    REQUEUE = "requeue"  # a job sent back to the queue (its domain was lost)


@dataclass
class DecisionRecord:
    """One entry of the decision log."""

    time_s: float
    job: str
    action: Action
    domains: dict[str, int]  # accelerators taken, by domain name
    plan: dict
    explanation: str
    decision_ms: float
    free_before: dict[str, int]  # free accelerators by domain when it was taken


@dataclass
class DecisionLog:
    """The append-only decision log; `on_record` hears of each entry as it is made (the
    journal)."""

    records: list[DecisionRecord] = field(default_factory=list)
    on_record: Callable[[int, DecisionRecord], None] | None = None

    def append(self, record: DecisionRecord) -> None:
        self.records.append(record)
        if self.on_record:
            self.on_record(len(self.records) - 1, record)

    def __getstate__(self) -> dict:  # the listener belongs to the process, not the state
        return {**self.__dict__, "on_record": None}


class SwingMeter:
    """Follows each triggered re-plan until its job trains at the target rate again."""

    def __init__(self) -> None:
        self.records: list = []  # reconfig.Swing, every one
        self.open: list[tuple] = []  # (swing, job) not yet closed

    def record(self, swing, job) -> None:
        self.records.append(swing)
        if swing.end_s is None:
            self.open.append((swing, job))

    def abort(self, job) -> None:
        """The job's switch will not happen: its open records close unrecovered."""
        for s, run in self.open:
            if run is job:
                s.aborted = True

    def close(self, t: float, settled: Callable) -> None:
        """A record closes once its job trains at the target rate with nothing pending
        (`settled(job)`); a job that ended, or that a fault took, closes it unrecovered. Only the
        open records are looked at."""
        still = []
        for s, r in self.open:
            if s.aborted:
                continue
            if not r.running or r.recovering:
                s.aborted = True
            elif settled(r) and r.paused_until <= t and r.rate >= s.target * (1 - 1e-9):
                s.end_s, s.tokens = t, r.done - s.done0
            else:
                still.append((s, r))
        self.open = still


def domain_samples(t: float, view, held: list[int], queue_len: int, load) -> list[dict]:
    """One sample per domain: accelerators busy with the study's jobs, the queue, and the load of
    other tenants."""
    return [
        {
            "time_s": t,
            "domain": d.name,
            "gpus_total": d.total_gpus,
            "gpus_busy": held[i],
            "utilization": held[i] / max(d.total_gpus, 1),
            "queue_len": queue_len,
            "background_load": float(load[i]),
        }
        for i, d in enumerate(view.domains)
    ]


@dataclass
class Results:
    """One policy's study: every job's life, the decision log, samples, and what moved."""

    policy: str
    jobs: list  # JobRun
    decisions: list[DecisionRecord]
    samples: list[dict]  # per domain per sample time
    rejected_samples: int
    end_s: float
    busy_gpu_s: float
    capacity_gpu_s: float
    down: dict[str, float] = field(default_factory=dict)  # domain -> time it was seen down
    useful_flop: float = 0.0  # model FLOPs trained while jobs arrived
    single_domain: bool = False  # the policy never places a job across domains
    wall_s: float = 0.0
    names: list[str] = field(default_factory=list)
    faults: FaultSummary | None = None  # what faults did and how the jobs recovered
    demand: Forecast | None = None  # the demand forecast's consultations, pools and holds
    swings: list = field(default_factory=list)  # every triggered re-plan, measured
    relocations: list = field(default_factory=list)  # moves to other domains
    predictions: list = field(default_factory=list)  # correction.Prediction per placement run
    link_samples: list[dict] = field(default_factory=list)  # WAN links' traffic per sample
    tenants: dict | None = None  # per tenant (records.TenantFigures), with tenancy
