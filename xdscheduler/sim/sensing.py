"""Perception in a study: the domains' reports become the view the policies decide on.

Each event the domains are asked for their reports. Samples that fail their checks are
rejected and counted; the rest update the resource graph. A domain that does not answer is
down from then on (its jobs are lost with it) until it reports again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from xdscheduler.perception.graph import ResourceGraph
from xdscheduler.planner.view import ClusterView
from xdscheduler.sim.domain import accepted


@dataclass(frozen=True)
class Observation:
    view: ClusterView
    lost: list[str]  # domains seen down for the first time, in the scenario's order


@dataclass
class Sensing:
    """What the reports have said so far."""

    names: list[str]
    graph: ResourceGraph = field(init=False)
    down: dict[str, float] = field(default_factory=dict)  # domains down now, since when
    outages: list[tuple[str, float, float | None]] = field(default_factory=list)  # and back
    rejected: int = 0  # samples that failed their checks

    def __post_init__(self):
        self.graph = ResourceGraph(self.names)

    def observe(
        self,
        domains,
        base: ClusterView,
        t: float,
        cut: set[tuple[int, int]],
        held_back: dict[str, int] | None,
    ) -> Observation:
        """The view from every domain's report now: free and reserved accelerators, links,
        indicators; `cut` links carry nothing; `held_back` accelerators (backup pools, holds for
        coming jobs) are free for no placement."""
        reports = domains.reports(t)
        free, reserved, lost = {}, {}, []
        k = len(self.names)
        bw, rtt = np.zeros((k, k)), np.zeros((k, k))
        index = {n: i for i, n in enumerate(self.names)}
        for i, (name, report) in enumerate(zip(self.names, reports, strict=True)):
            if report is None:
                self.graph.mark_down(name, t)
                if name not in self.down:
                    self.down[name] = t
                    self.outages.append((name, t, None))
                    lost.append(name)
                continue
            if name in self.down:  # back (an outage ended, or its actor was replaced)
                self.outages = [
                    (n, a, t if n == name and b is None else b) for n, a, b in self.outages
                ]
                del self.down[name]
            good, rejected = accepted(report, t)
            self.rejected += len(rejected)
            self.graph.update(report, good)
            free[name], reserved[name] = report.free_gpus, report.reserved_gpus
            for other, (gbps, ms) in report.links.items():  # each end reports its outbound
                bw[i, index[other]], rtt[i, index[other]] = gbps, ms
        for a, b in cut:
            bw[a, b] = bw[b, a] = 0.0
        if held_back is not None:
            free = {n: f - held_back.get(n, 0) for n, f in free.items()}
        view = base.with_free(free, reserved, held_back).with_links(bw, np.maximum(rtt, rtt.T))
        return Observation(view.with_down(set(self.down)).with_indicators(self.graph.values), lost)

    def first_down(self) -> dict[str, float]:
        """Each domain that went down, and when it first did."""
        out: dict[str, float] = {}
        for name, start, _ in self.outages:
            out.setdefault(name, start)
        return out
