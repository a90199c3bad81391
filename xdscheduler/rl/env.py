"""The placement environment: the study engine of `xds run`, with the agents taking its decisions.

No actors inside, so it steps as fast as the plan search. Each decision is two agent steps:
the upper agent picks an allocation for the job at the head of the queue (or waits), then the
lower agent of the allocation's lead domain picks the parallel plan and stage order. Both are
rewarded with R = w1·efficiency + w2·utilisation − w3·cost of what was placed (0 for waiting)
less the R of the best choice open (minus the regret): the same optimum as R itself, without the
spread of R between states that would otherwise drown the small differences between plans.
Episodes start after a random warm-up run by the planner, so the agents see loaded clusters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from xdscheduler.perception.graph import EDGE_FEATURES, MAX_EDGES, MAX_NODES, NODE_FEATURES
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.rl.candidates import (
    CHOICE_FEATURES,
    CONTEXT_FEATURES,
    LOWER_CHOICES,
    UPPER_CHOICES,
    WAIT,
    Choices,
    DecisionQueue,
    choices,
    lower_observation,
    upper_observation,
)
from xdscheduler.runtime.study import study_dynamics, study_jobs
from xdscheduler.scenario import Weights, default_scenario_path, load_scenario
from xdscheduler.sim.domain import LocalDomains
from xdscheduler.sim.engine import Engine

UPPER = "upper"
TRAINING_SEEDS = 1000  # episode workloads are seeded from here up; studies use smaller seeds
REWARD_SCALE = 10.0  # regrets are a few hundredths of R; PPO's updates want them near 1


def lower_agent(domain: str) -> str:
    return f"lower_{domain}"


def module_of(agent_id: str, *args, **kwargs) -> str:
    """Policy mapping: one upper module; every domain's lower agent shares one module."""
    return UPPER if agent_id == UPPER else "lower"


def observation_space(n_choices: int) -> gym.spaces.Dict:
    def box(*shape, low=-np.inf, high=np.inf):
        return gym.spaces.Box(low, high, shape=shape, dtype=np.float32)

    return gym.spaces.Dict({
        "nodes": box(MAX_NODES, NODE_FEATURES), "node_mask": box(MAX_NODES, low=0, high=1),
        "edge_index": box(2, MAX_EDGES, low=0, high=MAX_NODES),
        "edges": box(MAX_EDGES, EDGE_FEATURES), "edge_mask": box(MAX_EDGES, low=0, high=1),
        "choices": box(n_choices, CHOICE_FEATURES),
        "choice_nodes": box(n_choices, MAX_NODES, low=0, high=1),
        "action_mask": box(n_choices, low=0, high=1), "context": box(CONTEXT_FEATURES),
    })


@dataclass
class AgentsDecide:
    """The engine's policy while agents decide: placements come from outside `step`; running
    jobs are re-planned on triggers by the planner's search."""

    planner: PlannerPolicy
    active: bool = False
    name: str = "ppo"

    def decide(self, queue, view, now_s):
        return self.planner.decide(queue, view, now_s) if not self.active else []

    def replan(self, job, current, view):
        return self.planner.replan(job, current, view)


