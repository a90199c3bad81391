"""The engine's way to the domain actors: gather reports, apply and release allocations, and
notice the domains that stop answering."""

from __future__ import annotations

import contextlib

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from xdscheduler.runtime.domain_actor import DomainActor
from xdscheduler.scenario import Scenario
from xdscheduler.sim.domain import DomainReport

PING_TIMEOUT_S = 3.0  # a report not back within 3 s is a missed report
MISSES_TO_DOWN = 3  # a live actor that misses 3 reports in a row is down; a dead one at once
STARTUP_TIMEOUT_S = 300.0


class ActorDomains:
    """Creates and owns one DomainActor per domain (the supervisor of them all)."""

    def __init__(self, scn: Scenario, dynamics, timeout_s: float = PING_TIMEOUT_S):
        names = [d.name for d in scn.domains]
        shared = ray.put(dynamics)  # one copy in the object store, read by every actor
        self.spawn = lambda i: DomainActor.remote(  # type: ignore[attr-defined]  # an actor class
            scn.domains[i].model_dump(), i, names, shared
        )
        self.actors = [self.spawn(i) for i in range(len(scn.domains))]
        self.replaced = [0] * len(self.actors)
        self.alive = [True] * len(self.actors)
        self.outage: set[int] = set()  # injected outages: the actor lives, the site is dark
        self.misses = [0] * len(self.actors)
        self.timeout_s = timeout_s
        # Starting a process per actor can take long on a busy machine: that is not a failure,
        # so wait for every first report before the study begins.
        self.last: list[DomainReport | None] = ray.get(
            [a.report.remote(0.0) for a in self.actors], timeout=STARTUP_TIMEOUT_S
        )

    def reports(self, now_s: float) -> list[DomainReport | None]:
        """Each domain's report; the last one while it is late, None once it is down.

        A killed actor is down as soon as its call fails. A slow one (an overloaded machine)
        is only down after MISSES_TO_DOWN late reports in a row: one late answer is not a
        failure.
        """
        revived = [i for i, up in enumerate(self.alive) if not up and self.replaced[i]]
        for i in revived:
            self.alive[i], self.misses[i] = True, 0
        refs = {i: a.report.remote(now_s) for i, a in enumerate(self.actors) if self.alive[i]}
        answered, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.timeout_s)
        ready = set(answered)
        for i, ref in refs.items():
            if ref not in ready:
                self.misses[i] += 1
                self.alive[i] = self.misses[i] < MISSES_TO_DOWN
                continue
            try:
                self.last[i], self.misses[i] = ray.get(ref), 0
            except RayActorError:
                # The actor died, not the site: a new one takes over at once. This round the
                # domain is down (its jobs' allocations went with the old actor and they
                # resume from their checkpoints); the next round it reports again.
                self.alive[i] = False
                self.actors[i], self.replaced[i] = self.spawn(i), self.replaced[i] + 1
        return [
            report if up and i not in self.outage else None
            for i, (report, up) in enumerate(zip(self.last, self.alive, strict=True))
        ]

    def set_health(self, index: int, healthy: bool) -> None:
        (self.outage.discard if healthy else self.outage.add)(index)

    def apply(self, job: str, gpus: dict[int, int], now_s: float) -> None:
        self._settle(
            [self.actors[i].apply.remote(job, n, now_s) for i, n in gpus.items() if self.alive[i]]
        )

    def restore(self, job: str, gpus: dict[int, int]) -> None:
        self._settle(
            [self.actors[i].restore.remote(job, n) for i, n in gpus.items() if self.alive[i]]
        )

    def release(self, job: str) -> None:
        self._settle(
            [a.release.remote(job) for a, up in zip(self.actors, self.alive, strict=True) if up],
            self.timeout_s,
        )

    @staticmethod
    def _settle(refs: list, timeout_s: float | None = None) -> None:
        """Wait for every call. One to an actor that died since the last report round is
        dropped: that round finds the domain down, and the jobs on it (this one too) resume
        from their checkpoints; a dead domain holds nothing any more."""
        for ref in refs:
            with contextlib.suppress(RayActorError, GetTimeoutError):
                ray.get(ref, timeout=timeout_s)
