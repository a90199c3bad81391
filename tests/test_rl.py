"""The resource graph, the placement environment, the GNN policy module and the trained agents."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from xdscheduler.perception.graph import (
    MAX_NODES,
    NODE_FEATURES,
    ResourceGraph,
    edges,
    padded,
    to_data,
)
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.rl.agents import Agents, local_policy
from xdscheduler.rl.candidates import LOWER_CHOICES, UPPER_CHOICES, WAIT, choices
from xdscheduler.rl.env import UPPER, PlacementEnv
from xdscheduler.rl.module import GraphChoiceModule
from xdscheduler.runtime.study import run_here, study_dynamics, study_jobs
from xdscheduler.scenario import Weights, default_scenario_path, load_scenario
from xdscheduler.sim.domain import LocalDomains, accepted

from .conftest import small_scenario


@pytest.fixture(scope="module")
def env_and_obs():
    env = PlacementEnv({"seed": 5, "hours": 1.0, "max_decisions": 4})
    obs, _ = env.reset(seed=5)
    return env, obs


def test_graph_follows_reports_and_views():
    scn = load_scenario(default_scenario_path())
    dyn = study_dynamics(scn, 1, 1.0)
    domains = LocalDomains(list(scn.domains), dyn)
    graph = ResourceGraph([d.name for d in scn.domains])
    for report in domains.reports(0.0):
        graph.update(report, accepted(report, 0.0)[0])
    assert (graph.values[:, 0] > 0).all()  # compute index reported by every domain
    graph.mark_down("gba", 10.0)
    assert graph.status()["gba"] == "down" and graph.status()["jjj"] == "up"
    view = ClusterView.from_scenario(scn).with_indicators(graph.values)
    arrays = padded(view)
    k = len(scn.domains)
    assert arrays["nodes"].shape == (MAX_NODES, NODE_FEATURES)
    assert arrays["node_mask"].sum() == k and arrays["edge_mask"].sum() == 2 * len(scn.links)
    data = to_data(view)
    assert data.num_nodes == k and data.edge_attr.shape == (2 * len(scn.links), 4)
    # A link at 70% of its leased bandwidth shows ε = -0.3 on its edges.
    bw = view.bandwidth_gbps * 0.7
    _, feats = edges(view.with_links(bw, view.rtt_ms))
    assert np.allclose(feats[:, 2], -0.3, atol=1e-6)


def test_choices_group_allocations_and_rank_by_objective():
    scn = load_scenario(default_scenario_path())
    view = ClusterView.from_scenario(scn)
    job = JobSpec.of(scn.jobs[0])
    ch = choices(job, view, scn.weights)
    bests = [ch.objective(ch.best(g)) for g in range(len(ch.groups))]
    assert 1 < len(ch.groups) <= WAIT and bests == sorted(bests, reverse=True)
    for g in ch.groups:  # one allocation per group, plans best first
        rows = ch.alloc[g]
        assert (rows == rows[0]).all()
        assert len(g) <= LOWER_CHOICES
        assert np.all(np.diff([ch.objective(i) for i in g]) <= 1e-12)


def test_environment_episode_rewards_and_final_observations(env_and_obs):
    env, obs = env_and_obs
    assert set(obs) == {UPPER} and env.observation_spaces[UPPER].contains(obs[UPPER])
    acted, rewards, steps = set(), [], 0
    while True:
        action = {a: int(np.flatnonzero(o["action_mask"])[0]) for a, o in obs.items()}
        acted |= set(action)
        obs, rew, term, trunc, _ = env.step(action)
        rewards += list(rew.values())
        steps += 1
        if term["__all__"] or trunc["__all__"]:
            break
        for agent, o in obs.items():
            assert env.observation_spaces[agent].contains(o)
    # Always taking the best allocation and its best plan: zero regret every time.
    assert rewards and np.allclose(rewards, 0.0)
    assert set(obs) == acted and all(a in rew for a in acted)
    assert env.decisions == 4 and steps == 8


def test_waiting_costs_the_best_objective():
    env = PlacementEnv({"seed": 9, "hours": 1.0, "max_decisions": 2})
    env.reset(seed=9)
    best = env.current.objective(env.current.best(0))
    _, rew, _, _, _ = env.step({UPPER: WAIT})
    assert rew[UPPER] == pytest.approx(-10 * best)


def test_module_masks_choices_and_values(env_and_obs):
    env, obs = env_and_obs
    module = GraphChoiceModule(observation_space=env.observation_spaces[UPPER],
                               action_space=env.action_spaces[UPPER],
                               model_config={"hidden": 16})
    o = obs[UPPER]
    batch = {k: torch.from_numpy(np.stack([v, v])) for k, v in o.items()}
    batch["action_mask"][1, 0] = 0  # close the first choice in the second sample
    out = module.forward_train({Columns.OBS: batch})
    logits = out[Columns.ACTION_DIST_INPUTS]
    assert logits.shape == (2, UPPER_CHOICES)
    closed = batch["action_mask"] < 0.5
    assert (logits[closed] < -1e8).all() and (logits[~closed] > -1e8).all()
    values = module.compute_values({Columns.OBS: batch}, out[Columns.EMBEDDINGS])
    assert values.shape == (2,)


def test_shipped_policy_restores_and_explains_its_choice():
    scn = load_scenario(default_scenario_path())
    agents = Agents(scn.weights)
    view = ClusterView.from_scenario(scn)
    verdict = agents.decide(JobSpec.of(scn.jobs[1]), view)
    assert verdict.placement is not None and verdict.placement.total_gpus >= 16
    contrib = verdict.explanation["contributions"]
    assert set(contrib) == {"efficiency", "utilization", "cost", "step_time_s"}
    r = sum(v["weighted_delta"] for k, v in contrib.items() if k != "step_time_s")
    assert f"R {r:+.3f}" in verdict.explanation["summary"]
    assert verdict.alternatives and all("objective" in a for a in verdict.alternatives)


def test_ppo_policy_runs_a_study_to_the_end():
    scn = small_scenario()
    hours = 2.0
    jobs = study_jobs(scn, hours, 3)
    res = run_here(scn, jobs, local_policy(scn.weights), study_dynamics(scn, 3, hours), hours)
    done = [r for r in res.jobs if r.end_s is not None]
    assert len(done) == len(jobs)
    assert all("over" in d.explanation or "only" in d.explanation
               for d in res.decisions if d.action == "place")


def test_weights_change_the_choice_the_way_they_should():
    """Weight-conditioned: the same trained agents, told cost matters a lot, pick a placement
    that moves no more over the WAN than under the default weights."""
    scn = load_scenario(default_scenario_path())
    view = ClusterView.from_scenario(scn).adjust_free({0: -60, 1: -60, 4: -28})
    job = JobSpec.of(scn.jobs[0])
    default = Agents(scn.weights).decide(job, view)
    frugal = Agents(Weights(efficiency=0.2, utilization=0.0, cost=20.0)).decide(job, view)
    cost = [v.explanation["contributions"]["cost"]["chosen"] for v in (default, frugal)]
    assert cost[1] <= cost[0] + 1e-12
