"""The WAN links the study's running jobs share.

Jobs that cross the same link share its bandwidth: each finds the link as the others leave it
(`ClusterView.less_traffic`), so a job's speed depends on what else runs over its links, and a
policy places new jobs on the links as running ones leave them. A job sends its average rate,
its WAN bytes a step over its step time, spread evenly over the hops it sends over: each hop of
a ring one way, each of a pipeline or a pair both ways. Paused jobs send nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from xdscheduler.planner.placement import Placement
from xdscheduler.planner.view import ClusterView
from xdscheduler.sim.jobs import JobRun


def hops(p: Placement, view: ClusterView) -> list[tuple[int, int]]:
    """The directed WAN hops a job on p sends over (none inside one site)."""
    links = view.wan_links(p)
    return links if p.ring else links + [(b, a) for a, b in links]


def sent_gbps(r: JobRun, now_s: float) -> float:
    """What job r sends over the WAN now, in Gbit/s, all its hops together."""
    if r.paused_until > now_s:
        return 0.0
    return r.rate * r.bytes_per_token * 8 / 1e9


class Traffic:
    """What the running jobs send over each directed WAN link, and how many send there."""

    def __init__(self, jobs: Iterable[JobRun], view: ClusterView, now_s: float):
        k = len(view.domains)
        self.gbps, self.senders = np.zeros((k, k)), np.zeros((k, k))
        self.own: dict[str, tuple[list[tuple[int, int]], float]] = {}
        for r in jobs:
            if len(r.placed.domains) < 2:  # most jobs: quicker to ask than to list no hops
                continue
            mine, rate = hops(r.placed, view), sent_gbps(r, now_s)
            if not mine or rate <= 0:
                continue
            self.own[r.name] = (mine, rate / len(mine))
            for a, b in mine:
                self.gbps[a, b] += rate / len(mine)
                self.senders[a, b] += 1

    def without(self, name: str | None) -> tuple[np.ndarray, np.ndarray]:
        """The traffic of every job but `name`'s (None: of all)."""
        if name is None or name not in self.own:
            return self.gbps, self.senders
        gbps, senders = self.gbps.copy(), self.senders.copy()
        mine, rate = self.own[name]
        for a, b in mine:
            gbps[a, b] -= rate
            senders[a, b] -= 1
        return np.maximum(gbps, 0.0), senders

    def samples(self, t: float, view: ClusterView) -> list[dict]:
        """One row per WAN link the jobs send over now: its busier direction's Gbit/s, that
        as a share of the direction's bandwidth, and the most jobs sending one way."""
        rows = []
        for a, b in zip(*np.nonzero(np.triu(self.senders + self.senders.T)), strict=True):
            busier = (a, b) if self.gbps[a, b] >= self.gbps[b, a] else (b, a)
            bandwidth = view.bandwidth_gbps[busier]
            rows.append(
                {
                    "time_s": t,
                    "link": f"{view.domains[a].name}-{view.domains[b].name}",
                    "gbps": float(self.gbps[busier]),
                    "share": float(self.gbps[busier] / bandwidth) if bandwidth > 0 else 0.0,
                    "jobs": int(max(self.senders[a, b], self.senders[b, a])),
                }
            )
        return rows

    def seen_by(self, r: JobRun, p: Placement, view: ClusterView) -> ClusterView:
        """The view as job r on p finds the links: less what the others send (the view itself
        where no other job sends over p's)."""
        gbps, senders = self.without(r.name)
        if not any(senders[a, b] for a, b in hops(p, view)):
            return view
        return view.less_traffic(gbps, senders)
