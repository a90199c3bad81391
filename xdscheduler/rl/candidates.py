"""What the agents choose among, built from one evaluation of the plan space.

Upper agent (inter-domain): allocations, i.e. accelerators per domain, the best few by the
objective, plus "wait". Lower agent (intra-domain): parallel plans and stage orders inside the
chosen allocation. Every choice comes with its objective terms as features, and the resource
graph as context, so one policy serves every weighting of the objective.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from xdscheduler.perception.graph import EDGE_FEATURES, NODE_FEATURES, graph_size, padded
from xdscheduler.planner.baselines import ONLINE
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policies import planner_pick, search_options
from xdscheduler.planner.search import (
    Evaluated,
    JobSpec,
    distinct,
    evaluate_space,
    ideal_tokens_per_s,
    placement_at,
)
from xdscheduler.planner.space import DATA, PIPELINE, SINGLE, SearchOptions
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Weights
from xdscheduler.sim.metrics import job_efficiency

if TYPE_CHECKING:
    import gymnasium

UPPER_CHOICES = 8  # seven allocations and "wait" (the last)
LOWER_CHOICES = 8
CHOICE_FEATURES = 16
CONTEXT_FEATURES = 10
WAIT = UPPER_CHOICES - 1
# Jobs that may ask for this share of the cluster's accelerators or more are offered to be held
# off the faster classes: below it, the other jobs hardly notice which class one took (the
# effect of one such choice on a day's study is lost in the chaos of what follows it).
HOLD_SHARE = 1 / 16
OPTIONS = ONLINE  # the planner policy's online grid


@functools.cache
def _row_hash(domains: int) -> np.ndarray:
    """One random weight per domain: an allocation's rows hashed to one integer."""
    return np.random.default_rng(0).integers(1, 2**62, domains, dtype=np.int64)


@dataclass(frozen=True)
class Choices:
    """The allocations open to one job now, and the plans inside each (best first)."""

    job: JobSpec
    view: ClusterView
    weights: Weights
    ev: Evaluated  # the evaluated plan space
    alloc: np.ndarray  # (N, K) accelerators per domain of every evaluated candidate
    groups: list[np.ndarray]  # per allocation offered: candidate indices, distinct shapes
    keep_off: list[tuple[int, ...]]  # per allocation offered: domains its job stays off
    ideal: float  # the job's tokens/s with the whole cluster to itself
    now_s: float

    def best(self, group: int) -> int:
        return int(self.groups[group][0])

    @property
    def ideal_s(self) -> float:
        """How long the job would take with the whole cluster to itself."""
        return self.job.tokens / self.ideal

    def job_efficiency(self, idx) -> np.ndarray:
        """The job's efficiency if placed now on candidates idx: its ideal time over the time
        it will have taken since it arrived (the per-job term a study's objective averages)."""
        run = self.job.tokens / self.ev.terms["tokens_per_s"][idx]
        return job_efficiency(self.ideal_s, self.now_s - self.job.arrival_s + run)

    def objective(self, i: int) -> float:
        return float(self.ev.terms["objective"][i])

    def candidate(self, i: int) -> Placement:
        return placement_at(self.ev, i, self.view, self.job)

    def placement(
        self, i: int, group: int = 0, explanation: str = "", decision_ms: float = 0.0
    ) -> Placement:
        """Candidate i of allocation `group` as a placement, with the domains that group keeps
        the job off."""
        p = placement_at(self.ev, i, self.view, self.job, explanation, decision_ms)
        return replace(p, keep_off=self.keep_off[group])


