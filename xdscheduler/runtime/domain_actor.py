"""A domain as a Ray actor: it owns its accelerators' state and reports on itself."""

from __future__ import annotations

import ray

from xdscheduler.scenario import Domain
from xdscheduler.sim.domain import DomainReport, DomainState


@ray.remote(num_cpus=0, max_restarts=0)
class DomainActor:
    """One domain. Its environment (links, background load) comes from the shared dynamics."""

    def __init__(self, domain: dict, index: int, names: list[str], dynamics):
        self.state = DomainState(Domain.model_validate(domain), index)
        self.names = names
        self.dynamics = dynamics

    def ping(self) -> bool:
        return True

    def report(self, now_s: float) -> DomainReport:
        d, i = self.dynamics, self.state.index
        return self.state.report(
            now_s, float(d.load(now_s)[i]), d.bandwidth(now_s)[i], d.rtt(now_s)[i], self.names
        )

    def apply(self, job: str, gpus: int, now_s: float) -> None:
        self.state.apply(job, gpus, float(self.dynamics.load(now_s)[self.state.index]))

    def release(self, job: str) -> None:
        self.state.release(job)

    def restore(self, job: str, gpus: int) -> None:
        self.state.restore(job, gpus)

    def allocations(self) -> dict[str, int]:
        return dict(self.state.allocations)
