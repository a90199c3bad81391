"""Tenants in a study: admission within quotas, preemption by priority and to reclaim lent
quota, and the meters behind each tenant's figures.

Every policy decides on what admission lets through (`admissible`): a job is offered to the
policy only while its tenant has room for its minimum (own idle quota, then what its cohort
lends), at most that room; a placement that would still break a quota is turned down
(`accept`). Before the policy decides, `preempt_for` frees room for queued jobs that may take
it: a job of higher priority takes it from lower-priority jobs of its own tenant or from
borrowers; a job within its tenant's nominal quota reclaims it from borrowers of its cohort,
whatever their priority. Victims are those that lose the least work (accelerator-time since
their last checkpoint), on the domain where freeing the room costs least; with a grace period
they first write a checkpoint and lose nothing. A job preempted twice within `protect_s` is
left alone for `protect_s`, and a queued job makes room at most once in `protect_s` (the
policy may start it elsewhere, or not at all). Each preemption is in the decision log with its
reason and cost.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from xdscheduler.sim.jobs import JobRun
from xdscheduler.tenants import ALL, Quotas, Tenancy

if TYPE_CHECKING:
    from xdscheduler.sim.engine import Engine

LOOKAHEAD = 8  # queued jobs that may preempt at one decision


@dataclass
class Meter:
    """What a tenant's jobs' own meters do not tell: borrowing, lending, preemptions."""

    borrowed_gpu_s: float = 0.0  # accelerator-seconds held beyond its nominal quota
    lent_gpu_s: float = 0.0  # of its idle quota others used
    preempted: int = 0  # preemptions of its jobs
    lost_gpu_s: float = 0.0  # work its jobs lost to preemption


@dataclass
class Victim:
    job: JobRun
    lost_gpu_s: float  # work lost if evicted now
    why: str


@dataclass
class TenancyState:
    """The engine's part for tenants."""

    tenancy: Tenancy
    classes: list[str]  # accelerator class of each domain
    meters: dict[str, Meter] = field(default_factory=dict)
    evicting: dict[str, tuple[float, str]] = field(default_factory=dict)  # job -> (at, why)
    preemptions: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    preempted_for: dict[str, float] = field(default_factory=dict)  # job -> when it last did

    def __post_init__(self) -> None:
        self.quotas = Quotas(self.tenancy)
        self.meters = {t.name: Meter() for t in self.tenancy.tenants}

    def priority(self, tenant: str, priority: int) -> int:
        """A job's priority: its own, at least its tenant's floor."""
        floor = self.quotas.tenant(tenant).priority
        return priority if floor is None else max(priority, floor)

    # ------------------------------------------------------------------ usage

    def keys_of(self, taken: dict[int, int]) -> dict[str, int]:
        """Accelerators of a placement per quota key."""
        out = {ALL: sum(taken.values())}
        for i, n in taken.items():
            out[self.classes[i]] = out.get(self.classes[i], 0) + n
        return out

    def used(self, active: list[JobRun]) -> dict[str, dict[str, int]]:
        """What each tenant holds now, per quota key."""
        used: dict[str, dict[str, int]] = {t.name: {} for t in self.tenancy.tenants}
        for r in active:
            held = {**r.placed.taken}
            for i, n in r.preparing.items():
                held[i] = held.get(i, 0) + n
            for key, n in self.keys_of(held).items():
                used[r.tenant][key] = used[r.tenant].get(key, 0) + n
        return used

    def room(self, used: dict, tenant: str) -> int | None:
        """The most accelerators the tenant may take now: its room in all, or else the sum of
        its rooms per class (None: no limit)."""
        quota = self.quotas.tenant(tenant).quota
        if ALL in quota:
            return self.quotas.headroom(used, tenant, ALL)
        rooms = [self.quotas.headroom(used, tenant, key) for key in quota]
        return sum(r for r in rooms if r is not None)

    # ------------------------------------------------------------------ admission

    def admissible(self, order: list[JobRun], active: list[JobRun]) -> tuple[list, dict]:
        """The specs the policy may place now, each at most its tenant's room, and the usage
        `accept` checks placements against. Within a priority, tenants using the least of their
        weighted quota go first (fair sharing)."""
        used = self.used(active)

        def share(r: JobRun) -> float:
            t = self.quotas.tenant(r.tenant)
            return used[r.tenant].get(ALL, 0) / (t.weight * max(sum(t.quota.values()), 1))

        specs = []
        for r in sorted(order, key=lambda r: (-r.priority, share(r))):
            room = self.room(used, r.tenant)
            if room is not None and room < r.spec.gpus_min:
                continue
            cap = r.spec.gpus_max if room is None else min(r.spec.gpus_max, room)
            specs.append(r.spec if cap == r.spec.gpus_max else replace(r.spec, gpus_max=cap))
        return specs, used

    def accept(self, tenant: str, taken: dict[int, int], used: dict) -> bool:
        """Whether a placement keeps its tenant within every quota; if so it counts in `used`."""
        asked = self.keys_of(taken)
        for key, n in asked.items():
            room = self.quotas.headroom(used, tenant, key)
            if room is not None and n > room:
                return False
        for key, n in asked.items():
            used[tenant][key] = used[tenant].get(key, 0) + n
        return True

    # ------------------------------------------------------------------ preemption

    def protected(self, r: JobRun, now: float) -> bool:
        times = self.preemptions.get(r.name, [])
        protect = self.tenancy.preemption.protect_s
        return len(times) >= 2 and times[-1] - times[-2] <= protect and now - times[-1] < protect

    def lost_gpu_s(self, r: JobRun) -> float:
        """Work lost if `r` stopped now: accelerator-time since its last checkpoint (none with a
        grace period: it writes one first)."""
        if self.tenancy.preemption.grace_s > 0 or r.rate <= 0:
            return 0.0
        return (r.done - r.checkpoint) / r.rate * r.placed.total_gpus

    def _candidates(
        self, job: JobRun, used: dict, active: list[JobRun], now: float
    ) -> list[Victim]:
        quotas = self.quotas
        nominal = quotas.nominal(job.tenant, ALL)
        within = nominal is None or used[job.tenant].get(ALL, 0) + job.spec.gpus_min <= nominal
        peers = set(quotas.peers(job.tenant))
        out = []
        for v in active:
            if v.name in self.evicting or self.protected(v, now) or v.placed.preemptible:
                continue
            borrowing = quotas.borrowed(used, v.tenant, ALL) > 0
            if v.priority < job.priority and (v.tenant == job.tenant or borrowing):
                why = f"priority {job.priority} over {v.priority}" + (
                    "" if v.tenant == job.tenant else f"; {v.tenant} is borrowing"
                )
            elif within and borrowing and v.tenant in peers:
                why = f"{job.tenant} reclaims its nominal quota lent to {v.tenant}"
            else:
                continue
            out.append(Victim(v, self.lost_gpu_s(v), why))
        return out

    def _cheapest(
        self, job: JobRun, victims: list[Victim], free: list[int], room: int | None
    ) -> list[Victim] | None:
        """The victims that free the job's minimum on one domain (and within its tenant's
        quota) losing the least work; None where none do."""
        need = job.spec.gpus_min
        best, best_cost = None, None
        for d in range(len(free)):
            there = [v for v in victims if d in v.job.placed.taken]
            there.sort(
                key=lambda v: (v.lost_gpu_s / v.job.placed.taken[d], -(v.job.start_s or 0.0))
            )  # a victim runs: it started
            chosen, got, quota = [], free[d], room
            for v in there:
                if got >= need and (quota is None or quota >= need):
                    break
                chosen.append(v)
                got += v.job.placed.taken[d]
                if quota is not None and v.job.tenant == job.tenant:
                    quota += v.job.placed.total_gpus
            if got < need or (quota is not None and quota < need) or not chosen:
                continue
            cost = (sum(v.lost_gpu_s for v in chosen), len(chosen))
            if best_cost is None or cost < best_cost:
                best, best_cost = chosen, cost
        return best

    def preempt_for(self, eng: Engine, order: list[JobRun], now: float) -> None:
        """Free room for the first queued jobs that may take it (see the module's docstring)."""
        active = [r for r in eng.active if r.name not in self.evicting]
        free = [max(d.available, 0) for d in eng.view.domains]
        for r in eng.active:  # what is already being given back counts as free
            if r.name in self.evicting:
                for i, n in r.placed.taken.items():
                    free[i] += n
        used = self.used(active)
        protect = self.tenancy.preemption.protect_s
        for job in order[:LOOKAHEAD]:
            if job.recovering or now - self.preempted_for.get(job.name, -protect) < protect:
                continue  # a job makes room once a while: the policy may not start it there
            room = self.room(used, job.tenant)
            if max(free) >= job.spec.gpus_min and (room is None or room >= job.spec.gpus_min):
                continue  # it can start without anyone giving way
            chosen = self._cheapest(job, self._candidates(job, used, active, now), free, room)
            if not chosen:
                continue
            self.preempted_for[job.name] = now
            for v in chosen:
                taken = dict(v.job.placed.taken)
                self._evict(eng, v, job, now)
                active.remove(v.job)
                for i, n in taken.items():
                    free[i] += n
            used = self.used(active)

    def _evict(self, eng: Engine, v: Victim, by: JobRun, now: float) -> None:
        grace = self.tenancy.preemption.grace_s
        why = f"preempted for {by.name} ({v.why}); " + (
            f"checkpoints within its {grace:g} s grace, loses nothing"
            if grace > 0
            else f"loses {v.lost_gpu_s / 3600:.2f} accelerator-hours since its last checkpoint"
        )
        self.preemptions[v.job.name].append(now)
        meter = self.meters[v.job.tenant]
        meter.preempted += 1
        meter.lost_gpu_s += v.lost_gpu_s
        if grace > 0:
            self.evicting[v.job.name] = (now + grace, why)
            eng.events.schedule(("evict", v.job.name), now + grace)
        else:
            eng.preempt(v.job, why, lose_work=True)

    def evict_due(self, eng: Engine, now: float) -> None:
        """Victims whose grace has run out checkpoint and give their accelerators back."""
        for r in [r for r in eng.active if r.name in self.evicting]:
            at, why = self.evicting[r.name]
            if at <= now:
                del self.evicting[r.name]
                eng.preempt(r, why)
        running = {r.name for r in eng.active}
        for name in [n for n in self.evicting if n not in running]:
            del self.evicting[name]  # finished or lost meanwhile

    # ------------------------------------------------------------------ meters

    def meter(self, active: list[JobRun], dt: float) -> None:
        """Accelerator-time held, borrowed and lent over `dt` at the usage now."""
        if dt <= 0:
            return
        used = self.used(active)
        lent = self.quotas.lent(used, ALL)
        for t in self.tenancy.tenants:
            m = self.meters[t.name]
            m.borrowed_gpu_s += self.quotas.borrowed(used, t.name, ALL) * dt
            m.lent_gpu_s += lent[t.name] * dt

    def figures(self, runs: list[JobRun], prices: list[float], end_s: float) -> dict[str, dict]:
        """Each tenant's figures (`TenantFigures`) from its jobs' meters and its own;
        `prices`: $ an accelerator-hour per domain."""
        out = {}
        for t in self.tenancy.tenants:
            mine = [r for r in runs if r.tenant == t.name]
            m = self.meters[t.name]
            waits = [
                (r.start_s if r.start_s is not None else end_s) - r.arrival_s
                for r in mine
                if r.arrival_s <= end_s
            ]
            held = [(i, n) for r in mine for i, n in r.gpu_s.items()]
            gpus = sum(n / 3600 * prices[i] for i, n in held)
            wan = sum(r.wan_cost for r in mine)
            out[t.name] = {
                "quota": dict(t.quota),
                "cohort": t.cohort,
                "weight": t.weight,
                "jobs": len(mine),
                "admitted": sum(r.start_s is not None for r in mine),
                "completed": sum(r.end_s is not None for r in mine),
                "preempted": m.preempted,
                "lost_gpu_h": m.lost_gpu_s / 3600,
                "mean_wait_s": sum(waits) / len(waits) if waits else None,
                "use_gpu_h": sum(n for _, n in held) / 3600,
                "borrowed_gpu_h": m.borrowed_gpu_s / 3600,
                "lent_gpu_h": m.lent_gpu_s / 3600,
                "accelerators_usd": gpus,
                "wan_usd": wan,
                "bill_usd": gpus + wan,
            }
        return out
