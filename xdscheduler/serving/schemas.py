"""What the policy endpoints accept and return, and how a cluster state travels as JSON.

`POST /policy/act` is one agent's step: its observation (the resource graph and the choices
open, as the environment builds them) and what each choice stands for in; the pick, the
ranking of the others and the explanation out. The controller searches the candidates
itself and calls it twice per decision (upper, then lower).

`POST /policy/decide` is a whole decision for people and scripts: the cluster state and the
job in (the endpoint serves one scenario, so only what changes travels: free and reserved
accelerators, health, indicators, links now), the placement out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from xdscheduler.catalog import ModelArch
from xdscheduler.costmodel.plan import Plan, Precision
from xdscheduler.errors import UserError
from xdscheduler.perception.graph import INDICATOR_NAMES, graph_size
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.rl.candidates import observation_space
from xdscheduler.scenario import (
    MAX_DOMAIN_GPUS,
    MAX_DOMAINS,
    YEAR_S,
    Architecture,
    GpuRequest,
    Job,
)
from xdscheduler.schema import FileModel, Strict

MAX_LINK_GBPS = 10_000.0  # as a scenario's links
MAX_RTT_MS = 2000.0
Indicator = Annotated[float, Field(ge=-1e12, le=1e12)]
Term = Annotated[float | None, Field(ge=-1e12, le=1e12)]


class JobIn(FileModel):
    name: str = Field(min_length=1, max_length=200)
    model: str | None = Field(default=None, max_length=200)
    architecture: Architecture | None = None
    global_batch: int = Field(gt=0, le=1 << 24)
    seq_len: int | None = Field(default=None, gt=0, le=1 << 24)
    gpus: GpuRequest = GpuRequest()
    tokens: float = Field(default=1.0, gt=0, le=1e16)  # to train: with arrival_s, what the
    arrival_s: float = Field(default=0.0, ge=0, le=YEAR_S)  # job's efficiency and wait are by
    dtype: Precision | None = None  # the precision it trains in (None: BF16)


class DomainIn(FileModel):
    name: str = Field(min_length=1, max_length=200)
    free_gpus: int = Field(ge=0, le=MAX_DOMAIN_GPUS)
    reserved_gpus: int = Field(default=0, ge=0, le=MAX_DOMAIN_GPUS)
    up: bool = True
    indicators: dict[str, Indicator] = Field(default_factory=dict, max_length=64)


class LinkIn(FileModel):
    a: str = Field(max_length=200)
    b: str = Field(max_length=200)
    bandwidth_gbps: float = Field(ge=0, le=MAX_LINK_GBPS)  # a → b now
    rtt_ms: float = Field(ge=0, le=MAX_RTT_MS)


class ChoiceIn(FileModel):
    index: int = Field(ge=0, lt=1024)
    summary: str = Field(max_length=2000)
    terms: dict[str, Term] = Field(max_length=16)  # efficiency, utilization, cost, objective,
    # step_time_s


Row = list[float]


class Observation(FileModel):
    """One agent's view, as `rl.candidates` builds it: the resource graph (N nodes padded to
    at least 8, E links), the C choices open and the context. Shapes in the 422 when they do
    not fit the served policy; `GET /policy/example` gives a whole body."""

    nodes: list[Row]  # [N, node features]
    node_mask: Row  # [N]
    edge_index: list[Row]  # [2, E]: node indices
    edges: list[Row]  # [E, edge features]
    edge_mask: Row  # [E]
    choices: list[Row]  # [C, choice features]
    choice_nodes: list[Row]  # [C, N]
    action_mask: Row  # [C]: 1 where the choice is open
    context: Row  # [context features]


class ActRequest(FileModel):
    agent: Literal["upper", "lower"]
    job: str = Field(default="", max_length=200)
    observation: Observation
    choices: list[ChoiceIn] = Field(default_factory=list, max_length=1024)


class RankedChoice(Strict):
    index: int
    probability: float
    summary: str | None


class ActResponse(Strict):
    agent: str
    job: str
    choice: int
    action: Literal["choose", "wait"]
    ranking: list[RankedChoice]
    probabilities: list[float]
    explanation: dict
    inference_ms: float


class DecideRequest(FileModel):
    job: JobIn
    domains: list[DomainIn] = Field(max_length=MAX_DOMAINS)
    links: list[LinkIn] = Field(default_factory=list, max_length=MAX_DOMAINS * MAX_DOMAINS)
    queue_len: int = Field(default=1, ge=0, le=1_000_000)
    now_s: float = Field(default=0.0, ge=0, le=YEAR_S)  # the controller's clock, as arrival_s


class DecideResponse(Strict):
    job: str
    action: Literal["place", "wait", "none"]  # none: nothing fits on the free accelerators
    decision: dict | None
    alternatives: list[dict]
    explanation: dict
    decision_ms: float


def observation_arrays(observation: dict[str, list], space) -> dict[str, np.ndarray]:
    """The JSON observation as the arrays the module takes; refused (UserError) unless it fits
    `space`, or the same space for a larger cluster up to MAX_DOMAINS (the module takes graphs
    of any size): shapes, finite values within each box's bounds, node indices that exist, and
    at least one choice open."""
    nodes = len(observation.get("nodes") or [])
    if nodes > space["nodes"].shape[0]:
        if nodes > graph_size(MAX_DOMAINS)[0]:
            raise UserError(
                f"observation['nodes'] has {nodes} rows; at most "
                f"{graph_size(MAX_DOMAINS)[0]} ({MAX_DOMAINS} domains)"
            )
        space = observation_space(space["choices"].shape[0], nodes)
    if set(observation) != set(space.spaces):
        raise UserError(
            "observation must have exactly the keys "
            + ", ".join(f"{k} {list(sub.shape)}" for k, sub in space.spaces.items())
            + f"; got {sorted(observation)}"
        )
    out = {key: _array(observation[key], key, sub) for key, sub in space.spaces.items()}
    n = out["nodes"].shape[0]
    index = out["edge_index"]
    if (index >= n).any() or (index != np.round(index)).any():
        raise UserError(
            f"observation['edge_index'] holds values that are not node indices 0..{n - 1}"
        )
    if not (out["action_mask"] > 0.5).any():
        raise UserError("observation['action_mask'] opens no choice: at least one must be 1")
    return out


def _array(value, key: str, sub) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"observation[{key!r}] is not an array of numbers") from None
    if arr.shape != sub.shape:
        raise UserError(
            f"observation[{key!r}] has shape {list(arr.shape)}, expected {list(sub.shape)}"
        )
    if not np.isfinite(arr).all():
        raise UserError(f"observation[{key!r}] holds a value that is not finite")
    low, high = np.broadcast_to(sub.low, sub.shape), np.broadcast_to(sub.high, sub.shape)
    if (arr < low).any() or (arr > high).any():
        bounds = f"{low.min():g}..{high.max():g}" if np.isfinite(low).all() else "its bounds"
        raise UserError(f"observation[{key!r}] holds values outside {bounds}")
    return arr


def act_body(
    agent: str, obs: dict[str, np.ndarray], options: dict[int, dict], job: str = ""
) -> dict:
    """An agent step (what `Agents.step` takes) as the JSON body of `POST /policy/act`."""
    return {
        "agent": agent,
        "job": job,
        "observation": {k: v.tolist() for k, v in obs.items()},
        "choices": [{"index": i, **o} for i, o in options.items()],
    }


def job_in(spec: JobSpec) -> JobIn:
    a = spec.arch
    arch = Architecture(
        layers=a.layers,
        hidden=a.hidden,
        ffn_hidden=a.ffn_hidden,
        heads=a.heads,
        kv_heads=a.kv_heads,
        vocab=a.vocab,
        gated_mlp=a.gated_mlp,
        tied_embeddings=a.tied_embeddings,
    )
    return JobIn(
        name=spec.name,
        architecture=arch,
        global_batch=spec.global_batch,
        seq_len=spec.seq,
        gpus=GpuRequest(min=spec.gpus_min, max=spec.gpus_max),
        tokens=spec.tokens or 1.0,
        arrival_s=spec.arrival_s,
        dtype=spec.dtype,
    )


def job_spec(job: JobIn) -> JobSpec:
    """Validated like a scenario's job (exactly one of model or architecture)."""
    j = Job(
        name=job.name,
        model=job.model,
        architecture=job.architecture,
        global_batch=job.global_batch,
        seq_len=job.seq_len,
        tokens=job.tokens,
        gpus=job.gpus,
        arrival_s=job.arrival_s,
        dtype=job.dtype,
    )
    spec = JobSpec.of(j)
    if job.architecture is not None:  # keep the caller's name for the architecture
        spec = replace(spec, arch=ModelArch(**{**spec.arch.__dict__, "name": job.name}))
    return spec


