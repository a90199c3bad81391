"""Tenants in the live mode: the scenario's quotas, cohorts and priorities, applied by the studies'
own rules (`sim.tenancy`): a queued job is offered to the policy only while its tenant has room;
a placement that breaks a quota is turned down; a queued job that cannot start makes room by
preempting jobs of lower priority (of its own tenant, or borrowers), or reclaims its nominal
quota lent to its cohort. A scenario without `tenancy:` has one tenant, `default`, whose quota is
the whole cluster: priorities still preempt.

A live victim is not stopped on the spot: it saves a checkpoint at its next question to the
controller (every few steps) and queues again; it resumes from that checkpoint when it is
placed again. Meanwhile its accelerators count as being given back: the job it made room for
is placed on them at once, and its run waits for them. A job across domains is preempted by
these rules as any other (a study's planner also lets any job that fits a domain reclaim what
such a job holds there; the live plane does not).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdscheduler.sim.jobs import JobRun
from xdscheduler.sim.tenancy import TenancyState
from xdscheduler.tenants import Tenancy, Tenant

DEFAULT = "default"


@dataclass
class _Free:
    available: int


@dataclass
class _View:
    domains: list[_Free]


class _Engine:
    """What `TenancyState.preempt_for` reads of a study's engine, made of the live jobs."""

    def __init__(self, active: list[JobRun], free: list[int], preempt):
        self.active, self.events, self._preempt = active, self, preempt
        self.view = _View([_Free(n) for n in free])

    def preempt(self, run: JobRun, why: str, lose_work: bool = False) -> None:
        self._preempt(run.name, why)

    def schedule(self, key: tuple, at: float) -> None:  # a victim with a grace period
        pass  # it checkpoints at its next question anyway: `LiveTenancy.victims` hears it


class LiveTenancy:
    def __init__(self, scn):
        classes = [d.accelerator.name for d in scn.domains]
        tenancy = scn.tenancy or Tenancy(
            tenants=[Tenant(name=DEFAULT, quota={"all": sum(d.gpus for d in scn.domains)})]
        )
        self.state = TenancyState(tenancy, classes)
        self.names = [t.name for t in tenancy.tenants]

    def check(self, tenant: str) -> None:
        """ValueError naming the tenants when the job's is not one of the scenario's."""
        if tenant not in self.names:
            raise ValueError(
                f"tenant {tenant!r} is not one of the scenario's: {', '.join(self.names)}"
            )

    def priority(self, tenant: str, priority: int) -> int:
        """A job's priority: its own, at least its tenant's floor."""
        return self.state.priority(tenant, priority)

    def admissible(self, queued: list[JobRun], active: list[JobRun]):
        """The specs the policy may place now (each within its tenant's room), and the usage
        `accept` checks placements against."""
        return self.state.admissible(queued, active)

    def accept(self, tenant: str, taken: dict[int, int], used: dict) -> bool:
        return self.state.accept(tenant, taken, used)

    def victims(
        self, queued: list[JobRun], active: list[JobRun], free: list[int], now_s: float
    ) -> dict[str, str]:
        """The running jobs to preempt now for the queued ones, each with why; `active`: the
        running jobs not already preempted, `free`: per domain, what is free or being given
        back."""
        chosen: dict[str, str] = {}
        order = sorted(queued, key=lambda r: (-r.priority, r.arrival_s))
        self.state.preempt_for(_Engine(active, free, chosen.__setitem__), order, now_s)
        for name, (_, why) in list(self.state.evicting.items()):
            chosen.setdefault(name, why)
        self.state.evicting.clear()  # a live victim leaves when it has saved, not on a timer
        # the studies' reason, then what a live victim does instead of what a study's loses
        return {
            name: why.rsplit("; ", 1)[0] + "; saves a checkpoint at its next question and "
            "resumes from it"
            for name, why in chosen.items()
        }


def as_run(rec, started: float, names: list[str]) -> JobRun:
    """A live job as the studies' rules read it: its spec, tenant and priority, and, running,
    its placement, progress and last checkpoint in tokens."""
    job = rec.job
    spec = job.spec(rec.submitted - started, rec.priority)
    progress = {}
    if rec.status == "running" and rec.chosen is not None:
        per_step = job.global_batch * job.model.seq
        measured = rec.measured()
        # a job across domains is a candidate like any other: the studies' giants are
        # reclaimed by whatever fits a domain, which the live plane does not do
        progress = {
            "placement": replace(rec.chosen, preemptible=False),
            "start_s": rec.placed_at - started,
            "done": rec.step * per_step,
            "checkpoint": rec.checkpointed * per_step,
            "rate": per_step / measured if measured else 0.0,
        }
    return JobRun(
        spec=spec,
        tokens=spec.tokens,
        arrival_s=rec.submitted - started,
        priority=rec.priority,
        tenant=job.tenant,
        **progress,
    )
