"""The placement environment: the study engine of `xds run`, with the agents taking its decisions.

No actors inside, so it steps as fast as the plan search. The engine runs as in a study, to the
next moment queued jobs may be placed (`Engine.next_decision`), and the agents decide there in
the planner's place. Each decision is one or two agent steps: where more than one allocation is
offered, the upper agent picks one for the job at the head of the queue (or waits); then the
lower agent of the allocation's lead domain picks the parallel plan and stage order. Running
jobs are re-planned on triggers by the planner's search.

Two rewards:
- `study` (the default): the upper agent's decision is worth its advantage over the planner's
  own decision in the same state on the study objective over the next hours, both continued
  by the planner (`rl/rollout.py`); the lower agent's is the regret of its plan inside the
  allocation. What a placement takes from the jobs behind it shows in their times hours later:
  the rollouts put it on the decision, so the agents learn when to hold the fastest
  accelerators for what is coming, which the planner, greedy in time, never weighs.
- `decision`: R = w1·efficiency + w2·utilisation − w3·cost against what is free now, less the
  R of the best choice open (minus the regret): the per-decision trade-off a weight sweep maps,
  without the spread of R between states that would drown the small differences between plans.
Episodes start after a random warm-up run by the planner, so the agents see loaded clusters.
"""

from __future__ import annotations

from collections.abc import Hashable

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from xdscheduler.planner.policies import DecisionQueue, PlannerPolicy
from xdscheduler.rl.candidates import (
    LOWER_CHOICES,
    UPPER_CHOICES,
    WAIT,
    Choices,
    choices,
    lower_observation,
    observation_space,
    upper_observation,
)
from xdscheduler.rl.randomised import NAMES, random_scenario
from xdscheduler.rl.rollout import advantage
from xdscheduler.scenario import Weights, default_scenario_path, load_scenario
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs

UPPER = "upper"
TRAINING_SEEDS = 1000  # episode workloads are seeded from here up; studies use smaller seeds
REWARDS = ("study", "decision")
RANDOM = "random"  # the scenario config that draws a cluster per episode
# Regrets are a few hundredths of R and PPO's updates want them near 1; a study reward is
# already in units of one job's objective.
REWARD_SCALE = {"study": 1.0, "decision": 10.0}


def lower_agent(domain: str) -> str:
    return f"lower_{domain}"


def module_of(agent_id: Hashable, *args, **kwargs) -> str:
    """Policy mapping: one upper module; every domain's lower agent shares one module."""
    return UPPER if agent_id == UPPER else "lower"


def sampled_weights(rng: np.random.Generator) -> Weights:
    """A weighting of R to train under: any mix of efficiency and utilisation, and a cost
    weight that is zero three times in ten, else log-uniform over 0.1-5 (WAN cost is a few
    hundredths of the accelerators' and needs a large weight to matter)."""
    cost = 0.0 if rng.random() < 0.3 else float(np.exp(rng.uniform(np.log(0.1), np.log(5))))
    return Weights(
        efficiency=float(rng.uniform(0.1, 1.0)), utilization=float(rng.uniform(0.0, 1.0)), cost=cost
    )


