"""The single-job experiment of the research design: one job too large for any one domain, under
WAN bandwidth that swings, planned six ways and compared in the cost model.

Two settings: Llama 3 70B on 4 domains of 64 H100 and Llama 3.1 405B on 8 domains of 128 H100
(neither fits one domain at the size asked), every pair of domains joined by a link of B0 Gbit/s
each way and an RTT drawn from 20-100 ms. Each link's bandwidth swings as B(t) = B0 (1 + e(t)),
e a mean-reverting process with |e| <= 0.3 (the study's own, `network.dynamics`), sampled every
5 minutes; each seed draws the RTTs and the swings, the same for every plan.

The plans:
- ours: the network-aware search (every placement, synchronous or DiLoCo every H steps), its
  pick re-planned every 5 minutes on a forecast of the next 5 minutes' bandwidth (each link's
  AR(1) fitted on the last hour it measured), when the new plan is predicted 5% faster and
  the time it saves over the next 5 minutes pays twice for the switch's pause;
- Megatron's default plan (TP 8, the least PP that fits, the rest DP) over every domain,
  gradients all-reduced every step;
- FSDP / ZeRO-3 over every domain (the fastest such plan, FSDP's stack);
- DiLoCo with H fixed (the fastest replicas-per-domain plan, outer sync every H steps);
- Sailor-style: the fastest synchronous plan over any domains (pipelines, replicas, both),
  chosen once on the leased bandwidth and kept;
- MAST-style: the fastest plan inside the largest single domain, fewer accelerators, no WAN.

Figures per plan and seed, over the run: T_step (wall-clock seconds a step, switches' pauses
included; DiLoCo's outer sync amortised over its H steps, as the model times it) mean and
standard deviation over steps, tokens/s, cross-domain GB a step, the communication-computation
ratio (every collective's seconds, hidden or not, over the GEMMs' and recomputation's) and the
share of communication hidden behind compute, and the tokens to a target loss: 20 tokens a
parameter for a synchronous plan, DILOCO_EXTRA_TOKENS more per replica group beyond the first
for DiLoCo (its drift between syncs), with the days that takes at the run's speed.

Beside them, the free-WAN bound: the fastest plan's step with every link between domains free
(`FREE_WAN_GBPS`, no RTT), the same search as ours'. No plan on these accelerators steps faster
in the model, so it says whether a target such as the seed's (25% below the best static plan)
can be met at all.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen: render to files
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from xdscheduler import catalog
from xdscheduler.costmodel.plan import PlanBatch, Stack
from xdscheduler.costmodel.steptime import DILOCO_EXTRA_TOKENS, StepEstimate, estimate
from xdscheduler.errors import UserError
from xdscheduler.network.dynamics import Dynamics
from xdscheduler.planner.baselines import ONLINE, megatron_default
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import (
    THROUGHPUT_ONLY,
    JobSpec,
    described,
    distinct,
    placement_at,
    refined_space,
)
from xdscheduler.planner.space import DATA, SearchOptions, describe_placements
from xdscheduler.planner.view import ClusterView
from xdscheduler.report.compare import mean_ci
from xdscheduler.report.writer import _save
from xdscheduler.scenario import Scenario, parse_scenario
from xdscheduler.sim.reconfig import COMM_INIT_S, switch_cost


@dataclass(frozen=True)
class Setting:
    """One job too large for one domain, on domains of one accelerator."""

    label: str
    model: str
    domains: int
    gpus: int  # per domain
    global_batch: int  # sequences a step, at the model's sequence length


SETTINGS = {
    "70b": Setting("Llama 3 70B on 4 x 64 H100", "llama3-70b", 4, 64, 1024),
    "405b": Setting("Llama 3.1 405B on 8 x 128 H100", "llama3.1-405b", 8, 128, 2048),
}
ACCELERATOR = "H100-SXM"
SWING = 0.3  # |e| <= 0.3
RTT_MS = (20.0, 100.0)
SAMPLE_S = 300.0  # the links are measured, and ours decides, every 5 minutes
HOURS = 24.0
FREE_WAN_GBPS = 1e4  # the free-WAN bound's links: ~3x an H100 node's eight 400G NICs together
DILOCO_H = 100  # the fixed baseline's, and the interval ours may choose, as the planner's
TOKENS_PER_PARAM = 20  # the target loss: Chinchilla's compute-optimal tokens, synchronously
FORECAST_WINDOW = 12  # samples (an hour) each link's AR(1) is fitted on
TARGET_CUT = 0.25  # the seed's target: a mean T_step this much below the best static plan's
REPLAN_GAIN = 0.05  # ours switches for a plan predicted at least this much faster ...
REPLAN_PAYBACK = 2.0  # ... whose saving over the next sample pays this many times its pause
CANDIDATES = 8  # distinct placements kept from each of ours' searches
COMMUNICATION = ("tp_comm", "pp_comm", "dp_comm", "sync")
POLICIES = {
    "ours": "ours: network-aware, re-planned on a forecast",
    "megatron": "Megatron's default plan, every domain",
    "fsdp": "FSDP / ZeRO-3, every domain",
    "diloco": f"DiLoCo, H = {DILOCO_H}, every domain",
    "sailor": "Sailor-style plan, chosen once",
    "mast": "MAST-style: the largest domain alone",
}
STATIC = tuple(p for p in POLICIES if p != "ours")
# What ours searches: the planner's online grid, synchronous or DiLoCo.
OPTIONS = replace(ONLINE, diloco_h=(0, DILOCO_H))
FSDP = replace(ONLINE, kinds=(DATA,), max_pipeline=1, diloco_h=(0,), stack=Stack.preset("fsdp"))


def cluster(setting: Setting, gbps: float, seed: int) -> Scenario:
    """The setting's domains, every pair linked at `gbps` with an RTT drawn from the seed."""
    if not 0 < gbps <= 1e4:
        raise UserError(f"the links' bandwidth is in (0, 10000] Gbit/s, got {gbps:g}")
    rng = np.random.default_rng([seed, 0x5EED])
    names = [f"d{i}" for i in range(setting.domains)]
    node = catalog.accelerator(ACCELERATOR).gpus_per_node
    return parse_scenario(
        {
            "name": f"single-job-{setting.model}",
            "seed": seed,
            "domains": [
                {
                    "name": n,
                    "location": {"city": n},
                    "intra_domain_gbps": 400,
                    "nodes": [{"accelerator": ACCELERATOR, "count": setting.gpus // node}],
                }
                for n in names
            ],
            "links": [
                {
                    "a": a,
                    "b": b,
                    "bandwidth_gbps": gbps,
                    "rtt_ms": float(rng.uniform(*RTT_MS)),
                    "fluctuation": SWING,
                    "price_per_gb": 0.0,
                }
                for i, a in enumerate(names)
                for b in names[i + 1 :]
            ],
        }
    )


def job_of(setting: Setting) -> JobSpec:
    arch = catalog.model(setting.model)
    tokens = TOKENS_PER_PARAM * arch.params
    return JobSpec(
        "job", arch, setting.global_batch, arch.seq_len, 1, setting.domains * setting.gpus, tokens
    )


def swings(scn: Scenario, seed: int, hours: float) -> np.ndarray:
    """(samples, K, K) bandwidth every SAMPLE_S: B0 (1 + e), |e| <= SWING."""
    return Dynamics.generate(scn, seed, hours * 3600, SAMPLE_S).bandwidth_gbps


def forecast(history: np.ndarray, leased: np.ndarray) -> np.ndarray:
    """The next sample's bandwidth from the last FORECAST_WINDOW: per link, e = B / B0 - 1
    follows e(t+1) = phi e(t), phi fitted by least squares on the window (kept in [0, 1])."""
    e = (
        np.divide(
            history[-FORECAST_WINDOW:],
            leased,
            out=np.zeros_like(history[-FORECAST_WINDOW:]),
            where=leased > 0,
        )
        - 1
    )
    if len(e) < 2:
        return history[-1]
    num, den = (e[1:] * e[:-1]).sum(axis=0), (e[:-1] ** 2).sum(axis=0)
    phi = np.clip(np.divide(num, den, out=np.zeros_like(num), where=den > 0), 0.0, 1.0)
    return leased * (1 + phi * e[-1])


def fastest(job: JobSpec, view: ClusterView, opts: SearchOptions, k: int = 0) -> list[Placement]:
    """The fastest placement of `job` on the view (and the next k distinct ones)."""
    ev = refined_space(job, view, THROUGHPUT_ONLY, opts)
    if ev is None:
        raise UserError(
            f"no feasible plan for {job.arch.name} on {len(view.domains)} x "
            f"{view.domains[0].total_gpus} {ACCELERATOR}"
        )
    order = np.argsort(-ev.terms["objective"], kind="stable")
    return [placement_at(ev, i, view, job) for i in distinct(ev, order, k + 1)]


@functools.cache
def free_wan_step_s(setting: Setting) -> float:
    """The fastest step of the setting's job on its accelerators with the WAN free: every link
    at FREE_WAN_GBPS with no RTT (the links inside each domain as they are), so the same for
    every seed and bandwidth, and searched once. The least T_step of the best few synchronous
    plans and the best few DiLoCo plans, searched apart: the search charges DiLoCo's extra
    tokens, T_step does not."""
    job, view = job_of(setting), ClusterView.from_scenario(cluster(setting, FREE_WAN_GBPS, 0))
    free = view.with_links(view.bandwidth_gbps, np.zeros_like(view.rtt_ms))
    best = [
        p
        for h in OPTIONS.diloco_h
        for p in fastest(job, free, replace(OPTIONS, diloco_h=(h,)), CANDIDATES - 1)
    ]
    return float(_rows(estimates(best, job, free, OPTIONS.stack), best)["step_s"].min())


def static_plan(policy: str, job: JobSpec, view: ClusterView) -> tuple[Placement, Stack]:
    """A baseline's plan, chosen on the leased links, and the software stack it runs."""
    everywhere = replace(job, gpus_min=job.gpus_max)
    if policy == "megatron":
        return _megatron(job, view), OPTIONS.stack
    if policy == "fsdp":
        return fastest(everywhere, view, FSDP)[0], FSDP.stack
    if policy == "diloco":
        return fastest(everywhere, view, replace(OPTIONS, kinds=(DATA,), diloco_h=(DILOCO_H,)))[
            0
        ], OPTIONS.stack
    if policy == "sailor":
        return fastest(job, view, replace(OPTIONS, diloco_h=(0,)))[0], OPTIONS.stack
    if policy == "mast":
        return fastest(job, view, replace(OPTIONS, max_domains=1))[0], OPTIONS.stack
    raise UserError(f"unknown plan {policy!r}; known: {', '.join(POLICIES)}")


def _megatron(job: JobSpec, view: ClusterView) -> Placement:
    """TP 8, the least PP that fits, the rest DP, its replicas spread evenly over every
    domain (Megatron's recipe, as FIFO submits it)."""
    k = len(view.domains)
    doms = np.array([list(range(k))])
    hw = describe_placements(view, np.array([DATA], dtype=object), doms).hardware
    one = hw.one(0)
    plan = megatron_default(job, job.gpus_max, one)
    if plan is None or plan.dp % k:
        raise UserError(
            f"Megatron's default plan of {job.arch.name} does not spread evenly over {k} domains"
        )
    gpus = plan.gpus // k
    return Placement(
        job.name, DATA, tuple(range(k)), (gpus,) * k, plan, tuple(d.name for d in view.domains)
    )


def ours_candidates(job: JobSpec, view: ClusterView, statics: list[Placement]) -> list[Placement]:
    """The plans ours chooses among when it re-plans: the search's best few on the leased links
    and at the swings' bounds, and the baselines' plans of its own stack."""
    found = list(statics)
    for factor in (1 - SWING, 1.0, 1 + SWING):
        seen = view.with_links(view.bandwidth_gbps * factor, view.rtt_ms)
        found += fastest(job, seen, OPTIONS, CANDIDATES - 1)
    out: list[Placement] = []
    for p in found:
        if not any(p.same_as(q) for q in out):
            out.append(p)
    return out


def estimates(
    placements: list[Placement], job: JobSpec, view: ClusterView, stack: Stack
) -> StepEstimate:
    """Every placement's step under the view's links, in one pass of the model."""
    pl = described(view, placements)
    return estimate(
        job.arch,
        job.global_batch,
        PlanBatch.of([p.plan for p in placements]),
        pl.hardware,
        pl.wan,
        stack,
        OPTIONS.calibration,
        seq=job.seq,
    )


@dataclass(frozen=True)
class Timeline:
    """What one plan (or ours' plans in turn) did at each sample: the model's figures under the
    bandwidth there, and the seconds a switch paused training."""

    step_s: np.ndarray  # wall-clock seconds a step (no convergence charge)
    compute_s: np.ndarray
    comm_s: np.ndarray  # every collective, hidden or exposed
    hidden_s: np.ndarray  # communication hidden behind compute
    wan_gb: np.ndarray  # cross-domain GB a step
    extra_tokens: np.ndarray  # tokens to the target over a synchronous plan's, less one
    pause_s: np.ndarray
    replans: int = 0


def _rows(est: StepEstimate, placements: list[Placement]) -> dict[str, np.ndarray]:
    b, o = est.breakdown_s, est.overlapped_s
    groups = np.array(
        [len(p.domains) if p.plan.diloco_h and p.kind == DATA else 1 for p in placements]
    )
    return {
        "step_s": est.step_time_s - b["convergence"],
        "compute_s": b["compute"] + b["recompute"],
        "comm_s": sum(b[k] + np.asarray(o.get(k, 0.0)) for k in COMMUNICATION),
        "hidden_s": sum(np.asarray(o.get(k, 0.0)) for k in COMMUNICATION),
        "wan_gb": est.cross_domain_bytes / 1e9,
        "extra_tokens": DILOCO_EXTRA_TOKENS * (groups - 1),
    }


def timeline(
    placements: list[Placement],
    job: JobSpec,
    view: ClusterView,
    stack: Stack,
    bandwidth: np.ndarray,
    replan: bool,
) -> Timeline:
    """The placements' figures at every sample of `bandwidth`; without `replan` the first is
    kept throughout, with it ours' rule picks among them on the forecast."""
    leased = view.bandwidth_gbps
    actual = [
        _rows(estimates(placements, job, view.with_links(bw, view.rtt_ms), stack), placements)
        for bw in bandwidth
    ]
    current, pauses, replans = 0, np.zeros(len(bandwidth)), 0
    chosen = np.zeros(len(bandwidth), dtype=int)
    if replan:  # the best on the leased links to start with, as the search would place it
        current = int(np.argmin(estimates(placements, job, view, stack).step_time_s))
    for k in range(len(bandwidth)):
        if replan and k > 0:
            seen = view.with_links(forecast(bandwidth[:k], leased), view.rtt_ms)
            # chosen by the model's full step: DiLoCo's convergence charge included
            predicted = estimates(placements, job, seen, stack).step_time_s
            best = int(np.argmin(predicted))
            gain = 1 - predicted[best] / predicted[current]
            if gain >= REPLAN_GAIN:
                cost = switch_cost(placements[current], placements[best], job.arch.params, seen)
                pause = cost.pause_s + (0.0 if cost.alongside else COMM_INIT_S)
                if gain * SAMPLE_S >= REPLAN_PAYBACK * pause:
                    current, pauses[k], replans = best, min(pause, SAMPLE_S), replans + 1
        chosen[k] = current
    pick = {
        name: np.array([row[name][c] for row, c in zip(actual, chosen, strict=True)])
        for name in actual[0]
    }
    return Timeline(**pick, pause_s=pauses, replans=replans)


def figures(line: Timeline, job: JobSpec) -> dict[str, float]:
    """A run's figures from its timeline: per step where a figure is per step (every sample's
    value weighted by the steps trained in it), per second of the run where it is a rate."""
    steps = (SAMPLE_S - line.pause_s) / line.step_s
    total_steps, total_s = steps.sum(), SAMPLE_S * len(steps)
    mean_step = total_s / total_steps

    def per_step(x: np.ndarray) -> float:
        return float((steps * x).sum() / total_steps)

    spread = math.sqrt(per_step((line.step_s - per_step(line.step_s)) ** 2))
    tokens_per_s = job.global_batch * job.seq * total_steps / total_s
    extra = per_step(line.extra_tokens)
    return {
        "step_s": mean_step,
        "step_std_s": spread,
        "tokens_per_s": tokens_per_s,
        "wan_gb_per_step": per_step(line.wan_gb),
        "comm_over_compute": per_step(line.comm_s) / per_step(line.compute_s),
        "overlap": per_step(line.hidden_s) / max(per_step(line.comm_s), 1e-12),
        "extra_tokens": extra,
        "days_to_target": job.tokens * (1 + extra) / tokens_per_s / 86400,
        "replans": float(line.replans),
    }


def run(
    setting: Setting,
    gbps: float,
    seed: int,
    hours: float = HOURS,
    policies: tuple[str, ...] = tuple(POLICIES),
) -> list[dict]:
    """Every plan of one setting and seed under the same swings: a row of figures each."""
    scn = cluster(setting, gbps, seed)
    view, job = ClusterView.from_scenario(scn), job_of(setting)
    bandwidth = swings(scn, seed, hours)[: max(int(hours * 3600 / SAMPLE_S), 1)]
    statics = {p: static_plan(p, job, view) for p in STATIC}
    bound = free_wan_step_s(setting)
    rows = []
    for policy in policies:
        if policy == "ours":
            own = [p for p, stack in statics.values() if stack == OPTIONS.stack]
            line = timeline(
                ours_candidates(job, view, own), job, view, OPTIONS.stack, bandwidth, replan=True
            )
        else:
            plan, stack = statics[policy]
            line = timeline([plan], job, view, stack, bandwidth, replan=False)
        rows.append(
            {
                "setting": setting.label,
                "gbps": gbps,
                "seed": seed,
                "policy": policy,
                **figures(line, job),
                "free_wan_step_s": bound,
            }
        )
    return rows


def experiment(
    settings: list[str], gbps: list[float], seeds: list[int], hours: float = HOURS
) -> pd.DataFrame:
    """Every setting x bandwidth x seed x plan: one row of figures each."""
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise UserError(f"unknown job size {', '.join(unknown)}; known: {', '.join(SETTINGS)}")
    return pd.DataFrame(
        [
            row
            for s in settings
            for b in gbps
            for seed in seeds
            for row in run(SETTINGS[s], b, seed, hours)
        ]
    )


# Columns of the table: figure -> (heading, scale, decimals)
COLUMNS = {
    "step_s": ("T_step mean (s)", 1.0, 2),
    "step_std_s": ("T_step std (s)", 1.0, 2),
    "tokens_per_s": ("tokens/s (k)", 1e-3, 1),
    "wan_gb_per_step": ("WAN GB/step", 1.0, 1),
    "comm_over_compute": ("comm/compute", 1.0, 2),
    "overlap": ("comm hidden (%)", 100.0, 0),
    "extra_tokens": ("extra tokens (%)", 100.0, 0),
    "days_to_target": ("days to target", 1.0, 1),
}


def best_static(frame: pd.DataFrame, figure: str = "step_s") -> str:
    """The baseline with the lowest mean of `figure` over the seeds."""
    static = frame[frame["policy"] != "ours"]
    return str(static.groupby("policy")[figure].mean().idxmin())


def versus(frame: pd.DataFrame, other: str, figure: str = "step_s"):
    """Ours against `other`, paired by seed: mean of (ours - other) / other and its 95% CI."""
    wide = frame.pivot_table(index="seed", columns="policy", values=figure)
    return mean_ci((wide["ours"] - wide[other]) / wide[other])


def headline(frame: pd.DataFrame) -> str:
    """Per setting and bandwidth: ours against the best static baseline on mean T_step (the
    seed's target: 25% lower) and on the days to the target loss, and whose T_step varies
    least."""
    parts = []
    for (label, gbps), block in frame.groupby(["setting", "gbps"], sort=False):
        rival = best_static(block)
        est = versus(block, rival)
        met = (
            "met"
            if est.mean + est.half_width <= -TARGET_CUT
            else f"missed by {100 * (TARGET_CUT + est.mean):.0f} points"
        )
        fastest_to = best_static(block, "days_to_target")
        days = versus(block, fastest_to, "days_to_target")
        std = block.groupby("policy")["step_std_s"].mean()
        parts.append(
            f"{label}, links of {gbps:g} Gbit/s: ours {_pct(est)} on mean T_step "
            f"against the best static plan there ({POLICIES[rival]}), the {TARGET_CUT:.0%} target "
            f"{met} ({reach(block, rival)}); {_pct(days)} on the days to the target loss "
            f"against the best static plan there ({POLICIES[fastest_to]}); the steadiest T_step: "
            f"{POLICIES[str(std.idxmin())]} (std {std.min():.2f} s; ours "
            f"{std['ours']:.2f} s)"
        )
    return "; ".join(parts) + "."


def reach(block: pd.DataFrame, rival: str) -> str:
    """Whether a step TARGET_CUT below `rival`'s can exist: against the free-WAN bound."""
    need = (1 - TARGET_CUT) * block.loc[block["policy"] == rival, "step_s"].mean()
    bound = block["free_wan_step_s"].mean()
    verdict = "out of reach" if need < bound else "within reach"
    return (
        f"{verdict}: it asks {need:,.2f} s a step, and with the WAN free no plan steps "
        f"faster than {bound:,.2f} s"
    )


def _pct(est) -> str:
    half = "–" if math.isnan(est.half_width) else f"{100 * est.half_width:.1f}%"
    return f"{100 * est.mean:+.1f}% ± {half}{'*' if est.significant else ''}"


def markdown(frame: pd.DataFrame, hours: float) -> str:
    """The headline and a table per setting and bandwidth: means ± 95% CI over seeds, and each
    plan's mean T_step against ours', paired by seed."""
    seeds = frame["seed"].nunique()
    lines = [
        headline(frame),
        "",
        f"{seeds} seeds, {hours:g} h of swings each (a sample every "
        f"{SAMPLE_S / 60:.0f} min), means ± 95% CI half-width over seeds; vs ours: "
        f"(plan − ours) / ours, paired by seed (* significant at 95%). "
        f"Tokens to target: {TOKENS_PER_PARAM} a parameter synchronously, DiLoCo "
        f"{100 * DILOCO_EXTRA_TOKENS:g}% more per replica group beyond the first.",
        "",
    ]
    heads = [h for h, _, _ in COLUMNS.values()]
    for (label, gbps), block in frame.groupby(["setting", "gbps"], sort=False):
        lines += [
            f"**{label}, links of {gbps:g} Gbit/s ± {SWING:.0%}**",
            "",
            "| plan | " + " | ".join(heads) + " | T_step vs ours | days vs ours | re-plans |",
            "|---|" + "---:|" * (len(heads) + 3),
        ]
        for policy, rows in block.groupby("policy", sort=False):
            cells = [_cell(rows[k], *spec[1:]) for k, spec in COLUMNS.items()]
            vs = (
                ["–", "–"]
                if policy == "ours"
                else [_pct(_against(block, policy, f)) for f in ("step_s", "days_to_target")]
            )
            lines.append(
                f"| {POLICIES[policy]} | "
                + " | ".join(cells + vs)
                + f" | {rows['replans'].mean():.1f} |"
            )
        lines += ["", _bound_line(block), ""]
    return "\n".join(lines)


def _bound_line(block: pd.DataFrame) -> str:
    """The free-WAN bound under a table, and how far above it each plan steps."""
    bound = block["free_wan_step_s"].mean()
    above = block.groupby("policy", sort=False)["step_s"].mean() / bound - 1
    return (
        f"Free-WAN bound: with every link between domains at {FREE_WAN_GBPS / 1e3:g} Tbit/s "
        f"and no RTT, the fastest plan steps in {bound:,.2f} s; mean T_step above it: "
        + ", ".join(f"{_short(p)} {round(100 * a, 1) + 0.0:+.1f}%" for p, a in above.items())
        + "."
    )


def _short(policy: str) -> str:
    """A plan's name up to its first comma or colon: "DiLoCo", "MAST-style"."""
    return POLICIES[policy].split(",")[0].split(":")[0]


def _against(block: pd.DataFrame, policy: str, figure: str):
    """`policy` against ours on `figure`, paired by seed: (policy - ours) / ours."""
    wide = block.pivot_table(index="seed", columns="policy", values=figure)
    return mean_ci((wide[policy] - wide["ours"]) / wide["ours"])


def _cell(values: pd.Series, scale: float, decimals: int) -> str:
    est = mean_ci(values)
    half = "–" if math.isnan(est.half_width) else f"{est.half_width * scale:,.{decimals}f}"
    return f"{est.mean * scale:,.{decimals}f} ± {half}"


def plot(frame: pd.DataFrame, path: Path) -> None:
    """Mean T_step and days to the target loss per plan, 95% CIs over seeds, a column of
    panels per setting and bandwidth (log scale: the synchronous plans are far above)."""
    blocks = list(frame.groupby(["setting", "gbps"], sort=False))
    fig, axes = plt.subplots(2, len(blocks), figsize=(4.8 * len(blocks), 7.5), squeeze=False)
    for col, ((label, gbps), block) in enumerate(blocks):
        names = list(dict.fromkeys(block["policy"]))
        for row, (figure, heading) in enumerate(
            (("step_s", "mean T_step (s)"), ("days_to_target", "days to target loss"))
        ):
            ax = axes[row][col]
            est = [mean_ci(block.loc[block["policy"] == p, figure]) for p in names]
            ax.bar(
                range(len(names)),
                [e.mean for e in est],
                yerr=[0 if math.isnan(e.half_width) else e.half_width for e in est],
                color=[f"C{i}" for i in range(len(names))],
                capsize=3,
            )
            if figure == "step_s":
                bound = block["free_wan_step_s"].mean()
                ax.axhline(bound, color="k", ls="--", lw=1, label="free-WAN bound")
                ax.legend(fontsize=8)
            ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
            ax.set_yscale("log")
            ax.set(title=f"{label}\nlinks {gbps:g} Gbit/s ± {SWING:.0%}", ylabel=heading)
            ax.grid(alpha=0.3, axis="y", which="both")
    fig.tight_layout()
    _save(fig, path)


def write(out: Path, frame: pd.DataFrame, text: str) -> None:
    """single_job.csv (a row per setting, bandwidth, seed and plan), .md and .png in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "single_job.csv", index=False)
    (out / "single_job.md").write_text(text + "\n")
    plot(frame, out / "single_job.png")