def choices(
    job: JobSpec,
    view: ClusterView,
    weights: Weights,
    now_s: float = 0.0,
    opts: SearchOptions = OPTIONS,
) -> Choices | None:
    """None when nothing fits on the free accelerators."""
    if sum(d.available for d in view.domains) < job.gpus_min:
        return None
    opts = search_options(job, view, opts)  # the planner's rule on crossing domains
    ev = evaluate_space(job, view, weights, opts)
    pick = planner_pick(ev, job, view, weights, opts, now_s=now_s)
    if ev is None or pick is None:
        return None  # nothing fits, or the planner would not place it now either
    slots = ev.placements.domains[ev.place]
    alloc = np.zeros((len(ev.place), len(view.domains)), dtype=np.int64)
    rows = np.repeat(np.arange(len(ev.place)), slots.shape[1])
    used = slots.ravel() >= 0
    np.add.at(alloc, (rows[used], slots.ravel()[used]), ev.gpus.ravel()[used])
    # Rows hashed to one integer: a 1-D unique is ten times faster than unique over rows.
    _, group_of = np.unique(alloc @ _row_hash(alloc.shape[1]), return_inverse=True)
    # The planner's order (best first, the search's own order on ties), so the first choice is
    # the planner's; of choices equal on every objective term only the first is offered: they
    # are the same to the objective, and an arbitrary pick among them is noise.
    order = np.argsort(-ev.terms["objective"], kind="stable")
    seen: set[tuple] = set()
    groups: list[np.ndarray] = []
    keep_off: list[tuple[int, ...]] = []
    for i, off in _offered(job, view, alloc, order, pick):
        key = (_terms_key(ev, i), off)
        if key in seen or (int(group_of[i]), off) in seen:
            continue
        seen.update([key, (int(group_of[i]), off)])
        members = order[group_of[order] == group_of[i]]
        groups.append(np.array(_first_of_ties(ev, distinct(ev, members, 4 * LOWER_CHOICES))))
        keep_off.append(off)
        if len(groups) == WAIT:
            break
    return Choices(
        job, view, weights, ev, alloc, groups, keep_off, ideal_tokens_per_s(job, view), now_s
    )


def _offered(job: JobSpec, view: ClusterView, alloc: np.ndarray, order: np.ndarray, pick: int):
    """(candidate, domains held back) for each allocation offered: the planner's pick; and, for
    a job large enough to take a class of accelerators from the many small jobs behind it, for
    each class the best allocation that keeps the job off every faster class, now and when it
    is re-planned later.

    The planner places each job as well as it can now; what it never weighs is leaving the
    fastest accelerators to the many jobs that follow. Those are the agent's alternatives, and
    only those: other allocations the search ranks lower would only be worse now, with no
    intent behind them, and every such choice open is one more way for a policy to err."""
    yield pick, ()
    if job.gpus_max < HOLD_SHARE * sum(d.total_gpus for d in view.domains):
        return  # a small job's choice of class moves the study by noise only
    peak = view.peak_tflops
    ranked = alloc[order] > 0
    on_faster = np.zeros(len(order), bool)
    for tier in np.unique(peak)[::-1][:-1]:  # fastest first; the slowest leaves no class below
        faster = peak >= tier
        on_faster |= ranked[:, faster].any(axis=1)
        below = np.flatnonzero(~on_faster)
        if len(below):
            yield int(order[below[0]]), tuple(int(i) for i in np.flatnonzero(faster))


def _terms_key(ev, i: int) -> tuple:
    t = ev.terms
    return tuple(
        round(float(t[k][i]), 9) for k in ("objective", "efficiency", "utilization", "cost")
    )


def _first_of_ties(ev, idx: list[int]) -> list[int]:
    seen, out = set(), []
    for i in idx:
        if _terms_key(ev, i) not in seen:
            seen.add(_terms_key(ev, i))
            out.append(i)
    return out[:LOWER_CHOICES]


def _terms(ch: Choices, idx: np.ndarray) -> np.ndarray:
    t, step = ch.ev.terms, ch.ev.est.step_time_s
    return np.stack(
        [
            t["efficiency"][idx],
            t["utilization"][idx],
            np.log1p(t["cost"][idx]),
            t["objective"][idx],
            step.min() / step[idx],
            t["tokens_per_s"][idx] / ch.ideal,
            ch.job_efficiency(idx),
        ],
        axis=1,
    )


def _compute_share(ch: Choices, idx: np.ndarray) -> np.ndarray:
    """The share of the free compute (accelerators weighted by their peak) a choice takes:
    what the jobs behind it will not find."""
    peak = ch.view.peak_tflops
    free = np.array([d.available for d in ch.view.domains])
    return ch.alloc[idx] @ peak / max(float(free @ peak), 1e-9)


def _shares(ch: Choices, idx: np.ndarray) -> np.ndarray:
    out = np.zeros((len(idx), graph_size(len(ch.view.domains))[0]), np.float32)
    a = ch.alloc[idx]
    out[:, : a.shape[1]] = a / np.maximum(a.sum(axis=1, keepdims=True), 1)
    return out


def _kept_off_share(ch: Choices) -> np.ndarray:
    """Per allocation offered: the share of the cluster's compute its job keeps off."""
    compute = ch.view.peak_tflops * np.array([d.total_gpus for d in ch.view.domains])
    return np.array([compute[list(h)].sum() for h in ch.keep_off]) / max(compute.sum(), 1e-9)


