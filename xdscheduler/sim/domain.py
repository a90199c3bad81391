"""One domain's state, its report of the 12 indicators, and the local (actor-free) gateway."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from xdscheduler.perception.indicators import Sample, checked, domain_samples
from xdscheduler.scenario import Domain


@dataclass(frozen=True)
class DomainReport:
    """What a domain says about itself at one moment."""

    domain: str
    time_s: float
    free_gpus: int
    reserved_gpus: int  # held by other tenants
    samples: tuple[Sample, ...]
    links: dict[str, tuple[float, float]]  # neighbour -> (Gbit/s out, RTT ms)
    allocations: dict[str, int]


@dataclass
class DomainState:
    """Accelerators of one domain and the jobs holding them."""

    spec: Domain
    index: int
    allocations: dict[str, int] = field(default_factory=dict)
    healthy: bool = True

    @property
    def total(self) -> int:
        return self.spec.gpus

    def free(self, background_load: float) -> int:
        """Negative when other tenants' share grew into what our jobs already hold."""
        held = round(background_load * self.total)
        return self.total - held - sum(self.allocations.values())

    def apply(self, job: str, gpus: int, background_load: float) -> None:
        if job in self.allocations:
            raise ValueError(f"{job} already holds accelerators in {self.spec.name}")
        if gpus > self.free(background_load):
            raise ValueError(
                f"{self.spec.name} has {self.free(background_load)} free "
                f"accelerators, {job} asked for {gpus}"
            )
        self.allocations[job] = gpus

    def release(self, job: str) -> None:
        self.allocations.pop(job, None)

    def restore(self, job: str, gpus: int) -> None:
        """Re-establish an allocation the job already held (a controller resuming): no
        capacity check, other tenants may have grown into it meanwhile."""
        self.allocations[job] = gpus

    def report(
        self,
        now_s: float,
        load: float,
        bandwidth_row: np.ndarray,
        rtt_row: np.ndarray,
        names: list[str],
    ) -> DomainReport:
        spec = self.spec
        linked = [j for j in range(len(names)) if j != self.index and bandwidth_row[j] > 0]
        samples = tuple(
            domain_samples(
                spec,
                total=self.total,
                free=self.free(load),
                held=sum(self.allocations.values()),
                background=load,
                bandwidth_gbps=bandwidth_row[linked].tolist(),
                rtt_ms=rtt_row[linked].tolist(),
                healthy=self.healthy,
                source=f"domain:{spec.name}",
                time_s=now_s,
            )
        )
        links = {names[j]: (float(bandwidth_row[j]), float(rtt_row[j])) for j in linked}
        return DomainReport(
            spec.name,
            now_s,
            self.free(load),
            round(load * self.total),
            samples,
            links,
            dict(self.allocations),
        )


def accepted(report: DomainReport, now_s: float) -> tuple[list[Sample], list[str]]:
    """The report's samples that pass their checks, and a reason for each one rejected."""
    return checked(report.samples, now_s)


class LocalDomains:
    """The domains as plain objects, for studies and the RL environment."""

    def __init__(self, domains: list[Domain], dynamics):
        self.states = [DomainState(d, i) for i, d in enumerate(domains)]
        self.names = [d.name for d in domains]
        self.dynamics = dynamics

    def reports(self, now_s: float) -> list[DomainReport | None]:
        load = self.dynamics.load(now_s)
        bw, rtt = self.dynamics.bandwidth(now_s), self.dynamics.rtt(now_s)
        return [
            s.report(now_s, float(load[i]), bw[i], rtt[i], self.names) if s.healthy else None
            for i, s in enumerate(self.states)
        ]

    def apply(self, job: str, gpus: dict[int, int], now_s: float) -> None:
        load = self.dynamics.load(now_s)
        for i, n in gpus.items():
            self.states[i].apply(job, n, float(load[i]))

    def release(self, job: str) -> None:
        for s in self.states:
            s.release(job)

    def restore(self, job: str, gpus: dict[int, int]) -> None:
        for i, n in gpus.items():
            self.states[i].restore(job, n)

    def set_health(self, index: int, healthy: bool) -> None:
        """A domain outage (injected) begins or ends: it stops or resumes reporting."""
        self.states[index].healthy = healthy
