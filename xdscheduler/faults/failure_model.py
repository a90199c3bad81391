"""Fault events over time for a cluster, at rates taken from published reports where they exist.

Sources (numbers quoted only where we are sure of them):
- Llama 3 (Dubey et al., "The Llama 3 Herd of Models", 2024, §3.3.4): 466 job interruptions in a
  54-day snapshot of pre-training on 16,384 H100 GPUs, 419 of them unexpected, about 78% of those
  attributed to confirmed or suspected hardware issues; faulty GPUs 30.1% and GPU HBM3 memory
  17.2% of the unexpected ones; network switch/cable 8.4%.
- OPT-175B logbook (Zhang et al., "OPT: Open Pre-trained Transformer Language Models", 2022):
  on 992 A100s over about two months, at least 35 manual restarts and over 100 hosts cycled out.
Domain outages, WAN link cuts and stragglers have no comparable public per-hour figure for
training clusters; their rates below are stated assumptions, kept as named constants.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

HOUR = 3600.0
DAY = 24 * HOUR

# Llama 3 405B: 419 unexpected interruptions / (54 days × 16,384 GPUs).
LLAMA3_UNEXPECTED = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_HARDWARE_SHARE = 0.78
GPU_FAILURE_PER_HOUR = LLAMA3_UNEXPECTED / (LLAMA3_DAYS * DAY / HOUR * LLAMA3_GPUS)  # ≈ 2.0e-5
GPUS_PER_NODE = 8
NODE_FAILURE_PER_HOUR = GPU_FAILURE_PER_HOUR * GPUS_PER_NODE  # node MTBF ≈ 6,300 h ≈ 264 days
# Llama 3: faulty GPU 30.1% + HBM3 17.2% of unexpected interruptions are GPU-side errors that show
# in logs (Xid/ECC) and may leave the host up; the rest we treat as whole-node crashes.
GPU_ERROR_SHARE = 0.301 + 0.172
NODE_REPAIR_S = (0.5 * HOUR, 4 * HOUR)  # assumption: cordon, reboot or swap

# Assumptions (no public per-hour figure for training clusters):
DOMAIN_OUTAGE_PER_HOUR = HOUR / (90 * DAY)  # a whole domain (site power/network) once a quarter
DOMAIN_OUTAGE_S = (10 * 60.0, 2 * HOUR)
LINK_CUT_PER_HOUR = HOUR / (30 * DAY)  # a WAN path down about monthly, rerouted in minutes-hours
LINK_CUT_S = (5 * 60.0, HOUR)
STRAGGLER_PER_NODE_HOUR = 4 * NODE_FAILURE_PER_HOUR  # slow nodes (thermal, PCIe, noisy host)
STRAGGLER_S = (60.0, HOUR)
STRAGGLER_SLOWDOWN = (1.3, 3.0)  # step-time multiplier of a slow node

KINDS = ("node_crash", "gpu_error", "domain_outage", "link_cut", "straggler", "actor_crash")


@dataclass(frozen=True)
class FaultEvent:
    """One fault: what, where, from when, for how long; slowdown only for stragglers."""

    time_s: float
    kind: str
    target: str  # node "domain/n3", domain "domain", link "a|b"
    duration_s: float
    slowdown: float = 1.0

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Cluster:
    """The shape faults are drawn over: nodes per domain and the WAN links."""

    nodes: dict[str, int]
    links: tuple[tuple[str, str], ...] = ()

    def node_ids(self) -> list[str]:
        return [node_id(d, i) for d, n in self.nodes.items() for i in range(n)]

    @classmethod
    def of_scenario(cls, scn) -> Cluster:
        """Nodes (accelerators / 8) per data centre as written and the WAN lines between them,
        of a Scenario: a mixed domain's pools fail as one site, and a line serving several of
        its pools is one line (`on_domains` puts each fault on the domains it hits)."""
        nodes: dict[str, int] = {}
        for d in scn.domains:
            site = scn.site(d.name)
            nodes[site] = nodes.get(site, 0) + _nodes(d)
        lines = {
            line: (scn.site(lk.a), scn.site(lk.b))
            for lk in scn.links
            if len(line := scn.line(lk.a, lk.b)) == 2
        }
        return cls(nodes, tuple(lines.values()))


def _nodes(domain) -> int:
    return max(1, -(-domain.gpus // GPUS_PER_NODE))


def on_domains(events: list[FaultEvent], scn) -> list[FaultEvent]:
    """Faults drawn per site, each on the domains it hits: a node by its place among its
    site's pools' nodes, an outage on every pool, a cut line on each pool pair it joins."""
    sites = scn.sites
    if len(sites) == len(scn.domains):  # no mixed domain: every site is one domain
        return events
    nodes = {d.name: _nodes(d) for d in scn.domains}
    out = []
    for e in events:
        if e.kind == "domain_outage":
            out += [replace(e, target=pool) for pool in sites[e.target]]
        elif e.kind == "link_cut":
            ends = frozenset(e.target.split("|"))
            out += [
                replace(e, target=link_id(lk.a, lk.b))
                for lk in scn.links
                if scn.line(lk.a, lk.b) == ends
            ]
        elif "/" in e.target:  # a node: n-th of its site, counted over the pools in order
            site, n = e.target.split("/n")
            at = int(n)
            for pool in sites[site]:
                if at < nodes[pool]:
                    out.append(replace(e, target=node_id(pool, at)))
                    break
                at -= nodes[pool]
        else:
            out.append(e)
    return out


def node_id(domain: str, index: int) -> str:
    return f"{domain}/n{index}"


def link_id(a: str, b: str) -> str:
    return "|".join(sorted((a, b)))


@dataclass(frozen=True)
class FailureModel:
    """Per-hour rates; scale multiplies them all (stress studies use scale ≫ 1)."""

    node_per_hour: float = NODE_FAILURE_PER_HOUR
    gpu_error_share: float = GPU_ERROR_SHARE
    domain_per_hour: float = DOMAIN_OUTAGE_PER_HOUR
    link_per_hour: float = LINK_CUT_PER_HOUR
    straggler_per_node_hour: float = STRAGGLER_PER_NODE_HOUR
    scale: float = 1.0

    def generate(self, cluster: Cluster, horizon_s: float, seed: int) -> list[FaultEvent]:
        """Poisson arrivals per target over [0, horizon_s), sorted by time."""
        rng = np.random.default_rng(seed)
        nodes = cluster.node_ids()
        links = [link_id(a, b) for a, b in cluster.links]
        hours = horizon_s / HOUR * self.scale
        crash = self.node_per_hour * (1 - self.gpu_error_share)
        draws = [
            ("node_crash", nodes, crash, NODE_REPAIR_S, None),
            ("gpu_error", nodes, self.node_per_hour * self.gpu_error_share, NODE_REPAIR_S, None),
            ("domain_outage", list(cluster.nodes), self.domain_per_hour, DOMAIN_OUTAGE_S, None),
            ("link_cut", links, self.link_per_hour, LINK_CUT_S, None),
            ("straggler", nodes, self.straggler_per_node_hour, STRAGGLER_S, STRAGGLER_SLOWDOWN),
        ]
        events = []
        for kind, targets, rate, span, slow in draws:
            events += _poisson_events(rng, kind, targets, rate * hours, horizon_s, span, slow)
        return sorted(events, key=lambda e: (e.time_s, e.target))

    def job_failure_rate_per_s(self, nodes: int) -> float:
        """Interruptions per second of a job on `nodes` nodes (any node fault stops it)."""
        return nodes * self.node_per_hour * self.scale / HOUR


def _poisson_events(rng, kind, targets, mean_count, horizon_s, span, slow) -> list[FaultEvent]:
    if not targets or mean_count <= 0:
        return []
    counts = rng.poisson(mean_count, len(targets))
    who = np.repeat(np.arange(len(targets)), counts)
    times = rng.uniform(0, horizon_s, len(who))
    # log-uniform durations: repairs span orders of magnitude
    durations = np.exp(rng.uniform(np.log(span[0]), np.log(span[1]), len(who)))
    slowdown = rng.uniform(*slow, len(who)) if slow else np.ones(len(who))
    return [
        FaultEvent(float(t), kind, targets[i], float(d), float(s))
        for i, t, d, s in zip(who, times, durations, slowdown, strict=True)
    ]
