"""How the live plane plans: the search space of what its runner trains, with the constants of
the cluster's profile, and the policy (the planner, or the trained agents over HTTP) that
decides over it. No Ray here."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from xdscheduler.costmodel.plan import Stack
from xdscheduler.errors import UserError
from xdscheduler.live.state import ClusterState
from xdscheduler.planner.baselines import ONLINE
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.planner.space import SearchOptions

# The live runner trains data-parallel plans (hierarchical across domains, DiLoCo every H):
# the planner searches those, in FP32 (what CPUs and gloo run), DiLoCo every 10 steps, with
# the runner's own software: a plain loop that reduces the gradients after the backward pass.
# Across domains of unlike speeds each domain's replicas take the samples the planner's split
# gives them (`domain_batches`), so the fast ones do not wait for the slow.
LIVE_OPTIONS = replace(
    ONLINE,
    tensor=(1,),
    max_pipeline=1,
    context=(1,),
    virtual=(1,),
    kinds=("single", "data"),
    dtype="fp32",
    diloco_h=(0, 10),
    micro_batch=(1, 2, 4, 8, 16),
    stack=Stack.preset("plain-dp"),
)


def domain_batches(p: Placement, global_batch: int) -> dict[str, int]:
    """Samples a step each domain's replicas take together: across domains of unlike speeds,
    the planner's split (micro-batches a replica, by speed) apportioned to the global batch,
    the largest remainders rounded up; {} where every replica takes as many (or a batch too
    small to split leaves a domain none)."""
    if not p.split:
        return {}
    weight = np.asarray(p.gpus, dtype=float) * np.asarray(p.split, dtype=float)
    exact = global_batch * weight / weight.sum()
    whole = np.floor(exact).astype(int)
    up = np.argsort(whole - exact, kind="stable")[: global_batch - int(whole.sum())]
    whole[up] += 1
    if whole.min() < 1:
        return {}
    return dict(zip(p.names, (int(n) for n in whole), strict=True))


def options(state: ClusterState) -> SearchOptions:
    """The live search space, with the constants of the cluster's profile where it has one."""
    if state.profile is None:
        return LIVE_OPTIONS
    from xdscheduler.costmodel.calibration import Profile

    return replace(LIVE_OPTIONS, calibration=Profile.load(state.profile).calibration)


def live_policy(state: ClusterState, weights, opts: SearchOptions, stepper=None):
    """The cluster's policy over the live search space `opts`: the planner, or (`ppo`) the
    trained agents choosing among the same candidates, each agent's step asked of the policy
    app (`POST /policy/act`: the upper agent picks the domains and accelerators, the lower the
    plan inside them), or of `stepper` (the agents in process)."""
    if state.policy == "planner":
        return PlannerPolicy(weights, "planner", opts)
    from xdscheduler.rl.agents import PPOPolicy, decide
    from xdscheduler.serving.client import PolicyClient

    if stepper is None:
        if state.api is None:
            raise UserError(
                "the ppo policy asks the cluster's policy app, and the state records none "
                "(api): `xds down` and `xds up` the cluster again"
            )
        stepper = PolicyClient(state.api, state.api_token)
    policy = PPOPolicy(
        weights,
        lambda job, view, queued, now, job_weights: decide(
            stepper, job_weights, job, view, queued, now, opts
        ),
    )
    policy.planner = PlannerPolicy(weights, "planner", opts)  # it re-plans in the same space
    return policy
