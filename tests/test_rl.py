"""The resource graph, the placement environment, the GNN policy module and the trained agents."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from xdscheduler import catalog
from xdscheduler.perception.graph import (
    MAX_NODES,
    NODE_FEATURES,
    ResourceGraph,
    edges,
    padded,
)
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.rl.agents import SHIPPED, Agents, local_policy
from xdscheduler.rl.candidates import LOWER_CHOICES, UPPER_CHOICES, WAIT, choices
from xdscheduler.rl.env import UPPER, PlacementEnv
from xdscheduler.rl.module import GraphChoiceModule, graph_data
from xdscheduler.rl.rollout import advantage, rollout
from xdscheduler.runtime.study import run_here
from xdscheduler.scenario import Weights, default_scenario_path, load_scenario
from xdscheduler.sim.domain import LocalDomains, accepted
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs
from xdscheduler.sim.metrics import ideal_rates

from .conftest import giant_among_smaller_jobs, small_scenario


@pytest.fixture(scope="module")
def env_and_obs():
    env = PlacementEnv({"seed": 5, "hours": 1.0, "max_decisions": 4, "reward": "decision"})
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
    data = graph_data(view)
    assert data.num_nodes == k and data.edge_attr.shape == (2 * len(scn.links), 4)
    # A link at 70% of its leased bandwidth shows ε = -0.3 on its edges.
    bw = view.bandwidth_gbps * 0.7
    _, feats = edges(view.with_links(bw, view.rtt_ms))
    assert np.allclose(feats[:, 2], -0.3, atol=1e-6)


def test_choices_offer_the_planners_pick_and_ways_to_leave_faster_accelerators_free():
    scn = load_scenario(default_scenario_path())
    view = ClusterView.from_scenario(scn)
    job = JobSpec.of(scn.jobs[0])
    ch = choices(job, view, scn.weights)
    bests = [ch.objective(ch.best(g)) for g in range(len(ch.groups))]
    assert 1 < len(ch.groups) <= WAIT and bests[0] == max(bests) and ch.keep_off[0] == ()
    peak = np.array([d.accelerator.half_tflops for d in view.domains])
    tiers = len(np.unique(peak)) - 1  # one per class of accelerators but the slowest
    assert len(ch.groups) == 1 + tiers and all(ch.keep_off[1:])
    for g, off in enumerate(ch.keep_off):
        rows = ch.alloc[ch.groups[g]]
        assert (rows == rows[0]).all() and len(ch.groups[g]) <= LOWER_CHOICES
        assert np.all(np.diff([ch.objective(i) for i in ch.groups[g]]) <= 1e-12)
        if off:  # off every domain at least as fast as the slowest one it holds back
            used = np.flatnonzero(rows[0])
            assert not set(used) & set(off) and peak[used].max() < peak[list(off)].min()
            placement = ch.placement(ch.best(g), g)
            assert placement.keep_off == off and not set(placement.domains) & set(off)


def test_job_efficiency_is_its_ideal_time_over_its_time_since_arrival():
    scn = load_scenario(default_scenario_path())
    view = ClusterView.from_scenario(scn)
    job = replace(JobSpec.of(scn.jobs[1]), arrival_s=100.0)
    ch = choices(job, view, scn.weights, now_s=400.0)
    i = ch.best(0)
    ideal = ideal_rates([job], view)[job.name]
    run = job.tokens / ch.ev.terms["tokens_per_s"][i]
    assert ch.ideal == pytest.approx(ideal)
    assert ch.job_efficiency(i) == pytest.approx(min(job.tokens / ideal / (300.0 + run), 1.0))


def test_replans_keep_off_the_domains_a_placement_holds_back():
    scn = load_scenario(default_scenario_path())
    view = ClusterView.from_scenario(scn)
    job = JobSpec.of(scn.jobs[0])
    planner = PlannerPolicy(scn.weights)
    first = planner.decide([job], view, 0.0)[0]
    elsewhere = [i for i in range(len(view.domains)) if i not in first.domains]
    off = tuple(i for i in first.domains)  # hold back every domain it chose
    moved = planner.replan(
        job, replace(first, keep_off=off), view.adjust_free({i: -n for i, n in first.taken.items()})
    )
    assert elsewhere and moved is not None and moved.keep_off == off
    assert not set(moved.domains) & set(off)
    assert (
        planner.replan(
            job, first, view.adjust_free({i: -n for i, n in first.taken.items()})
        ).keep_off
        == ()
    )


def test_environment_episode_rewards_and_final_observations(env_and_obs):
    env, obs = env_and_obs
    (first,) = obs  # the upper agent, or a lower one when one allocation is all there is
    assert env.observation_spaces[first].contains(obs[first])
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
    # One lower step a decision, and an upper one where there was an allocation to choose.
    assert env.decisions == 4 and 4 <= steps <= 8


def test_waiting_costs_the_best_objective_per_decision():
    env = PlacementEnv({"seed": 9, "hours": 1.0, "max_decisions": 2, "reward": "decision"})
    env.reset(seed=9)
    best = env.current.objective(env.current.best(0))
    _, rew, _, _, _ = env.step({UPPER: WAIT})
    assert rew[UPPER] == pytest.approx(-10 * best)


def test_the_environment_forgets_the_jobs_that_left_its_queue():
    """As the planner's pass: a job that did not fit, started later and came back is tried
    afresh, so the backfill memory keeps only the jobs queued now."""
    env = PlacementEnv({"seed": 9, "hours": 1.0, "max_decisions": 50, "reward": "decision"})
    obs, _ = env.reset(seed=9)
    env.queue.no_fit["left-long-ago"] = ((0,), 0)
    started = env.engine.now
    while env.engine.now == started:  # to the next moment jobs may be placed
        obs, _, term, trunc, _ = env.step({a: 0 for a in obs})
        assert not (term["__all__"] or trunc["__all__"]), "the episode ended at its first moment"
    assert "left-long-ago" not in env.queue.no_fit


def big_job_decision(seed: int = 2) -> PlacementEnv:
    """An environment on the study reward, stopped at a decision its upper agent is asked."""
    env = PlacementEnv(
        {
            "seed": seed,
            "hours": 7.0,
            "warmup_hours": 5.0,
            "window_hours": 2.0,
            "max_decisions": 100,
            "rollout_hours": 0.5,
        }
    )
    obs, _ = env.reset(seed=seed)
    while UPPER not in obs:
        obs, _, term, trunc, _ = env.step({a: 0 for a in obs})
        assert not (term["__all__"] or trunc["__all__"]), "no decision with a choice met"
    return env


def test_study_reward_is_the_decisions_advantage_over_the_planners_in_a_rollout():
    env = big_job_decision()
    ch, eng = env.current, env.engine
    before = (
        eng.now,
        len(eng.recorder.decisions),
        [r.spec.name for r in eng.queue],
        eng.busy_gpu_s,
    )
    off = next(g for g in range(len(ch.groups)) if ch.keep_off[g])
    planners = ch.placement(ch.best(0))
    expected = rollout(
        eng, ch.job.name, ch.placement(ch.best(off), off), env.weights, 0.5
    ) - rollout(eng, ch.job.name, planners, env.weights, 0.5)
    # The rollouts leave the engine as it was, and give the same figure every time.
    assert before == (
        eng.now,
        len(eng.recorder.decisions),
        [r.spec.name for r in eng.queue],
        eng.busy_gpu_s,
    )
    assert advantage(eng, ch.job.name, planners, planners, env.weights, 0.5) == 0.0
    obs, rew, _, _, _ = env.step({UPPER: off})
    (lower,) = obs
    _, rew, _, _, _ = env.step({lower: 0})
    assert rew[UPPER] == pytest.approx(expected) and rew[lower] == 0.0  # best plan: no regret


def test_study_episodes_are_windows_of_time_cut_short_not_ended():
    env = PlacementEnv(
        {"seed": 4, "hours": 2.0, "warmup_hours": 0.5, "window_hours": 0.5, "max_decisions": 500}
    )
    obs, _ = env.reset(seed=4)
    rewards = []
    while True:
        obs, rew, term, trunc, _ = env.step({a: 0 for a in obs})
        rewards += list(rew.values())
        if term["__all__"] or trunc["__all__"]:
            break
    assert trunc["__all__"] and not term["__all__"]  # the window ended, the world did not
    assert env.engine.now <= env.until_s and 2 < env.decisions < 500
    assert np.allclose(rewards, 0.0)  # the planner's own picks: no advantage, no regret


def test_module_masks_choices_and_values(env_and_obs):
    env, obs = env_and_obs
    module = GraphChoiceModule(
        observation_space=env.observation_spaces[UPPER],
        action_space=env.action_spaces[UPPER],
        model_config={"hidden": 16},
    )
    o = next(iter(obs.values()))
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


def test_agent_steps_batched_into_one_forward_pass_answer_as_each_alone():
    """What the Serve app batches: steps of both agents, on graphs of two sizes, in one call."""
    from xdscheduler.rl.candidates import lower_observation, upper_observation
    from xdscheduler.rl.pareto import fixed_states

    scn = load_scenario(default_scenario_path())
    agents = Agents(scn.weights)
    arch = catalog.model("llama3-8b")
    wide = (
        JobSpec("wide", arch, 256, arch.seq_len, 8, 32, tokens=1e10),
        ClusterView.from_scenario(ring(10)),
        0.0,
    )  # 10 nodes: more than the padding's 8
    states = [*fixed_states(6), wide]
    asks = []
    for job, view, now in states:
        ch = choices(job, view, scn.weights, now)
        if ch is not None:
            asks += [("upper", upper_observation(ch, 1)), ("lower", lower_observation(ch, 0, 1))]
    assert len({a[1]["nodes"].shape for a in asks}) == 2  # two graph sizes
    for (agent, obs), row in zip(asks, agents.batch_logits(asks), strict=True):
        alone = agents.logits(agent, obs)
        np.testing.assert_allclose(row, alone, rtol=1e-5, atol=1e-5)
        assert np.argmax(row) == np.argmax(alone)


def test_ppo_policy_runs_a_study_to_the_end():
    scn = small_scenario()
    hours = 2.0
    jobs = study_jobs(scn, hours, 3)
    res = run_here(
        StudyInputs(scn, jobs, study_dynamics(scn, 3, hours), hours), local_policy(scn.weights)
    )
    done = [r for r in res.jobs if r.end_s is not None]
    assert len(done) == len(jobs)
    assert all(
        "over" in d.explanation or "only" in d.explanation
        for d in res.decisions
        if d.action == "place"
    )


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


def test_a_policy_path_may_be_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(SHIPPED.parent)
    agents = Agents(Weights(efficiency=1.0, utilization=0.3, cost=0.3), SHIPPED.name)
    assert agents.path == SHIPPED and set(agents.modules) == {"upper", "lower"}


def ring(k: int):
    """k domains of mixed accelerators, each linked to its next two."""
    from xdscheduler.scenario import parse_scenario

    accelerators = ["H100-SXM", "A100-80GB", "H800"]
    return parse_scenario(
        {
            "name": f"ring{k}",
            "domains": [
                {
                    "name": f"d{i}",
                    "location": {"city": f"c{i}"},
                    "nodes": [{"accelerator": accelerators[i % 3], "count": 2 + i % 3}],
                }
                for i in range(k)
            ],
            "links": [
                {"a": f"d{i}", "b": f"d{j}", "bandwidth_gbps": 2.0 + i % 4, "rtt_ms": 20}
                for i in range(k)
                for j in (i + 1, i + 2)
                if j < k
            ],
        }
    )


@pytest.mark.parametrize("k", [3, 9, 16, 64])
def test_the_shipped_policy_decides_on_any_number_of_domains(k):
    """Trained on five domains, it decides on 3 to 64 without retraining: the graph encoder
    and the candidate lists size themselves to the cluster."""
    scn = ring(k)
    view = ClusterView.from_scenario(scn)
    arch = catalog.model("llama3-8b")
    queue = [
        JobSpec(f"j{n}", arch, 256, arch.seq_len, 8, 8 * (n + 1), tokens=1e10) for n in range(3)
    ]
    placed = local_policy(scn.weights).decide(queue, view, 0.0)
    assert placed and len({p.job for p in placed}) == len(placed)
    for p in placed:
        assert all(0 <= d < k for d in p.domains) and p.total_gpus >= 8
        assert all(n <= view.domains[d].free_gpus for d, n in p.taken.items())


def test_the_agents_weigh_a_giants_wan_bill_as_the_planner_does():
    """The agents choose among the plans the planner's search weighs with the job's study
    weights: the giant that alone takes a pipeline sending 137 GB a step trains with DiLoCo
    once the policy has seen a job of less work (the shipped agents took the pipeline
    either way when they weighed every job with the scenario's weights)."""
    view, giant, small = giant_among_smaller_jobs()
    alone, among = local_policy(Weights()), local_policy(Weights())
    among.planner.seen.record([small])
    (p,), (q,) = alone.decide([giant], view, 0.0), among.decide([giant], view, 0.0)
    assert p.kind == "pipeline" and p.estimate.cross_domain_gb_per_step > 100
    assert q.kind == "data" and q.plan.diloco_h > 0
    assert q.objective.wan_cost_per_hour < p.objective.wan_cost_per_hour / 20


def test_a_random_training_cluster_is_a_valid_scenario_of_measured_links():
    from xdscheduler.rl.randomised import (
        LOADS,
        MIN_DOMAINS,
        PRICES,
        measured_links,
        random_scenario,
    )

    template = load_scenario(default_scenario_path())
    drawn = [random_scenario(np.random.default_rng(s), template) for s in range(40)]
    again = random_scenario(np.random.default_rng(3), template)
    assert again == drawn[3]  # a seed gives its cluster
    sizes = {len(s.domains) for s in drawn}
    assert min(sizes) == MIN_DOMAINS and max(sizes) == MAX_NODES
    measured = {(lk.bandwidth_gbps, lk.bandwidth_gbps_ba, lk.rtt_ms) for lk in measured_links()}
    for s in drawn:
        k = len(s.domains)
        assert len(s.links) == k * (k - 1) // 2  # every pair joined
        assert {(lk.bandwidth_gbps, lk.bandwidth_gbps_ba, lk.rtt_ms) for lk in s.links} <= measured
        assert {d.nodes[0].accelerator for d in s.domains} <= set(PRICES)
        assert LOADS[0] <= s.workload.load <= LOADS[1] and s.weights == template.weights
    assert len({d.nodes[0].accelerator for s in drawn for d in s.domains}) == len(PRICES)


def test_a_randomised_environment_draws_a_cluster_per_episode_in_fixed_spaces():
    env = PlacementEnv({"scenario": "random", "seed": 5, "hours": 3.0, "max_decisions": 3})
    seen = set()
    for _ in range(4):
        obs, _ = env.reset()
        seen.add(tuple((d.nodes[0].accelerator, d.gpus) for d in env.scn.domains))
        for agent, o in obs.items():
            assert env.observation_spaces[agent].contains(o), agent
    assert len(seen) == 4


# a fresh process (torch_geometric writes its generated code once a process), its temp folder
# TMPDIR: how many files are there after building the layers
TEMP_FILES = """
import os, sys, torch
from torch_geometric.nn import GATv2Conv
from xdscheduler.rl.module import graph_layers
if sys.argv[1] == "bare":
    GATv2Conv(8, 8, heads=2, concat=False, edge_dim=3)
    print(len(os.listdir(os.environ["TMPDIR"])))
else:
    convs = graph_layers(8, 2, 3, 2)
    x, index, attr = torch.randn(4, 8), torch.tensor([[0, 1, 2], [1, 2, 3]]), torch.randn(3, 3)
    out = convs[1](convs[0](x, index, attr), index, attr)
    print(len(os.listdir(os.environ["TMPDIR"])), tuple(out.shape))
"""


@pytest.mark.parametrize("how", ["bare", "encoder"])
def test_building_the_encoder_leaves_nothing_in_the_temp_folder(tmp_path, how):
    """torch_geometric writes each GATv2 layer's generated code into the temp folder and leaves
    it (a bare layer: files left, so this test sees the behaviour it works around); the
    encoder's layers remove it once imported, and still run."""
    done = subprocess.run(
        [sys.executable, "-c", TEMP_FILES, how],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if how == "bare":
        assert int(done.stdout) > 0
    else:
        assert done.stdout.split() == ["0", "(4,", "8)"]
