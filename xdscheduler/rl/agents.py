"""The trained agents at work: restore the modules, decide for one job, explain the choice.

Used in-process by the `ppo` policy and behind the Serve endpoint; both take the same path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from xdscheduler.errors import UserError
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policies import DecisionQueue, PlannerPolicy, is_giant, queue_pass
from xdscheduler.planner.search import JobSpec, describe
from xdscheduler.planner.space import SearchOptions
from xdscheduler.planner.view import ClusterView
from xdscheduler.rl.candidates import (
    LOWER_CHOICES,
    OPTIONS,
    WAIT,
    Choices,
    choices,
    lower_observation,
    upper_observation,
)
from xdscheduler.scenario import Weights

TRAINED = Path(__file__).resolve().parent / "trained"  # see TRAINED.md there: how they were made
SHIPPED = TRAINED / "study"  # `xds run --policies ppo`: trained on the study reward
SHIPPED_DECISION = TRAINED / "decision"  # any weighting, per decision: the sweep starts here
TERMS = ("efficiency", "utilization", "cost", "objective")


# Who picks the parallel plan inside the allocation the upper agent chose: "search" (the plan
# search's best, exact in milliseconds) or "agent" (the lower agent). Over 4 seeds × loads
# 0.6-1.2 on both default scenarios, the trained lower agent's picks lowered R against the
# search's best (by up to 4 points on the six regions) and never raised it: the plan inside an
# allocation changes nothing for the jobs behind, so there is nothing to learn beyond the search.
LOWER = "search"


@dataclass
class AgentDecision:
    """The agents' decision for one job: the placement (None = wait), the alternatives and
    why."""

    job: str
    placement: Placement | None
    alternatives: list[dict]
    explanation: dict
    decision_ms: float


def _restore(path: Path):
    from ray.rllib.core.rl_module.rl_module import RLModule

    if not (path / "upper").is_dir() or not (path / "lower").is_dir():
        raise UserError(
            f"{path}: not a trained policy (expected upper/ and lower/ modules "
            f"inside; make one with `xds train`)"
        )
    return RLModule.from_checkpoint(str(path / "upper")), RLModule.from_checkpoint(
        str(path / "lower")
    )


@dataclass
class Step:
    """One agent's act: its pick, the others open in the order it ranks them, and why."""

    agent: str
    choice: int
    probabilities: list[float]
    ranking: list[int]
    explanation: dict


# The lower step under LOWER "search": the search's best plan, decided before any agent acts.
SEARCH_STEP = Step(
    "lower",
    0,
    [1.0],
    [0],
    {"summary": "the search's best plan in this allocation", "contributions": {}},
)


class Agents:
    """The upper and lower modules, restored for inference without the trainer."""

    def __init__(self, weights: Weights, path: str | Path | None = None):
        import torch

        torch.set_num_threads(1)  # one decision at a time; threads only add latency here
        self.weights = weights
        self.path = Path(path).resolve() if path else SHIPPED  # RLlib reads absolute paths
        self.modules = dict(zip(("upper", "lower"), _restore(self.path), strict=True))

    def logits(self, agent: str, obs: dict) -> np.ndarray:
        return self.batch_logits([(agent, obs)])[0]

    def batch_logits(self, asks: list[tuple[str, dict]]) -> list[np.ndarray]:
        """The logits of each (agent, observation): one forward pass for the observations of
        one agent on graphs of one size (each row as it would be alone: the graphs of a batch
        are disjoint)."""
        import torch
        from ray.rllib.core.columns import Columns

        groups: dict[tuple, list[int]] = {}
        for i, (agent, obs) in enumerate(asks):
            groups.setdefault((agent, *(v.shape for v in obs.values())), []).append(i)
        out: dict[int, np.ndarray] = {}  # ask -> its logits
        for (agent, *_), members in groups.items():
            batch = {
                k: torch.from_numpy(np.stack([asks[i][1][k] for i in members]))
                for k in asks[members[0]][1]
            }
            with torch.inference_mode():
                rows = self.modules[agent].forward_inference({Columns.OBS: batch})
            for i, row in zip(members, rows[Columns.ACTION_DIST_INPUTS].numpy(), strict=True):
                out[i] = row
        return [out[i] for i in range(len(asks))]

    def step(
        self, agent: str, obs: dict, options: dict[int, dict], logits: np.ndarray | None = None
    ) -> Step:
        """The agent's greedy act on `obs` (on its `logits` when the caller has them),
        explained against its own runner-up."""
        logits = self.logits(agent, obs) if logits is None else logits
        open_ = np.flatnonzero(obs["action_mask"] > 0.5)
        probs = np.zeros_like(logits)
        z = np.exp(logits[open_] - logits[open_].max())
        probs[open_] = z / z.sum()
        ranking = [int(i) for i in open_[np.argsort(-probs[open_], kind="stable")]]
        runner = ranking[1] if len(ranking) > 1 else None
        return Step(
            agent,
            ranking[0],
            probs.tolist(),
            ranking,
            contrast(options, ranking[0], runner, self.weights),
        )

    def choose(self, ch: Choices, queue_len: int = 1) -> int | None:
        """The evaluated candidate the agents pick (upper, then lower), or None to wait."""
        a = (
            0
            if len(ch.groups) == 1
            else int(np.argmax(self.logits("upper", upper_observation(ch, queue_len))))
        )
        if a == WAIT or a >= len(ch.groups):
            return None
        members = ch.groups[a]
        b = int(np.argmax(self.logits("lower", lower_observation(ch, a, queue_len))))
        return int(members[b if b < len(members) else 0])

    def decide(
        self,
        job: JobSpec,
        view: ClusterView,
        queue_len: int = 1,
        now_s: float = 0.0,
        weights: Weights | None = None,
    ) -> AgentDecision | None:
        return decide(
            self, self.weights if weights is None else weights, job, view, queue_len, now_s
        )