def _context(ch: Choices, queue_len: int) -> np.ndarray:
    w, job, doms = ch.weights, ch.job, ch.view.domains
    free = sum(d.available for d in doms) / max(sum(d.total_gpus for d in doms), 1)
    waited = min((ch.now_s - job.arrival_s) / max(ch.ideal_s, 1.0), 10.0) / 10
    return np.array(
        [
            w.efficiency,
            w.utilization,
            w.cost,
            job.gpus_min / 512,
            job.gpus_max / 512,
            np.log10(job.arch.params) / 12,
            queue_len / 20,
            free,
            np.log10(max(ch.ideal_s, 1.0)) / 5,
            waited,
        ],
        np.float32,
    )


def upper_observation(ch: Choices, queue_len: int) -> dict[str, np.ndarray]:
    idx = np.array([g[0] for g in ch.groups])
    kind = np.asarray(ch.ev.placements.kind)[ch.ev.place[idx]]
    feats = np.concatenate(
        [
            _terms(ch, idx),
            np.stack(
                [
                    ch.alloc[idx].sum(axis=1) / ch.job.gpus_max,
                    (ch.alloc[idx] > 0).sum(axis=1) / 3,
                    kind == SINGLE,
                    kind == PIPELINE,
                    kind == DATA,
                    np.log1p(ch.ev.est.cross_domain_bytes[idx] / 1e9),
                    _compute_share(ch, idx),
                    _kept_off_share(ch),
                    np.zeros(len(idx)),
                ],
                axis=1,
            ),
        ],
        axis=1,
    )
    return _observation(ch, feats, _shares(ch, idx), UPPER_CHOICES, queue_len, wait=True)


def lower_observation(ch: Choices, group: int, queue_len: int) -> dict[str, np.ndarray]:
    idx = ch.groups[group]
    p = ch.ev.plans
    mem = np.array([d.accelerator.memory_gib for d in ch.view.domains]).min()
    feats = np.concatenate(
        [
            _terms(ch, idx),
            np.stack(
                [
                    np.log2(p.dp[idx]) / 8,
                    np.log2(p.tp[idx]) / 3,
                    np.log2(p.pp[idx]) / 5,
                    np.log2(p.micro_batch[idx]) / 2,
                    p.zero[idx] / 3,
                    p.recompute[idx] > 0,
                    ch.ev.est.memory_gib[idx] / mem,
                    np.zeros(len(idx)),
                    np.zeros(len(idx)),
                ],
                axis=1,
            ),
        ],
        axis=1,
    )
    return _observation(ch, feats, _shares(ch, idx), LOWER_CHOICES, queue_len, wait=False)


def _observation(
    ch: Choices, feats: np.ndarray, shares: np.ndarray, size: int, queue_len: int, wait: bool
) -> dict[str, np.ndarray]:
    n = len(feats)
    obs = padded(ch.view)
    obs["choices"] = np.zeros((size, CHOICE_FEATURES), np.float32)
    obs["choices"][:n] = feats
    obs["choice_nodes"] = np.zeros((size, len(obs["nodes"])), np.float32)
    obs["choice_nodes"][:n] = shares
    obs["action_mask"] = np.zeros(size, np.float32)
    obs["action_mask"][:n] = 1
    if wait:
        obs["choices"][WAIT, -1] = 1
        obs["action_mask"][WAIT] = 1
    obs["context"] = _context(ch, queue_len)
    return obs


def observation_space(n_choices: int, domains: int = 0) -> gymnasium.spaces.Dict:
    """One agent's observation of a cluster of `domains` (padded to at least MAX_NODES)."""
    import gymnasium  # only where spaces are built: choosing a policy need not load it

    nodes, links = graph_size(domains)

    def box(*shape, low=-np.inf, high=np.inf):
        return gymnasium.spaces.Box(low, high, shape=shape, dtype=np.float32)

    return gymnasium.spaces.Dict(
        {
            "nodes": box(nodes, NODE_FEATURES),
            "node_mask": box(nodes, low=0, high=1),
            "edge_index": box(2, links, low=0, high=nodes),
            "edges": box(links, EDGE_FEATURES),
            "edge_mask": box(links, low=0, high=1),
            "choices": box(n_choices, CHOICE_FEATURES),
            "choice_nodes": box(n_choices, nodes, low=0, high=1),
            "action_mask": box(n_choices, low=0, high=1),
            "context": box(CONTEXT_FEATURES),
        }
    )