def state_of(view: ClusterView) -> tuple[list[DomainIn], list[LinkIn]]:
    names = view.names
    ind = view.indicators
    domains = [
        DomainIn(
            name=d.name,
            free_gpus=d.free_gpus,
            reserved_gpus=d.reserved_gpus,
            up=d.up,
            indicators={}
            if ind is None
            else dict(zip(INDICATOR_NAMES, map(float, ind[i]), strict=True)),
        )
        for i, d in enumerate(view.domains)
    ]
    src, dst = np.nonzero(view.bandwidth_gbps > 0)
    links = [
        LinkIn(
            a=names[i],
            b=names[j],
            bandwidth_gbps=float(view.bandwidth_gbps[i, j]),
            rtt_ms=float(view.rtt_ms[i, j]),
        )
        for i, j in zip(src, dst, strict=True)
    ]
    return domains, links


def view_of(base: ClusterView, domains: list[DomainIn], links: list[LinkIn]) -> ClusterView:
    """The served scenario's view under the request's state; unknown names are refused."""
    index = {n: i for i, n in enumerate(base.names)}
    given = [d.name for d in domains]
    if sorted(given) != sorted(index):
        raise UserError(f"domains must be exactly {sorted(index)}, got {sorted(given)}")
    bad = [k for d in domains for k in d.indicators if k not in INDICATOR_NAMES]
    if bad:
        raise UserError(f"unknown indicators {sorted(set(bad))}; known: {list(INDICATOR_NAMES)}")
    k = len(index)
    bw, rtt = np.zeros((k, k)), np.zeros((k, k))
    for link in links:
        if link.a not in index or link.b not in index or link.a == link.b:
            raise UserError(f"link {link.a}-{link.b}: both ends must be distinct served domains")
        i, j = index[link.a], index[link.b]
        bw[i, j], rtt[i, j] = link.bandwidth_gbps, link.rtt_ms
        if bw[j, i] == 0:  # one direction given: the link is taken as symmetric
            bw[j, i], rtt[j, i] = link.bandwidth_gbps, link.rtt_ms
    ind = np.zeros((k, len(INDICATOR_NAMES)))
    for d in domains:
        for name, value in d.indicators.items():
            ind[index[d.name], INDICATOR_NAMES.index(name)] = value
    view = base.with_free(
        {d.name: d.free_gpus for d in domains}, {d.name: d.reserved_gpus for d in domains}
    )
    view = view.with_links(bw, np.maximum(rtt, rtt.T)).with_indicators(ind)
    return view.with_down({d.name for d in domains if not d.up})


def placement_json(p: Placement, view: ClusterView) -> dict:
    return {
        "kind": p.kind,
        "domains": [view.names[i] for i in p.domains],
        "gpus": list(p.gpus),
        "plan": p.plan.as_dict(),
        "keep_off": [view.names[i] for i in p.keep_off],
    }


def placement_from(
    job: str, decision: dict, view: ClusterView, explanation: str, decision_ms: float
) -> Placement:
    return Placement(
        job,
        decision["kind"],
        tuple(view.names.index(n) for n in decision["domains"]),
        tuple(decision["gpus"]),
        Plan(**decision["plan"]),
        tuple(decision["domains"]),
        keep_off=tuple(view.names.index(n) for n in decision.get("keep_off", ())),
        explanation=explanation,
        decision_ms=decision_ms,
    )