def decide(
    stepper,
    weights: Weights,
    job: JobSpec,
    view: ClusterView,
    queue_len: int = 1,
    now_s: float = 0.0,
    opts: SearchOptions = OPTIONS,
) -> AgentDecision | None:
    """Search the candidates here (in the space `opts`), let the upper agent pick an
    allocation and, with LOWER "agent", the lower agent a plan inside it (in this process or
    behind the endpoint: `stepper.step`); with "search", the search's best plan inside it. None
    when nothing fits now; a verdict with placement None when the upper agent waits."""
    start = time.perf_counter()
    ch = choices(job, view, weights, now_s, opts)
    if ch is None:
        return None
    if len(ch.groups) == 1:  # one allocation open: nothing for the upper agent to weigh
        up = Step(
            "upper", 0, [1.0], [0], {"summary": "the only allocation offered", "contributions": {}}
        )
    else:
        up = stepper.step("upper", upper_observation(ch, queue_len), upper_options(ch))
    if up.choice == WAIT or up.choice >= len(ch.groups):
        ms = (time.perf_counter() - start) * 1000
        return AgentDecision(
            job.name,
            None,
            _alternatives(ch, -1),
            {"summary": f"{job.name}: {up.explanation['summary']}", "steps": [up.explanation]},
            ms,
        )
    members = ch.groups[up.choice]
    low = (
        stepper.step(
            "lower", lower_observation(ch, up.choice, queue_len), lower_options(ch, up.choice)
        )
        if LOWER == "agent"
        else SEARCH_STEP
    )
    chosen = int(members[low.choice if low.choice < len(members) else 0])
    ms = (time.perf_counter() - start) * 1000
    why = explanation(ch, chosen, up.choice)
    why["steps"] = [up.explanation, low.explanation]
    return AgentDecision(
        job.name,
        ch.placement(chosen, up.choice, why["summary"], ms),
        _alternatives(ch, chosen),
        why,
        ms,
    )


def _alternatives(ch: Choices, chosen: int) -> list[dict]:
    """What else was open: the best plan of every other allocation, then the next plans of the
    chosen allocation, each with its objective terms."""
    mine = next((g for g in ch.groups if chosen in g), ())
    others = [ch.best(g) for g in range(len(ch.groups)) if chosen not in ch.groups[g]]
    out = []
    for i in [*others, *(int(i) for i in mine if i != chosen)][:LOWER_CHOICES]:
        c = ch.candidate(i)
        assert c.objective is not None  # the search scores every candidate
        out.append(
            {
                "summary": describe(c),
                "gpus_per_domain": c.gpus_per_domain,
                "predicted_step_time_s": c.estimated.step_time_s,
                "objective": c.objective.as_dict(),
            }
        )
    return out


def explanation(ch: Choices, chosen: int, group: int) -> dict:
    """The decision's objective terms against the runner-up (the best other choice open)."""
    others = [int(i) for g in ch.groups for i in g if int(i) != chosen]
    if not others:
        return {
            "summary": f"{ch.job.name}: {describe(ch.candidate(chosen))}; the only choice open.",
            "contributions": {},
        }
    a, b = option(ch, chosen, group), option(ch, max(others, key=ch.objective))
    out = contrast({0: a, 1: b}, 0, 1, ch.weights)
    out["summary"] = f"{ch.job.name}: {out['summary']}."
    out["contributions"]["step_time_s"] = {
        "chosen": a["terms"]["step_time_s"],
        "runner_up": b["terms"]["step_time_s"],
    }
    return out


