"""The trained agents at work: restore the modules, decide for one job, explain the choice.

Used in-process by the `ppo` policy and behind the Serve endpoint; both take the same path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xdscheduler.errors import UserError
from xdscheduler.planner.policies import Placement, PlannerPolicy
from xdscheduler.planner.search import JobSpec, describe
from xdscheduler.planner.view import ClusterView
from xdscheduler.rl.candidates import (
    WAIT,
    Choices,
    DecisionQueue,
    choices,
    lower_observation,
    upper_observation,
)
from xdscheduler.scenario import Weights

SHIPPED = Path(__file__).resolve().parent / "trained"  # see TRAINED.md there: how it was made


@dataclass
class Verdict:
    """One decision: the placement (None = wait), the alternatives and why."""

    job: str
    placement: Placement | None
    alternatives: list[dict]
    explanation: dict
    decision_ms: float


def _restore(path: Path):
    from ray.rllib.core.rl_module.rl_module import RLModule

    if not (path / "upper").is_dir() or not (path / "lower").is_dir():
        raise UserError(f"{path}: not a trained policy (expected upper/ and lower/ modules "
                        f"inside; make one with `xds train`)")
    return RLModule.from_checkpoint(str(path / "upper")), RLModule.from_checkpoint(
        str(path / "lower"))


class Agents:
    """The upper and lower modules, restored for inference without the trainer."""

    def __init__(self, weights: Weights, path: str | Path | None = None):
        import torch

        torch.set_num_threads(1)  # one decision at a time; threads only add latency here
        self.weights = weights
        self.path = Path(path) if path else SHIPPED
        self.upper, self.lower = _restore(self.path)

    def act(self, module, obs: dict) -> int:
        import torch
        from ray.rllib.core.columns import Columns

        batch = {k: torch.from_numpy(v).unsqueeze(0) for k, v in obs.items()}
        with torch.no_grad():
            logits = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
        return int(torch.argmax(logits[0]))

    def choose(self, ch: Choices, queue_len: int = 1) -> int | None:
        """The evaluated candidate the agents pick (upper, then lower), or None to wait."""
        a = self.act(self.upper, upper_observation(ch, queue_len))
        if a == WAIT or a >= len(ch.groups):
            return None
        members = ch.groups[a]
        b = self.act(self.lower, lower_observation(ch, a, queue_len))
        return int(members[b if b < len(members) else 0])

    def decide(self, job: JobSpec, view: ClusterView, queue_len: int = 1) -> Verdict | None:
        """None when nothing fits now; a verdict with placement None when the agent waits."""
        start = time.perf_counter()
        ch = choices(job, view, self.weights)
        if ch is None:
            return None
        chosen = self.choose(ch, queue_len)
        if chosen is None:
            ms = (time.perf_counter() - start) * 1000
            return Verdict(job.name, None, _alternatives(ch, -1),
                           {"summary": f"{job.name}: wait; the agent holds it for later"}, ms)
        ms = (time.perf_counter() - start) * 1000
        why = explanation(ch, chosen)
        return Verdict(job.name, ch.placement(chosen, why["summary"], ms),
                       _alternatives(ch, chosen), why, ms)


def _alternatives(ch: Choices, chosen: int) -> list[dict]:
    """The best plan of every other allocation open to the job, with its objective terms."""
    out = []
    for g in range(len(ch.groups)):
        i = ch.best(g)
        if i != chosen:
            c = ch.candidate(i)
            out.append({"summary": describe(c), "gpus_per_domain": c.gpus_per_domain,
                        "predicted_step_time_s": c.step_time_s,
                        "objective": c.objective.as_dict()})
    return out


def _where(c) -> str:
    return "+".join(f"{n}×{g}" for n, g in c.gpus_per_domain.items())


def explanation(ch: Choices, chosen: int) -> dict:
    """The objective terms of the choice against the runner-up (the best other choice open),
    weighted, and one line a person can read."""
    c = ch.candidate(chosen)
    others = [int(i) for g in ch.groups for i in g if int(i) != chosen]
    out = {"chosen": describe(c), "contributions": {}}
    if not others:
        out["summary"] = f"{ch.job.name}: {describe(c)}; the only choice open."
        return out
    r = ch.candidate(max(others, key=ch.objective))
    w = ch.weights
    for term, weight in (("efficiency", w.efficiency), ("utilization", w.utilization),
                         ("cost", -w.cost)):
        a, b = getattr(c.objective, term), getattr(r.objective, term)
        out["contributions"][term] = {"chosen": a, "runner_up": b,
                                      "weighted_delta": weight * (a - b)}
    out["contributions"]["step_time_s"] = {"chosen": c.step_time_s, "runner_up": r.step_time_s}
    deltas = {k: v["weighted_delta"] for k, v in out["contributions"].items()
              if "weighted_delta" in v}
    lead = max(deltas, key=lambda k: abs(deltas[k]))
    verb = "gains" if deltas[lead] >= 0 else "gives up"
    parts = ", ".join(f"{k} {v:+.3f}" for k, v in deltas.items())
    out["runner_up"] = describe(r)
    out["summary"] = (f"{ch.job.name}: {c.kind} on {_where(c)} (TP {c.plan.tp} PP {c.plan.pp} "
                      f"DP {c.plan.dp}) over {r.kind} on {_where(r)} (TP {r.plan.tp} PP "
                      f"{r.plan.pp} DP {r.plan.dp}); it {verb} most on {lead} "
                      f"(weighted: {parts}; R {sum(deltas.values()):+.3f}).")
    return out


@dataclass
class PPOPolicy:
    """The `ppo` policy of a study: the agents place queued jobs (in this process, or behind
    the Serve endpoint when `decide_one` calls it); running jobs are re-planned on triggers by
    the planner's search."""

    weights: Weights
    decide_one: Callable[[JobSpec, ClusterView, int], Verdict | None]
    name: str = "ppo"

    def __post_init__(self):
        self.queue = DecisionQueue()
        self.planner = PlannerPolicy(self.weights)

    def decide(self, queue: list[JobSpec], view: ClusterView, now_s: float) -> list[Placement]:
        out = []
        for job in queue[: self.queue.lookahead]:
            if not self.queue.worth_trying(job, view):
                continue
            verdict = self.decide_one(job, view, len(queue))
            if verdict is None or verdict.placement is None:
                self.queue.did_not_fit(job, view)
                continue
            out.append(verdict.placement)
            view = view.adjust_free({i: -n for i, n in verdict.placement.taken.items()})
        return out

    def replan(self, job: JobSpec, current: Placement, view: ClusterView) -> Placement | None:
        return self.planner.replan(job, current, view)


def local_policy(weights: Weights, path: str | Path | None = None) -> PPOPolicy:
    return PPOPolicy(weights, Agents(weights, path).decide)
