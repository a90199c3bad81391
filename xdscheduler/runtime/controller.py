"""The controller as a Ray actor: it owns the domain actors and runs the engine over them."""

from __future__ import annotations

import time

import ray

from xdscheduler.monitor.board import Publisher
from xdscheduler.registry import make_policy
from xdscheduler.runtime.gateway import ActorDomains
from xdscheduler.runtime.journal import Journal
from xdscheduler.runtime.ledger import Ledger
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs
from xdscheduler.sim.measurement import Results


class RealTimeClock:
    """Holds each event back until its time has come on the wall clock (`speed` simulated
    seconds per second), and tells `on_tick` (the board's publisher) after each wait."""

    def __init__(self, speed: float = 1.0, on_tick=None):
        self.speed, self.on_tick = speed, on_tick
        self.start: float | None = None  # wall time of simulated 0, set by the first event

    def __call__(self, t: float) -> None:
        if self.start is None:
            self.start = time.monotonic() - t / self.speed
        delay = self.start + t / self.speed - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if self.on_tick:
            self.on_tick()


@ray.remote(num_cpus=0, max_restarts=0)
class Controller:
    """One policy's controller: the queue, the view, the decisions, the domain actors."""

    def __init__(
        self,
        inputs: StudyInputs,
        policy: str,
        *,
        realtime: bool = False,
        speed: float = 1.0,
        policy_options: dict | None = None,
        journal: str | None = None,
        ledger: str | None = None,
    ):
        scn = inputs.scn
        self.domains = ActorDomains(scn, inputs.dynamics)
        clock = RealTimeClock(speed) if realtime else None
        self.engine = Engine(
            inputs,
            make_policy(policy, scn.weights, policy_options),
            self.domains,
            clock=clock,
            tick_s=max(1.0, speed) if realtime else None,
        )
        # A live study shows itself on the board (the dashboard and /metrics read it there).
        self.publish = Publisher(self.engine, policy) if realtime else None
        if clock:
            clock.on_tick = self.publish
        self.ledger = Ledger(ledger, policy) if ledger else None
        if self.ledger:  # before any replay: records made again are kept once
            self.engine.recorder.meter_to(self.ledger.record)
        self.journal = Journal(journal, policy) if journal else None
        # A controller before this one died having reached there: the first advance runs there
        # again (there, not here, a log that differs comes back to the driver as an error).
        self.replay_to = None
        if self.journal:
            # re-made decisions are checked on the log
            self.engine.recorder.subscribe(self.journal.record)
            self.replay_to = self.journal.reached()
        self.started = time.perf_counter()

    def advance(self, until_s: float) -> dict:
        """Run the study up to simulated time `until_s`; say where it stands."""
        if self.replay_to is not None:
            self.engine.replay(self.replay_to)
            self.replay_to = None
        if not self.engine.finished:
            self.engine.run(until_s=until_s)
            if self.journal:
                self.journal.checkpoint(self.engine)
        if self.publish:
            self.publish(force=True)
        return self.engine.status()

    def status(self) -> dict:
        return self.engine.status()

    def results(self) -> Results:
        res = self.engine.results()
        res.wall_s = time.perf_counter() - self.started
        return res

    def domain_actors(self) -> list:
        return list(self.domains.actors)
