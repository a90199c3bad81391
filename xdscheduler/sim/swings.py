"""Load swings and latency rises injected into a study's network, seeded, on top of its own."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from xdscheduler.network.dynamics import Dynamics

EVERY_S = 1800.0  # one injected swing every half hour on average (Poisson)
LOAD_FACTOR = (0.2, 0.5)  # other tenants' share rises or falls by 20-50%
RTT_FACTOR = (1.5, 3.0)  # a link's RTT rises by 50-200%
LASTS_S = (600.0, 3600.0)  # each lasts 10 minutes to an hour


def inject_swings(
    dyn: Dynamics, seed: int, every_s: float = EVERY_S, until_s: float | None = None
) -> tuple[Dynamics, list[dict]]:
    """The dynamics with swings added, alternating load swings of a domain and RTT rises of a
    link at random, and the list of what was injected (kind, where, start, end, factor)."""
    rng = np.random.default_rng(seed)
    load, rtt = dyn.background_load.copy(), dyn.rtt_ms.copy()
    steps, k = load.shape
    end = dyn.times_s[-1] if until_s is None else until_s
    links = np.argwhere(np.triu(dyn.bandwidth_gbps[0] > 0, 1))
    t, out = rng.exponential(every_s), []
    while t < end:
        a = int(t // dyn.step_s)
        b = min(steps, a + max(1, round(rng.uniform(*LASTS_S) / dyn.step_s)))
        where: int | tuple[int, int]  # a domain's load, or a link's RTT
        if not len(links) or rng.random() < 0.5:  # a lone domain has no link to slow
            kind, where = "load", int(rng.integers(k))
            factor = 1 + rng.choice([-1, 1]) * rng.uniform(*LOAD_FACTOR)
            load[a:b, where] *= factor
        else:
            i, j = links[rng.integers(len(links))]
            kind, where, factor = "rtt", (int(i), int(j)), rng.uniform(*RTT_FACTOR)
            rtt[a:b, i, j] *= factor
            rtt[a:b, j, i] *= factor
        out.append(
            {
                "kind": kind,
                "where": where,
                "start_s": a * dyn.step_s,
                "end_s": b * dyn.step_s,
                "factor": float(factor),
            }
        )
        t += rng.exponential(every_s)
    return replace(dyn, background_load=np.clip(load, 0.0, 0.9), rtt_ms=rtt), out
