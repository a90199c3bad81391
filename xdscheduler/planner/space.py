"""The plan space: placements onto domains × parallel plans, enumerated as arrays.

A placement puts a job in one domain, splits its pipeline stages over a chain of domains
(the WAN carries activations at stage boundaries), or splits its data-parallel replicas
over a set of domains (the WAN carries gradients, every step or every H steps with
DiLoCo). Stages and replicas are shared out in proportion to free accelerators, so every
placement has exactly one split.

Domain sets: every set of the few largest domains, exactly; beyond them (any number of
domains, up to every one the cluster has), the prefixes of chains grown from each of the
largest along the widest link, so the space grows with K², not 2^K.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field, replace

import numpy as np

from xdscheduler.catalog import ModelArch, accelerator_code
from xdscheduler.costmodel.constants import DEFAULT, Calibration
from xdscheduler.costmodel.layers import MeasuredLayers
from xdscheduler.costmodel.memory import memory_gib
from xdscheduler.costmodel.messages import MessageCurve
from xdscheduler.costmodel.plan import DTYPES, Hardware, PlanBatch, Stack, WanUse
from xdscheduler.planner.view import ClusterView

SINGLE, PIPELINE, DATA = "single", "pipeline", "data"
RING_EXACT = 6  # members of a data placement up to which every ring order is tried: 5! = 120
# Cheapest first: the first rung whose memory fits is the one a plan uses.
MEMORY_LADDER = ((1, 0), (1, 1), (1, 2), (3, 2))  # (zero stage, recompute index)
SHARDED_LADDER = ((3, 0), (3, 1), (3, 2))  # FSDP shards every state, whatever fits
PLAIN_LADDER = ((0, 0),)  # every rank holds everything, nothing recomputed


def memory_ladder(stack: Stack) -> tuple[tuple[int, int], ...]:
    if stack.sharded:
        return SHARDED_LADDER
    return MEMORY_LADDER if stack.memory_savers else PLAIN_LADDER


@dataclass(frozen=True)
class SearchOptions:
    """Which plans the search considers."""

    max_domains: int | None = None
    """Most domains one job may span; None: as many as the cluster has."""
    one_site: bool = False
    """Spreads only over the pools of one data centre (a mixed domain's), never the WAN."""
    combo_domains: int = 5
    """Every set of this many largest domains is searched; beyond them, grown chains."""
    tensor: tuple[int, ...] = (1, 2, 4, 8)
    max_pipeline: int = 32
    context: tuple[int, ...] = (1, 2, 4)
    """Context-parallel sizes, used for sequences of 8k tokens and longer."""
    virtual: tuple[int, ...] = (1, 2, 4)
    micro_batch: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    balance: bool = True
    """Across domains of different accelerators, layers (pipeline) or micro-batches
    (replicas) in proportion to speed, not as many on each: the slowest no longer sets the
    pace of all."""
    uneven: bool = True
    """Also pipeline degrees that do not divide the layers (the ends lighter) and
    data-parallel degrees that do not divide the global batch (some replicas a sample more):
    for each stage or replica load, the fewest stages or replicas that reach it."""
    diloco_h: tuple[int, ...] = (0,)
    """Outer-sync intervals for cross-domain data parallelism; 0 = synchronous every step."""
    kinds: tuple[str, ...] = ("single", "pipeline", "data")
    """Placements considered: inside one domain, stages over domains, replicas over domains."""
    dtype: str = "bf16"
    stack: Stack = field(default_factory=Stack)
    calibration: Calibration = DEFAULT
    """The step-time model's constants: the shipped ones, or a profile's (`xds calibrate`)."""
    layers: tuple[MeasuredLayers, ...] = ()
    """Measured layer profiles (`xds layers`): their times replace the roofline's for the
    models, accelerators, precisions, TP degrees and micro-batches they cover."""
    network: MessageCurve | None = None
    """A measured network curve (`xds layers import-network`): the rate a flat ring's
    messages get by their size; None: NCCL's step latency, then the connection's rate."""


@dataclass(frozen=True)
class Placements:
    """P placements as arrays; domain slots padded with -1."""

    kind: np.ndarray  # str, (P,)
    domains: np.ndarray  # int, (P, k_max)
    hardware: Hardware  # arrays of (P,): the slowest member of each placement
    wan: WanUse  # arrays of (P,)
    wan_price_per_gb: np.ndarray  # mean price over the WAN links the placement's traffic uses

    def __len__(self) -> int:
        return len(self.kind)

    def take(self, idx: np.ndarray) -> Placements:
        return Placements(
            self.kind[idx],
            self.domains[idx],
            take_rows(self.hardware, idx),
            take_rows(self.wan, idx),
            self.wan_price_per_gb[idx],
        )


def take_rows(arrays, idx: np.ndarray):
    """The same dataclass of per-placement arrays, rows `idx` (scalars stay as they are)."""
    return type(arrays)(
        **{k: np.asarray(v)[idx] if np.ndim(v) else v for k, v in arrays.__dict__.items()}
    )


def even_grid(opts: SearchOptions) -> SearchOptions:
    """The even plans of `opts`: degrees that divide layers and batch, a few micro-batch sizes,
    as many layers or micro-batches on every domain (what studies search, and the first pass
    of a large search)."""
    return replace(opts, uneven=False, balance=False, micro_batch=(1, 2, 4), virtual=(1, 2))


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _degrees(n: int, limit: int, uneven: bool) -> list[int]:
    """Ways to split n units (layers, samples) up to `limit` ways: the divisors of n, and where
    uneven splits are allowed, for each largest part k the fewest parts that reach it,
    ceil(n/k) (more parts with the same largest one only cost more)."""
    if not uneven:
        return _divisors(n, limit)
    return sorted({-(-n // k) for k in range(1, n + 1)} & set(range(1, min(n, limit) + 1)))


def placements(
    view: ClusterView, opts: SearchOptions, gpus_min: int, gpus_max: int | None = None
) -> Placements:
    """Every single-domain placement, and multi-domain ones (see the module's docstring) that
    hold at least `gpus_min` and need every member to reach `gpus_max`: a domain more only adds
    WAN hops to a job that cannot use its accelerators."""
    free = np.array([d.available for d in view.domains])
    # Domains alike in every way the objective sees give the same single-domain plans: keep
    # one of each kind (the first), so 64 domains of 8 types search like 8.
    alike: dict[tuple, int] = {}  # what the objective sees of a domain -> the first such
    speed = view.speed
    for i, d in enumerate(view.domains):
        key = (
            d.accelerator.name,
            free[i],
            d.scaleup_gbs,
            d.scaleout_gbps,
            d.price_per_gpu_hour,
            speed[i],
            d.node_gpus,
        )
        alike.setdefault(key, i)
    singles = [(SINGLE, (i,)) for i in sorted(alike.values()) if free[i] > 0]
    singles = singles if SINGLE in opts.kinds else []
    limit = min(opts.max_domains or len(free), len(free))
    by_size = sorted(np.flatnonzero(free > 0).tolist(), key=lambda i: -free[i])
    big = by_size[: opts.combo_domains]
    sets = [m for size in range(2, limit + 1) for m in itertools.combinations(sorted(big), size)]
    chains = [c for m in sets for c in _chains(m)]
    grown = [g for seed in big for g in _grown(view, free, int(seed), limit, gpus_max)]
    grown += _largest(view, by_size, free, limit, gpus_max)
    if gpus_max is not None:
        sets = [m for m in sets if free[list(m)].sum() - free[list(m)].min() < gpus_max]
        chains = [c for c in chains if free[list(c)].sum() - free[list(c)].min() < gpus_max]
    sets = list(dict.fromkeys(sets + [tuple(sorted(g)) for g in grown]))
    chains = list(dict.fromkeys(chains + [min(g, g[::-1]) for g in grown]))
    combos = []
    if DATA in opts.kinds:
        combos += [
            (DATA, m) for m in sets if free[list(m)].sum() >= gpus_min and _connected(view, m)
        ]
    if PIPELINE in opts.kinds:
        combos += [
            (PIPELINE, c)
            for c in chains
            if free[list(c)].sum() >= gpus_min
            and all(view.bandwidth_gbps[a, b] > 0 for a, b in itertools.pairwise(c))
        ]
    if opts.one_site:
        combos = [(k, m) for k, m in combos if not view.over_wan(m)]
    rows = singles + combos
    width = max((len(m) for _, m in rows), default=1)
    doms = np.full((len(rows), width), -1)
    for r, (_, members) in enumerate(rows):
        doms[r, : len(members)] = members
    kind = np.array([kind for kind, _ in rows], dtype=object)
    rtt_s = view.rtt_ms / 1000.0
    doms = in_rings(view.goodput_gbps, rtt_s, doms, (doms >= 0).sum(axis=1), kind == DATA)
    return describe_placements(view, kind, doms)


def _largest(
    view: ClusterView, by_size: list[int], free: np.ndarray, limit: int, gpus_max: int | None
) -> list[tuple[int, ...]]:
    """The k largest domains as a chain (grown from the largest along the widest links among
    them; left out where that walk cannot reach them all), for each k from 2 until they hold
    `gpus_max`: the set a giant needs, which chains grown over every domain miss where small
    ones hang on wide links (a data centre's pools of other accelerators, on its own network)."""
    out: list[tuple[int, ...]] = []
    for k in range(2, min(limit, len(by_size)) + 1):
        among = np.zeros_like(free)
        among[by_size[:k]] = free[by_size[:k]]
        walk = _grown(view, among, by_size[0], k, None)
        if walk and len(walk[-1]) == k:
            out.append(walk[-1])
        if among.sum() >= (gpus_max or np.inf):
            break
    return out


def _grown(
    view: ClusterView, free: np.ndarray, seed: int, limit: int, gpus_max: int | None
) -> list[tuple[int, ...]]:
    """The chains of 2 to `limit` domains grown from `seed`, each adding the free domain with
    the widest link (both ways) to the last one taken, until they hold `gpus_max`."""
    bw = np.minimum(view.bandwidth_gbps, view.bandwidth_gbps.T)
    chain, out = [seed], []
    left = free > 0
    left[seed] = False
    while len(chain) < limit and left.any() and free[chain].sum() < (gpus_max or np.inf):
        reach = np.where(left, bw[chain[-1]], 0.0)
        if reach.max() <= 0:
            break
        nxt = int(np.argmax(reach))
        chain.append(nxt)
        left[nxt] = False
        out.append(tuple(chain))
    return out


def _connected(view: ClusterView, members) -> bool:
    return all(
        view.bandwidth_gbps[a, b] > 0 and view.bandwidth_gbps[b, a] > 0
        for a, b in itertools.combinations(members, 2)
    )


def _chains(members: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Stage orders that differ: a chain and its reverse carry the same traffic. (Their fills
    differ where the domains hold unlike numbers of stages or the crossings unlike speeds: on
    the pipelines `bench_planner` picks over four to nine domains the reverse steps -0.08% to
    +1.34% apart. The search times one.)"""
    return [p for p in itertools.permutations(members) if p[0] < p[-1]]


def domain_speeds(view: ClusterView) -> dict[str, np.ndarray]:
    """Per domain, the Hardware fields a faster accelerator does faster, at the view's speed
    factors: the peaks (0 where the catalog rates none) and memory bandwidth."""
    accs = [d.accelerator for d in view.domains]
    rated = {
        "peak_tflops": [a.half_tflops for a in accs],
        "peak_fp8_tflops": [a.fp8_tflops or 0.0 for a in accs],
        "peak_tf32_tflops": [a.tf32_tflops or 0.0 for a in accs],
        "peak_fp32_tflops": [a.fp32_tflops or 0.0 for a in accs],
        "memory_gbs": [a.memory_gbs for a in accs],
    }
    return {k: np.asarray(v, dtype=float) * view.speed for k, v in rated.items()}


def describe_placements(view: ClusterView, kind: np.ndarray, doms: np.ndarray) -> Placements:
    """The hardware and WAN use of each placement: its slowest member and narrowest links, at
    the view's speed and goodput factors; a data placement's ring visits its members in the
    order given (`in_rings` orders the search's), as a running job's ranks do."""
    wan, wan_price = _wan_use(view, kind, doms)
    return Placements(kind, doms, _slowest_member(view, doms), wan, wan_price)


def _slowest_member(view: ClusterView, doms: np.ndarray) -> Hardware:
    """Each placement's hardware: its slowest member's, at the view's speed; the accelerator's
    code where all members have one kind (-1: mixed), and each member's."""
    accs = [d.accelerator for d in view.domains]
    valid = doms >= 0
    safe = np.where(valid, doms, 0)

    def slowest(values, fill=np.inf):
        arr = np.asarray(values, dtype=float)[safe]
        return np.where(valid, arr, fill).min(axis=1)

    code = np.array([accelerator_code(a.name) for a in accs], dtype=float)[safe]
    alike = np.ptp(np.where(valid, code, code[:, :1]), axis=1) == 0
    return Hardware(
        **{k: slowest(v) for k, v in domain_speeds(view).items()},
        memory_gib=slowest([a.memory_gib for a in accs]),
        scaleup_gbs=slowest([d.scaleup_gbs for d in view.domains]),
        scaleout_gbps=slowest([d.scaleout_gbps for d in view.domains]),
        gpus_per_node=slowest([d.node_gpus for d in view.domains]),
        flow_gbps=slowest([d.flow_gbps for d in view.domains]),
        accelerator=np.where(alike, code[:, 0], -1.0),
        members=np.where(valid, code, -1.0),
        measured_scale=1.0 / slowest(view.speed),  # a profile was measured at full speed
    )


def _wan_use(view: ClusterView, kind: np.ndarray, doms: np.ndarray) -> tuple[WanUse, np.ndarray]:
    """Each placement's WAN use (its narrowest links, at the view's goodput) and the price a
    GB of its cross-domain traffic pays."""
    valid = doms >= 0
    safe, n_dom, links = np.where(valid, doms, 0), valid.sum(axis=1), _Links.of(view)
    is_pp, is_dp = kind == PIPELINE, kind == DATA
    pp, pp_offsite, pp_price = _chain_use(links, safe, valid, is_pp, n_dom)
    dp, dp_offsite, dp_price = _ring_use(links, safe, valid, is_dp, n_dom)
    offsite_share = np.where(
        is_pp, pp_offsite / np.maximum(n_dom - 1, 1), dp_offsite / np.maximum(n_dom, 1)
    )
    price = np.where(is_pp, pp_price, np.where(is_dp, dp_price, 0.0))
    return WanUse(**pp, **dp, offsite_share=offsite_share), price


@dataclass(frozen=True)
class _Links:
    """The view's domain-pair tables a placement's WAN use reads."""

    gbps: np.ndarray  # goodput per direction
    rtt_s: np.ndarray
    price: np.ndarray  # a GB's
    # links rated per node pair: a placement counts them so only where all its links are,
    # its narrowest link then standing for each of its node pairs
    per_node: np.ndarray
    flow_gbps: np.ndarray  # one connection's rate
    # hops that leave the data centre (a mixed domain's pools are joined by its own network,
    # which carries no WAN traffic and has no price)
    offsite: np.ndarray

    @classmethod
    def of(cls, view: ClusterView) -> _Links:
        bw = view.goodput_gbps
        return cls(
            gbps=bw,
            rtt_s=view.rtt_ms / 1000.0,
            price=view.price_per_gb,
            per_node=(
                view.per_node_pair
                if view.per_node_pair is not None
                else np.zeros(bw.shape, dtype=bool)
            ),
            flow_gbps=view.flow_gbps if view.flow_gbps is not None else np.full(bw.shape, np.inf),
            offsite=~view.fabric if view.fabric is not None else np.ones(bw.shape, dtype=bool),
        )


def _chain_use(links: _Links, safe, valid, is_pp, n_dom) -> tuple[dict, np.ndarray, np.ndarray]:
    """A pipeline's WAN fields, its offsite hops and a GB's price: consecutive stage domains,
    activations one way, gradients the other."""
    a, b = safe[:, :-1], safe[:, 1:]
    hop = valid[:, 1:]
    crossing = hop & is_pp[:, None]
    crossing_gbps = np.where(crossing, np.minimum(links.gbps[a, b], links.gbps[b, a]), np.inf)
    crossing_flow_gbps = np.where(crossing, links.flow_gbps[a, b], np.inf)
    pp_gbps, pp_flow_gbps = _pacing_hops(crossing_gbps, crossing_flow_gbps)
    per_node = np.where(hop, links.per_node[a, b], True).all(axis=1)
    # every hop carries as much: the offsite hops' share is the WAN's share of the bytes
    offsite = (hop & links.offsite[a, b]).sum(axis=1)
    fields = {
        "pp_crossings": np.where(is_pp, n_dom - 1, 0.0),
        "pp_gbps": pp_gbps,
        "pp_latency_s": np.where(is_pp, np.where(hop, links.rtt_s[a, b] / 2, 0.0).sum(axis=1), 0.0),
        "pp_per_node": (is_pp & per_node).astype(float),
        "pp_flow_gbps": pp_flow_gbps,
        "pp_crossing_gbps": crossing_gbps,
        "pp_crossing_flow_gbps": crossing_flow_gbps,
    }
    price = np.where(hop, links.price[a, b], 0.0).sum(axis=1) / np.maximum(offsite, 1)
    return fields, offsite, price


def _ring_use(links: _Links, safe, valid, is_dp, n_dom) -> tuple[dict, np.ndarray, np.ndarray]:
    """Data parallelism's WAN fields, its offsite hops and a GB's price: a ring over the
    members in their order, each sending to the next (the last to the first); its narrowest
    hop and largest RTT bound the all-reduce, each hop carries as much."""
    nxt = np.where(
        np.arange(safe.shape[1]) + 1 < n_dom[:, None], np.roll(safe, -1, axis=1), safe[:, :1]
    )
    ring = valid & (n_dom[:, None] > 1)
    dp_gbps, dp_flow_gbps = _pacing_hops(
        np.where(ring & is_dp[:, None], links.gbps[safe, nxt], np.inf),
        np.where(ring & is_dp[:, None], links.flow_gbps[safe, nxt], np.inf),
    )
    offsite = (ring & links.offsite[safe, nxt]).sum(axis=1)
    per_node = np.where(ring, links.per_node[safe, nxt], True).all(axis=1)
    fields = {
        "dp_domains": np.where(is_dp, n_dom, 1.0),
        "dp_gbps": dp_gbps,
        "dp_rtt_s": np.where(is_dp, np.where(ring, links.rtt_s[safe, nxt], 0.0).max(axis=1), 0.0),
        "dp_per_node": (is_dp & per_node).astype(float),
        "dp_flow_gbps": dp_flow_gbps,
    }
    price = np.where(ring, links.price[safe, nxt], 0.0).sum(axis=1) / np.maximum(offsite, 1)
    return fields, offsite, price


def with_stage_counts(wan: WanUse, kind: np.ndarray, stages: np.ndarray) -> WanUse:
    """`wan` with what a pipeline's waits depend on where it crosses the WAN, from `stages`,
    the stages each member domain holds (0 past the last member): the stage boundaries after
    each crossing (where one domain holds a single stage, two crossings are one link apart)."""
    members = (stages > 0).sum(axis=1)
    column = np.arange(stages.shape[1])
    # a crossing after each member but the last: the stages of the members past it, less one
    past = stages.sum(axis=1, keepdims=True) - np.cumsum(stages[:, :-1], axis=1) - 1.0
    crossing = (column[1:] < members[:, None]) & (kind == PIPELINE)[:, None]
    return wan.with_(pp_after_crossings=np.where(crossing, past, -1.0))


def _pacing_hops(pair: np.ndarray, flow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of each row's hops, those that may pace its connections, each with its own bandwidth
    and flow rate, (P, hops) padded with inf: a hop another matches or undercuts on both never
    does (of equal ones the first stays). Which of the rest paces a plan depends on how many
    connections it runs: the narrowest by bandwidth and by flow rate may be different hops,
    and one's bandwidth at the other's flow rate is slower than either."""
    if pair.shape[1] == 0:  # no hops (one domain a placement): one that never binds
        pair = flow = np.full((len(pair), 1), np.inf)
    k = pair.shape[1]
    earlier = np.triu(np.ones((k, k), dtype=bool), 1)  # [j, h]: hop j comes before hop h
    pj, ph, fj, fh = pair[:, :, None], pair[:, None, :], flow[:, :, None], flow[:, None, :]
    covered = ((pj <= ph) & (fj <= fh) & ((pj < ph) | (fj < fh) | earlier)).any(axis=1)
    first = np.argsort(covered, axis=1, kind="stable")[:, : (~covered).sum(axis=1).max(initial=1)]
    keep = ~np.take_along_axis(covered, first, axis=1)
    pair, flow = (np.take_along_axis(x, first, axis=1) for x in (pair, flow))
    return np.where(keep, pair, np.inf), np.where(keep, flow, np.inf)


def in_rings(bw, rtt, doms: np.ndarray, n_dom: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`doms` with the members of each of `rows` in the order of the directed ring whose
    narrowest hop is widest (then whose longest round trip is shortest), the pace of a ring
    all-reduce over them: every order of up to RING_EXACT members; beyond, the best of the order
    given and of the widest way on to one not yet taken from each start. Two members make one
    ring (there and back); three or more need not use every link."""
    out = doms.copy()
    for k in np.unique(n_dom[rows & (n_dom > 2)]):
        at = np.flatnonzero(rows & (n_dom == k))
        out[at, :k] = _ring(bw, rtt, doms[at, :k])
    return out


def _ring(bw: np.ndarray, rtt: np.ndarray, members: np.ndarray) -> np.ndarray:
    r, k = members.shape
    if k <= RING_EXACT:
        orders = np.array([(0, *p) for p in itertools.permutations(range(1, k))])
        rings = members[:, orders]  # (r, orders, k)
        hops = (rings, np.roll(rings, -1, axis=2))
        narrowest, slowest = bw[hops].min(axis=2), rtt[hops].max(axis=2)
        widest = narrowest >= narrowest.max(axis=1, keepdims=True) * (1 - 1e-9)
        return rings[np.arange(r), np.where(widest, slowest, np.inf).argmin(axis=1)]
    # beyond: the widest way on from every start, and the order given, each with its hop back
    rings = np.stack([members, *(_walk(bw, np.roll(members, -s, axis=1)) for s in range(k))], 1)
    narrowest = bw[rings, np.roll(rings, -1, axis=2)].min(axis=2)
    return rings[np.arange(r), narrowest.argmax(axis=1)]


def _walk(bw: np.ndarray, members: np.ndarray) -> np.ndarray:
    """From each row's first member, the widest way on to one not yet taken."""
    r, k = members.shape
    rows, out = np.arange(r), members.copy()
    left = np.ones((r, k), dtype=bool)
    left[:, 0] = False
    for step in range(1, k):
        reach = np.where(left, bw[out[:, step - 1][:, None], members], -np.inf)
        j = reach.argmax(axis=1)
        out[:, step], left[rows, j] = members[rows, j], False
    return out


@dataclass(frozen=True)
class ParallelGrid:
    """Parallel plans of one job, independent of where it runs, with their memory ladder."""

    plans: PlanBatch  # zero and recompute set to the first rung; see memory
    memory_gib: np.ndarray  # (C, rungs of the stack's memory_ladder)


@functools.lru_cache(maxsize=256)  # every decision for a job asks again; read-only arrays
def parallel_grid(
    arch: ModelArch, global_batch: int, seq: int, gpus_max: int, opts: SearchOptions
) -> ParallelGrid:
    tp = [t for t in opts.tensor if arch.heads % t == 0 and arch.kv_heads % t == 0]
    pp = _degrees(arch.layers, opts.max_pipeline, opts.uneven)
    cp = [c for c in opts.context if seq % (2 * c) == 0] if seq >= 8192 else [1]
    grid = np.array(
        list(
            itertools.product(
                tp,
                pp,
                cp,
                opts.virtual,
                opts.micro_batch,
                _degrees(global_batch, gpus_max, opts.uneven),
                opts.diloco_h,
            )
        ),
        dtype=np.int64,
    )
    t, p, c, v, mb, d, h = grid.T
    share = -(-global_batch // d)  # samples of the busiest replica
    fits = (share % mb == 0) if opts.uneven else (global_batch % (d * mb) == 0)
    ok = fits & (d * t * p * c <= gpus_max)
    micro = share // mb
    heaviest = -(-arch.layers // p)
    # Interleaving needs more than one stage, whole chunks and micro-batches in multiples of pp.
    ok &= (v == 1) | ((p > 1) & (heaviest % v == 0) & (micro % p == 0))
    t, p, c, v, mb, d, h = (x[ok] for x in (t, p, c, v, mb, d, h))
    one = np.ones_like(t)
    plans = PlanBatch(
        dp=d,
        tp=t,
        pp=p,
        cp=c,
        vp=v,
        micro_batch=mb,
        zero=one,
        recompute=0 * one,
        precision=np.full(t.shape, DTYPES.index(opts.dtype)),
        diloco_h=h,
    )
    mem = np.stack(
        [
            sum(
                memory_gib(
                    arch,
                    global_batch,
                    _with(plans, zero=z, recompute=r),
                    opts.stack,
                    seq,
                    opts.layers,
                ).values()
            )
            for z, r in memory_ladder(opts.stack)
        ],
        axis=1,
    )
    for a in (*plans.__dict__.values(), mem):
        a.flags.writeable = False  # shared by every caller through the cache
    return ParallelGrid(plans, mem)


def _with(plans: PlanBatch, **scalars) -> PlanBatch:
    cols = {k: np.full(len(plans), v) for k, v in scalars.items()}
    return PlanBatch(**{**plans.__dict__, **cols})


def split(total: int, caps: list[int]) -> list[int] | None:
    """Scalar reference of `share`: `total` units over slots in proportion to `caps`.

    Each slot gets floor(total·cap/Σcap), at least 1 and at most its cap; then, up to
    len(caps)+1 times, the whole remaining gap goes to the slot with the most room (the
    first on ties). None when no split fits.
    """
    cap_sum = max(sum(caps), 1)
    parts = [min(max(total * c // cap_sum, 1), c) for c in caps]
    for _ in range(len(caps) + 1):
        gap = total - sum(parts)
        room = [(c - p) if gap > 0 else (p - 1) for p, c in zip(parts, caps, strict=True)]
        best = max(range(len(caps)), key=lambda i: (room[i], -i))
        if room[best] > 0 and gap:
            parts[best] += min(abs(gap), room[best]) * (1 if gap > 0 else -1)
    return parts if sum(parts) == total and all(p >= 1 for p in parts) else None


def share(total: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Split `total` units over slots in proportion to `caps`, at least one each, within caps.

    total: (N,), caps: (N, k) with 0 for unused slots. Returns (N, k); rows that cannot be
    split have a sum different from `total`.
    """
    used = caps > 0
    n_used = used.sum(axis=1)
    cap_sum = np.maximum(caps.sum(axis=1), 1)
    want = np.where(used, np.floor(total[:, None] * caps / cap_sum[:, None]), 0)
    parts = np.where(used, np.clip(want, 1, caps), 0)
    # Hand out what rounding left over (or take back an excess) one slot at a time, on the
    # rows still short or over.
    rows = np.flatnonzero(total != parts.sum(axis=1))
    for _ in range(caps.shape[1] + 1):
        if not len(rows):
            break
        p, c, u = parts[rows], caps[rows], used[rows]
        gap = total[rows] - p.sum(axis=1)
        room = np.where(u, np.where(gap[:, None] > 0, c - p, p - 1), -1)
        slot, most = room.argmax(axis=1), room.max(axis=1)
        amount = np.minimum(np.abs(gap), most.clip(min=0)) * np.where(most > 0, np.sign(gap), 0)
        parts[rows, slot] += amount
        rows = rows[(gap != amount) & (amount != 0)]
    return np.where(n_used[:, None] > 0, parts, 0).astype(np.int64)