class PlacementEnv(MultiAgentEnv):
    """config: scenario (a path, or "random": a cluster drawn afresh each episode, see
    `rl/randomised.py`), weights ({efficiency, utilization, cost}, or "sampled": drawn afresh
    each episode, so one policy learns every weighting), reward (study or decision), hours
    (workload per episode), warmup_hours, window_hours (simulated time the agents decide in),
    max_decisions, seed."""

    def __init__(self, config: dict | None = None):
        super().__init__()
        config = dict(config or {})
        path = config.get("scenario")
        self.randomised = path == RANDOM
        self.template = load_scenario(
            path if path and not self.randomised else default_scenario_path()
        )
        self.scn = self.template
        w = config.get("weights")
        self.sampled = w == "sampled"
        self.weights = Weights(**w) if w and not self.sampled else self.scn.weights
        self.reward = config.get("reward", "study")
        if self.reward not in REWARDS:
            raise ValueError(f"reward {self.reward!r}: accepted {', '.join(REWARDS)}")
        self.hours = float(config.get("hours", 3.0))
        self.warmup_hours = float(config.get("warmup_hours", 1.0))
        self.window_s = float(config.get("window_hours", self.hours)) * 3600
        self.rollout_hours = float(config.get("rollout_hours", 2.0))
        self.max_decisions = int(config.get("max_decisions", 12))
        self.rng = np.random.default_rng(config.get("seed", 0))
        # a random cluster's domains: every lower agent one of them may have
        names = list(NAMES) if self.randomised else [d.name for d in self.scn.domains]
        lowers = [lower_agent(n) for n in names]
        self.possible_agents = [UPPER, *lowers]
        self.agents = list(self.possible_agents)
        k = len(names)
        self.observation_spaces = {UPPER: observation_space(UPPER_CHOICES, k)}
        self.observation_spaces.update({a: observation_space(LOWER_CHOICES, k) for a in lowers})
        self.action_spaces = {UPPER: gym.spaces.Discrete(UPPER_CHOICES)}
        self.action_spaces.update({a: gym.spaces.Discrete(LOWER_CHOICES) for a in lowers})

    # ------------------------------------------------------------------ episodes

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        while True:  # a workload with nothing to decide is drawn again
            obs = self._start_episode(TRAINING_SEEDS + int(self.rng.integers(2**30)))
            if obs is not None:
                return obs, {}

    def _start_episode(self, seed: int):
        if self.sampled:
            self.weights = sampled_weights(self.rng)
        if self.randomised:
            self.scn = random_scenario(self.rng, self.template)  # with the template's weights
        self.engine = Engine(
            StudyInputs.drawn(self.scn, self.hours, seed), PlannerPolicy(self.weights)
        )
        warmup = float(self.rng.uniform(0, self.warmup_hours)) * 3600
        self.engine.run(until_s=warmup)  # the planner decides until the agents' window
        self.until_s = warmup + self.window_s
        self.queue = DecisionQueue()
        self.todo: list = []
        self.decisions = 0
        self.last_obs: dict = {}
        self.current: Choices | None = None
        self.over = False
        return self._next_decision()

    def _next_decision(self):
        """Advance the engine to the next job that has somewhere to go and return the first
        observation of its decision (the upper agent's, or the lower one's when there is only
        one allocation to choose); None at the end."""
        eng = self.engine
        while True:
            while self.todo:
                run = self.todo.pop(0)
                if run not in eng.queue or not self.queue.worth_trying(run.spec, eng.view, eng.now):
                    continue
                # the links as the running jobs leave them, as a study's policies see them
                ch = choices(run.spec, eng.speeds.links_left(), self.weights, eng.now)
                if ch is None:
                    self.queue.did_not_fit(run.spec, eng.view, eng.now)
                    continue
                self.current, self.run = ch, run
                self.upper_acted = len(ch.groups) > 1
                if not self.upper_acted:
                    return self._lower_turn(0)
                return {UPPER: self._remember(UPPER, upper_observation(ch, len(eng.queue)))}
            point = eng.next_decision(self.until_s)
            if point is None:
                self.over = eng.finished or eng.next_event() > eng.end_limit_s
                return None
            # as the planner's pass does: a job that left the queue and came back is tried afresh
            self.queue.forget_all_but([run.spec for run in point.queue])
            self.todo = point.queue[: self.queue.lookahead]

    def _remember(self, agent: str, obs: dict) -> dict:
        self.last_obs[agent] = obs
        return obs

    # ------------------------------------------------------------------ steps

    def step(self, action_dict):
        if UPPER in action_dict:
            return self._upper(int(action_dict[UPPER]))
        ((agent, action),) = action_dict.items()
        return self._lower(agent, int(action))

    @property
    def offered(self) -> Choices:
        """The choices of the decision under way (set before any agent is asked)."""
        assert self.current is not None, "no decision under way"
        return self.current

    def _upper(self, action: int):
        ch = self.offered
        if action == WAIT or action >= len(ch.groups):
            reward = self._reward(None)
            # until something frees (or, for a giant, its efficiency floor halves)
            self.queue.did_not_fit(self.run.spec, self.engine.view, self.engine.now)
            return self._after_decision({UPPER: reward})
        return self._lower_turn(action), {}, {"__all__": False}, {"__all__": False}, {}

    def _lower_turn(self, group: int) -> dict:
        """The observation of the lower agent of allocation `group`'s lead domain."""
        ch = self.offered
        self.group = group
        agent = lower_agent(self.engine.names[int(np.argmax(ch.alloc[ch.best(group)]))])
        return {agent: self._remember(agent, lower_observation(ch, group, len(self.engine.queue)))}

    def _lower(self, agent: str, action: int):
        ch, g = self.offered, self.group
        members = ch.groups[g]
        i = int(members[action if action < len(members) else 0])
        if self.reward == "study":  # the allocation's worth; the plan's, inside it
            up = self._reward(ch.best(g), g) if self.upper_acted else 0.0
            low = REWARD_SCALE["decision"] * (ch.objective(i) - ch.objective(ch.best(g)))
        else:
            up = low = self._reward(i, g)
        self.engine.place(self.run, ch.placement(i, g))
        return self._after_decision({UPPER: up, agent: low} if self.upper_acted else {agent: low})

    def _reward(self, placed: int | None, group: int = 0) -> float:
        """The reward of placing candidate `placed` of allocation `group` (None: waiting)."""
        ch, scale = self.offered, REWARD_SCALE[self.reward]
        if self.reward == "study":
            chosen = None if placed is None else ch.placement(placed, group)
            return scale * advantage(
                self.engine,
                self.run.spec.name,
                chosen,
                ch.placement(ch.best(0)),
                self.weights,
                self.rollout_hours,
            )
        return scale * (
            (0.0 if placed is None else ch.objective(placed)) - ch.objective(ch.best(0))
        )

    def _after_decision(self, rewards: dict):
        self.decisions += 1
        obs = None if self.decisions >= self.max_decisions else self._next_decision()
        if obs is not None:
            return obs, rewards, {"__all__": False}, {"__all__": False}, {}
        # Every agent that acted gets its last observation and its reward with the ending.
        final = dict(self.last_obs)
        rewards = {a: rewards.get(a, 0.0) for a in final}
        ended = self.decisions < self.max_decisions and self.over  # else cut short: truncated
        return final, rewards, {"__all__": ended}, {"__all__": not ended}, {}
