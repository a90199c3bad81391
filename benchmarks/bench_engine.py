"""The study engine's own cost: finding the next event from its queue against rescanning every job.

Run: python -m benchmarks.bench_engine [--hours 24] [--seed 7]
Baseline, in the same run: the same engine finding each next event the old way, by computing
every running job's finish, pause end, switch and relocation times at every event. Both run the
default scenario's workload under the cheap single-domain policy (so the engine, not the plan
search, is what is timed) and under the planner, and must give the same study.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from benchmarks._table import print_table
from xdscheduler.registry import make_policy
from xdscheduler.scenario import default_scenario_path, load_scenario
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs
from xdscheduler.sim.reconfig import Phase


class Rescanning(Engine):
    """The engine before its event queue: every job looked at to find the next event."""

    def next_event(self) -> float:
        times = [self.next_sample_s]
        if self.faults:
            times.append(self.faults.next_time())
        if self.pending:
            times.append(self.pending[0].arrival_s)
        for r in self.runs:
            if not r.running:
                continue
            if r.rate > 0:
                times.append(max(self.now, r.paused_until) + r.left / r.rate)
            if r.paused_until > self.now:
                times.append(r.paused_until)
            if r.next is not None:
                times.append(r.switch_at)
            m = self.replanning.moving.get(r.name)
            if m is not None and m.phase in (Phase.WAIT, Phase.COPY):
                times.append(m.at_s)
        fresh = self.last_step_s != self.now
        later = [x for x in times if x > self.now or (fresh and x == self.now)]
        return min(later) if later else math.inf


class Counting(Engine):
    """An engine counting the events it steps; `counted` puts it before another engine."""

    steps = 0

    def _before_decisions(self, t: float) -> None:
        self.steps += 1
        super()._before_decisions(t)


def counted(engine: type[Engine]) -> type[Counting]:
    """The engine, counting the events it steps."""
    base: Any = engine  # a class known only when this runs

    class Counted(Counting, base):
        pass

    return Counted


def timed(cls, policy: str, hours: float, seed: int) -> tuple[float, int, list]:
    """Seconds to run the study, events stepped, and every job's (start, end)."""
    scn = load_scenario(default_scenario_path())
    eng = counted(cls)(StudyInputs.drawn(scn, hours, seed), make_policy(policy, scn.weights))
    start = time.perf_counter()
    eng.run()
    return time.perf_counter() - start, eng.steps, [(r.start_s, r.end_s) for r in eng.runs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rows = []
    for policy in ("fifo-single-domain", "planner"):
        base_s, base_n, base_jobs = timed(Rescanning, policy, args.hours, args.seed)
        new_s, new_n, new_jobs = timed(Engine, policy, args.hours, args.seed)
        same = all(
            math.isclose(a or 0, b or 0, rel_tol=1e-9)
            for x, y in zip(base_jobs, new_jobs, strict=True)
            for a, b in zip(x, y, strict=True)
        )
        rows.append(
            [
                f"{policy}, rescanning every job (baseline)",
                base_n,
                base_s,
                base_s / base_n * 1e6,
                1.0,
                "",
            ]
        )
        rows.append(
            [
                f"{policy}, event queue",
                new_n,
                new_s,
                new_s / new_n * 1e6,
                new_s / base_s,
                "same study" if same else "DIFFERENT study",
            ]
        )
    print_table(
        f"Study engine, default scenario, {args.hours:g} h of arrivals, seed {args.seed}",
        ["engine", "events", "seconds", "µs per event", "vs baseline", ""],
        rows,
    )


if __name__ == "__main__":
    main()