class PlacementEnv(MultiAgentEnv):
    """config: scenario (path), weights ({efficiency, utilization, cost}), hours (workload
    per episode), warmup_hours, max_decisions, seed."""

    def __init__(self, config: dict | None = None):
        super().__init__()
        config = dict(config or {})
        self.scn = load_scenario(config.get("scenario") or default_scenario_path())
        w = config.get("weights")
        self.weights = Weights(**w) if w else self.scn.weights
        self.hours = float(config.get("hours", 3.0))
        self.warmup_hours = float(config.get("warmup_hours", 1.0))
        self.max_decisions = int(config.get("max_decisions", 12))
        self.rng = np.random.default_rng(config.get("seed", 0))
        lowers = [lower_agent(d.name) for d in self.scn.domains]
        self.possible_agents = [UPPER, *lowers]
        self.agents = list(self.possible_agents)
        self.observation_spaces = {UPPER: observation_space(UPPER_CHOICES)}
        self.observation_spaces.update({a: observation_space(LOWER_CHOICES) for a in lowers})
        self.action_spaces = {UPPER: gym.spaces.Discrete(UPPER_CHOICES)}
        self.action_spaces.update({a: gym.spaces.Discrete(LOWER_CHOICES) for a in lowers})

    # ------------------------------------------------------------------ episodes

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        while True:  # a workload with nothing to decide is drawn again
            obs = self._start_episode(TRAINING_SEEDS + int(self.rng.integers(2**30)))
            if obs is not None:
                return {UPPER: obs}, {}

    def _start_episode(self, seed: int):
        jobs = study_jobs(self.scn, self.hours, seed)
        dynamics = study_dynamics(self.scn, seed, self.hours)
        self.policy = AgentsDecide(PlannerPolicy(self.weights))
        self.engine = Engine(self.scn, jobs, self.policy, dynamics,
                             LocalDomains(list(self.scn.domains), dynamics), self.hours * 3600)
        warmup = float(self.rng.uniform(0, self.warmup_hours)) * 3600
        self.engine.run(until_s=warmup)
        self.policy.active = True
        self.queue = DecisionQueue()
        self.todo: list = []
        self.decisions = 0
        self.last_obs: dict = {}
        self.current: Choices | None = None
        return self._next_upper()

    def _next_upper(self):
        """Advance the engine to the next job that has somewhere to go; None at the end."""
        eng = self.engine
        while True:
            while self.todo:
                run = self.todo.pop(0)
                if run not in eng.queue or not self.queue.worth_trying(run.spec, eng.view):
                    continue
                ch = choices(run.spec, eng.view, self.weights)
                if ch is None:
                    self.queue.did_not_fit(run.spec, eng.view)
                    continue
                self.current, self.run = ch, run
                return self._remember(UPPER, upper_observation(ch, len(eng.queue)))
            t = eng.next_event()
            if t == math.inf or t > eng.end_limit_s or eng.finished:
                return None
            eng.step(t)
            self.todo = eng.ordered_queue()[: self.queue.lookahead]

    def _remember(self, agent: str, obs: dict) -> dict:
        self.last_obs[agent] = obs
        return obs

    # ------------------------------------------------------------------ steps

    def step(self, action_dict):
        if UPPER in action_dict:
            return self._upper(int(action_dict[UPPER]))
        (agent, action), = action_dict.items()
        return self._lower(agent, int(action))

    def _upper(self, action: int):
        ch = self.current
        if action == WAIT or action >= len(ch.groups):
            self.queue.did_not_fit(self.run.spec, self.engine.view)  # until something frees
            return self._after_decision({UPPER: self._reward(0.0)})
        self.group = action
        lead = self.engine.names[int(np.argmax(ch.alloc[ch.best(action)]))]
        agent = lower_agent(lead)
        obs = self._remember(agent, lower_observation(ch, action, len(self.engine.queue)))
        return {agent: obs}, {}, {"__all__": False}, {"__all__": False}, {}

    def _lower(self, agent: str, action: int):
        members = self.current.groups[self.group]
        i = int(members[action if action < len(members) else 0])
        self.engine.place(self.run, self.current.placement(i))
        r = self._reward(self.current.objective(i))
        return self._after_decision({UPPER: r, agent: r})

    def _reward(self, objective: float) -> float:
        return REWARD_SCALE * (objective - self.current.objective(self.current.best(0)))

    def _after_decision(self, rewards: dict):
        self.decisions += 1
        obs = None if self.decisions >= self.max_decisions else self._next_upper()
        if obs is not None:
            return {UPPER: obs}, rewards, {"__all__": False}, {"__all__": False}, {}
        # Every agent that acted gets its last observation and its reward with the ending.
        final = dict(self.last_obs)
        rewards = {a: rewards.get(a, 0.0) for a in final}
        ended = self.decisions < self.max_decisions
        return final, rewards, {"__all__": ended}, {"__all__": not ended}, {}