def _where(c: Placement) -> str:
    return "+".join(f"{n}×{g}" for n, g in c.gpus_per_domain.items())


def option(ch: Choices, i: int, group: int | None = None) -> dict:
    """Candidate i (of allocation `group`, whose held-back domains it names) as an agent's
    explanation names it: one line, its objective terms and the job's own efficiency."""
    c = ch.candidate(i)
    p = c.plan
    off = ch.keep_off[group] if group is not None else ()
    keep = (
        f", keeping off {'+'.join(ch.view.names[d] for d in off)} for the jobs behind"
        if off
        else ""
    )
    return {
        "summary": f"{c.kind} on {_where(c)} (TP {p.tp} PP {p.pp} DP {p.dp}){keep}",
        "terms": {
            **{k: getattr(c.objective, k) for k in TERMS},
            "job_efficiency": float(ch.job_efficiency(i)),
            "step_time_s": c.estimated.step_time_s,
        },
    }


WAIT_OPTION = {
    "summary": "wait for accelerators to free",
    "terms": {**dict.fromkeys(TERMS, 0.0), "step_time_s": None},
}


def upper_options(ch: Choices) -> dict[int, dict]:
    out = {g: option(ch, ch.best(g), g) for g in range(len(ch.groups))}
    return {**out, WAIT: WAIT_OPTION}


def lower_options(ch: Choices, group: int) -> dict[int, dict]:
    return {k: option(ch, int(i), group) for k, i in enumerate(ch.groups[group])}


def contrast(options: dict[int, dict], chosen: int, runner: int | None, weights: Weights) -> dict:
    """The weighted objective terms of one agent's pick against its runner-up, and a line."""
    a = options.get(chosen)
    if a is None:
        return {"summary": f"choice {chosen}", "contributions": {}}
    b = options.get(runner) if runner is not None else None
    if b is None:
        return {"summary": f"{a['summary']}; the only choice open", "contributions": {}}
    contributions = {
        term: {
            "chosen": a["terms"][term],
            "runner_up": b["terms"][term],
            "weighted_delta": w * (a["terms"][term] - b["terms"][term]),
        }
        for term, w in (
            ("efficiency", weights.efficiency),
            ("utilization", weights.utilization),
            ("cost", -weights.cost),
        )
    }
    deltas = {k: v["weighted_delta"] for k, v in contributions.items()}
    lead = max(deltas, key=lambda k: abs(deltas[k]))
    verb = "gains" if deltas[lead] >= 0 else "gives up"
    return {
        "summary": f"{a['summary']} over {b['summary']}: {verb} most on {lead} (R "
        f"{sum(deltas.values()):+.3f})",
        "chosen": a["summary"],
        "runner_up": b["summary"],
        "contributions": contributions,
    }


@dataclass
class PPOPolicy:
    """The `ppo` policy of a study: the agents place queued jobs (in this process, or behind
    the Serve endpoint when `decide_one` calls it); running jobs are re-planned on triggers by
    the planner's search. Each job's choices are weighed as the planner weighs them: its WAN
    bill as the study counts it (`PlannerPolicy.job_weights`)."""

    weights: Weights
    decide_one: Callable[[JobSpec, ClusterView, int, float, Weights], AgentDecision | None]
    name: str = "ppo"
    single_domain = False

    def __post_init__(self):
        self.queue = DecisionQueue()
        self.planner = PlannerPolicy(self.weights)

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        """The planner's pass over the queue (`queue_pass`), each job placed by the agents."""

        def place(job: JobSpec, seen: ClusterView, modest: bool, at_s: float) -> Placement | None:
            if modest and is_giant(job, seen):  # a giant, others waiting:
                job = replace(job, gpus_max=job.gpus_min)  # at its minimum, as the planner's
            verdict = self.decide_one(job, seen, len(queue), at_s, self.planner.job_weights(job))
            return verdict.placement if verdict is not None else None

        self.planner.seen.record(queue)
        return queue_pass(queue, view, now_s, place, self.queue)

    def replan(self, job: JobSpec, current: Placement, view: ClusterView) -> Placement | None:
        return self.planner.replan(job, current, view)


def local_policy(weights: Weights, path: str | Path | None = None) -> PPOPolicy:
    return PPOPolicy(weights, Agents(weights, path).decide)


# The registry's entries from this layer: the agents deciding in this process.
POLICIES = {"ppo": lambda weights, options: local_policy(weights, options.get("policy_path"))}
