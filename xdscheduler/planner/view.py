"""What the planner sees: free accelerators per domain and the state of the links between them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from xdscheduler.catalog import Accelerator
from xdscheduler.errors import UserError
from xdscheduler.scenario import Scenario

if TYPE_CHECKING:
    from xdscheduler.planner.placement import Placement


@dataclass(frozen=True)
class DomainView:
    """One domain as the planner sees it now."""

    name: str
    accelerator: Accelerator
    free_gpus: int  # negative when other tenants grew into what this scheduler holds
    scaleup_gbs: float  # per GPU per direction
    scaleout_gbps: float  # per GPU
    price_per_gpu_hour: float
    total_gpus: int = 0  # the domain's size; 0 where unknown
    reserved_gpus: int = 0  # held by tenants this scheduler does not place
    pooled_gpus: int = 0  # held back as the backup pool: only jobs hit by faults take them
    # held by preemptible placements of this scheduler: a placement may take them, and the jobs
    # holding them give them back (`Placement.preemptible`)
    reclaimable_gpus: int = 0
    up: bool = True
    gpus_per_node: int = 0  # the domain's node shape; 0: the accelerator's usual one
    flow_gbps: float = np.inf  # one connection between two of its nodes' accelerators

    @property
    def node_gpus(self) -> int:
        """Accelerators that share one node's scale-up links (NVLink, HCCS)."""
        return self.gpus_per_node or self.accelerator.gpus_per_node

    @property
    def available(self) -> int:
        """Accelerators a new placement can take now."""
        return max(self.free_gpus, 0) if self.up else 0

    @property
    def schedulable(self) -> int:
        """The most this scheduler could hold here if its own jobs all finished (a job asking
        for more than that would wait at the head of a queue for ever)."""
        return self.total_gpus - self.reserved_gpus - self.pooled_gpus


