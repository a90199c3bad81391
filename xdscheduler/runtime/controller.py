"""The controller as a Ray actor: it owns the domain actors and runs the engine over them."""

from __future__ import annotations

import time

import ray

from xdscheduler.registry import make_policy
from xdscheduler.runtime.gateway import ActorDomains
from xdscheduler.runtime.journal import Journal
from xdscheduler.scenario import Job, parse_scenario
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.measurement import Results


class RealTimeClock:
    """Holds each event back until its time has come on the wall clock (1 s per second)."""

    def __init__(self):
        self.start: float | None = None  # wall time of simulated 0, set by the first event

    def __call__(self, t: float) -> None:
        if self.start is None:
            self.start = time.monotonic() - t
        delay = self.start + t - time.monotonic()
        if delay > 0:
            time.sleep(delay)


@ray.remote(num_cpus=0, max_restarts=0)
class Controller:
    """One policy's controller: the queue, the view, the decisions, the domain actors."""

    def __init__(self, scenario: dict, jobs: list[dict], policy: str, dynamics,
                 horizon_s: float, realtime: bool = False, policy_options: dict | None = None,
                 journal: str | None = None, faults=None, demand=None, truth=None):
        scn = parse_scenario(scenario)
        self.domains = ActorDomains(scn, dynamics)
        self.engine = Engine(
            scn, [Job.model_validate(j) for j in jobs],
            make_policy(policy, scn.weights, policy_options), dynamics, self.domains, horizon_s,
            clock=RealTimeClock() if realtime else None,
            tick_s=1.0 if realtime else None, faults=faults, demand=demand, truth=truth)
        self.journal = Journal(journal, policy) if journal else None
        if self.journal:
            snapshot = self.journal.latest()
            if snapshot is not None:  # a controller before this one died: go on from there
                self.engine.restore(snapshot)
            self.engine.subscribe(self.journal.record)
        self.started = time.perf_counter()

    def advance(self, until_s: float) -> dict:
        """Run the study up to simulated time `until_s`; say where it stands."""
        if not self.engine.finished:
            self.engine.run(until_s=until_s)
            if self.journal:
                self.journal.checkpoint(self.engine)
        return self.engine.status()

    def status(self) -> dict:
        return self.engine.status()

    def results(self) -> Results:
        res = self.engine.results()
        res.wall_s = time.perf_counter() - self.started
        return res

    def domain_actors(self) -> list:
        return list(self.domains.actors)