@dataclass(frozen=True)
class ClusterView:
    """Domains and K×K link matrices (bandwidth per direction; 0 where no link)."""

    domains: tuple[DomainView, ...]
    bandwidth_gbps: np.ndarray
    rtt_ms: np.ndarray
    price_per_gb: np.ndarray
    base_bandwidth_gbps: np.ndarray | None = None  # as leased, before fluctuation
    base_rtt_ms: np.ndarray | None = None  # as leased, before spikes
    indicators: np.ndarray | None = None  # K × 12 accepted indicator values, where reported
    # When running jobs are expected to give accelerators back: (time s, domain, count), in
    # time order (what a backfilling scheduler reserves against).
    releases: tuple[tuple[float, int, int], ...] = ()
    # Sustained speed over the model's: per domain of its accelerators' peak and memory
    # bandwidth, per link (K × K) of its bandwidth. A study's truth, or what the policies have
    # learnt from the rates they observe (sim.correction); None: the model as it is.
    speed_factor: np.ndarray | None = None
    goodput_factor: np.ndarray | None = None
    # K × K, true where a link's bandwidth is per node pair (`Link.per_node_pair`); None: none
    per_node_pair: np.ndarray | None = None
    # K × K, what one connection across each link gets (`Link.flow_gbps`); None: no caps
    flow_gbps: np.ndarray | None = None
    # K × K, true where a link is a data centre's own network between its pools (a mixed
    # domain's, `Scenario.site`): timed at its rate, but no WAN traffic; None: none
    fabric: np.ndarray | None = None

    @classmethod
    def from_scenario(cls, scn: Scenario, free_gpus: dict[str, int] | None = None) -> ClusterView:
        free_gpus = free_gpus or {}
        unknown = set(free_gpus) - {d.name for d in scn.domains}
        if unknown:
            raise UserError(f"free GPUs given for unknown domains: {', '.join(sorted(unknown))}")
        domains = []
        for d in scn.domains:
            acc = d.accelerator
            domains.append(
                DomainView(
                    name=d.name,
                    accelerator=acc,
                    free_gpus=free_gpus.get(d.name, d.gpus),
                    scaleup_gbs=(d.intra_node_gbps / 8 if d.intra_node_gbps else acc.scaleup_gbs),
                    scaleout_gbps=d.intra_domain_gbps,
                    price_per_gpu_hour=d.price_per_gpu_hour,
                    total_gpus=d.gpus,
                    gpus_per_node=d.gpus_per_node,
                    flow_gbps=d.flow_gbps or np.inf,
                )
            )
        k = len(domains)
        index = {d.name: i for i, d in enumerate(domains)}
        bw, rtt, price = np.zeros((k, k)), np.zeros((k, k)), np.zeros((k, k))
        per_node, fabric = np.zeros((k, k), dtype=bool), np.zeros((k, k), dtype=bool)
        flow = np.full((k, k), np.inf)
        for link in scn.links:
            i, j = index[link.a], index[link.b]
            bw[i, j] = link.bandwidth_gbps
            bw[j, i] = link.bandwidth_gbps_ba or link.bandwidth_gbps
            rtt[i, j] = rtt[j, i] = link.rtt_ms
            price[i, j] = price[j, i] = link.price_per_gb
            per_node[i, j] = per_node[j, i] = link.per_node_pair
            flow[i, j] = flow[j, i] = link.flow_gbps or np.inf
            fabric[i, j] = fabric[j, i] = scn.site(link.a) == scn.site(link.b)
        return cls(
            tuple(domains),
            bw,
            rtt,
            price,
            bw.copy(),
            rtt.copy(),
            per_node_pair=per_node if per_node.any() else None,
            flow_gbps=flow if np.isfinite(flow).any() else None,
            fabric=fabric if fabric.any() else None,
        )

    def with_free(
        self,
        free_gpus: dict[str, int],
        reserved: dict[str, int] | None = None,
        pooled: dict[str, int] | None = None,
    ) -> ClusterView:
        reserved, pooled = reserved or {}, pooled or {}
        domains = tuple(
            replace(
                d,
                free_gpus=free_gpus.get(d.name, d.free_gpus),
                reserved_gpus=reserved.get(d.name, d.reserved_gpus),
                pooled_gpus=pooled.get(d.name, d.pooled_gpus),
            )
            for d in self.domains
        )
        return replace(self, domains=domains)

    def with_reclaimable(self, held: dict[int, int]) -> ClusterView:
        """The view with `held` (domain index -> count) held by preemptible placements (none
        held: this view, whose domains hold none)."""
        if not held and not any(d.reclaimable_gpus for d in self.domains):
            return self
        domains = tuple(
            replace(d, reclaimable_gpus=held.get(i, 0)) for i, d in enumerate(self.domains)
        )
        return replace(self, domains=domains)

    def reclaiming(self) -> ClusterView:
        """What a placement that may preempt sees: what preemptible placements hold, free (less
        what other tenants grew into: preempting gives back only what is left of it)."""
        if not any(d.reclaimable_gpus for d in self.domains):
            return self
        domains = tuple(
            replace(d, free_gpus=max(d.free_gpus + d.reclaimable_gpus, 0), reclaimable_gpus=0)
            if d.up
            else d
            for d in self.domains
        )
        return replace(self, domains=domains)

    def adjust_free(self, delta: dict[int, int]) -> ClusterView:
        """Free accelerators changed by `delta` (domain index -> +given back / -taken)."""
        domains = tuple(
            replace(d, free_gpus=d.free_gpus + delta.get(i, 0)) for i, d in enumerate(self.domains)
        )
        return replace(self, domains=domains)

    def with_links(self, bandwidth_gbps: np.ndarray, rtt_ms: np.ndarray) -> ClusterView:
        return replace(
            self,
            bandwidth_gbps=np.asarray(bandwidth_gbps, dtype=float),
            rtt_ms=np.asarray(rtt_ms, dtype=float),
        )

    def less_traffic(self, gbps: np.ndarray, senders: np.ndarray) -> ClusterView:
        """The links as a new sender finds them while others send `gbps` over them (K × K, per
        direction; `senders`: how many): what they leave, and at least an equal share of the
        link, which TCP's fairness gives each of n + 1 senders however much the others want."""
        if not senders.any():
            return self
        bw = self.bandwidth_gbps
        return replace(self, bandwidth_gbps=np.maximum(bw - gbps, bw / (senders + 1)))

    def with_factors(
        self, speed: np.ndarray | None = None, goodput: np.ndarray | None = None
    ) -> ClusterView:
        """The view with these speed and goodput factors (None: the model's own)."""
        return replace(self, speed_factor=speed, goodput_factor=goodput)

    @property
    def speed(self) -> np.ndarray:
        """Each domain's speed factor (1 where none is known)."""
        return np.ones(len(self.domains)) if self.speed_factor is None else self.speed_factor

    @property
    def goodput_gbps(self) -> np.ndarray:
        """The bandwidth of each link now, times its goodput factor where one is known."""
        bw = self.bandwidth_gbps
        return bw if self.goodput_factor is None else bw * self.goodput_factor

    def with_releases(self, releases: list[tuple[float, int, int]]) -> ClusterView:
        return replace(self, releases=tuple(sorted(releases)))

    def freeing(self, d: int, have: int) -> Iterator[tuple[float, int]]:
        """When the running jobs of domain `d` are expected to end, soonest first, each with
        what the domain holds free then, counted from `have` now; none where it is down."""
        if not self.domains[d].up:
            return
        for t, i, gpus in self.releases:
            if i == d:
                have += gpus
                yield t, have

    def with_indicators(self, indicators: np.ndarray) -> ClusterView:
        return replace(self, indicators=np.asarray(indicators, dtype=float))

    def with_down(self, down: set[str]) -> ClusterView:
        """Domains that stopped answering: nothing is free there and no link reaches them."""
        idx = [i for i, d in enumerate(self.domains) if d.name in down]
        bw = self.bandwidth_gbps.copy()
        bw[idx, :] = 0.0
        bw[:, idx] = 0.0
        domains = tuple(
            replace(d, free_gpus=0, up=False) if d.name in down else d for d in self.domains
        )
        return replace(self, domains=domains, bandwidth_gbps=bw)

    @property
    def leased(self) -> tuple[np.ndarray, np.ndarray]:
        """Bandwidth and RTT of the links as leased (as now where that is not known)."""
        bw = (
            self.base_bandwidth_gbps
            if self.base_bandwidth_gbps is not None
            else (self.bandwidth_gbps)
        )
        return bw, self.base_rtt_ms if self.base_rtt_ms is not None else self.rtt_ms

    def empty(self) -> ClusterView:
        """The same domains and links as leased, every accelerator free and every domain up, at
        the model's speeds (the yardstick of every job's efficiency stays the same)."""
        bw, rtt = self.leased
        domains = tuple(
            replace(d, free_gpus=d.total_gpus, reserved_gpus=0, up=True) for d in self.domains
        )
        return replace(
            self,
            domains=domains,
            bandwidth_gbps=bw,
            rtt_ms=rtt,
            indicators=None,
            speed_factor=None,
            goodput_factor=None,
        )

    @cached_property
    def peak_tflops(self) -> np.ndarray:
        """16-bit peak of one accelerator of each domain (a view is immutable: computed once)."""
        return np.array([d.accelerator.half_tflops for d in self.domains])

    @property
    def mean_gpu_price(self) -> float:
        """$ per accelerator-hour over the whole cluster, each domain weighted by its size."""
        return sum(d.price_per_gpu_hour * d.total_gpus for d in self.domains) / sum(
            d.total_gpus for d in self.domains
        )

    def over_wan(self, domains) -> bool:
        """Whether traffic among these domains (indices) crosses the WAN: they are not all
        pools of one data centre."""
        return any(
            self.fabric is None or not self.fabric[a, b]
            for a, b in itertools.combinations(domains, 2)
        )

    def wan_links(self, p: Placement) -> list[tuple[int, int]]:
        """The WAN links p's traffic crosses: its links less the hops between pools of one data
        centre, which ride its own network (timed all the same: `Placement.links`)."""
        if self.fabric is None:  # no mixed domain: every link is the WAN's
            return p.links
        return [ab for ab in p.links if self.over_wan(ab)]

    def same_sites(self, domains) -> set[int]:
        """These domains (indices) and every other pool of their data centres."""
        if self.fabric is None:
            return set(domains)
        return set(domains) | {int(j) for i in domains for j in np.flatnonzero(self.fabric[i])}

    def largest_site(self, per_domain) -> float:
        """The most of `per_domain` (a figure per domain) one data centre holds: a domain's, or
        a mixed domain's pools' together."""
        return max(
            (sum(per_domain[j] for j in self.same_sites([i])) for i in range(len(per_domain))),
            default=0,
        )

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.domains]
