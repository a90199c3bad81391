"""The policy registry: every policy by name, from the layer that owns it."""

from __future__ import annotations

import pytest

from xdscheduler.errors import UserError
from xdscheduler.planner.baselines import (
    BackfillSingleDomain,
    FifoSingleDomain,
    GangSingleDomain,
    GreedyCrossDomain,
)
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.planner.waiting import WaitsForFaster
from xdscheduler.registry import PolicyOptions, make_policy, names, parse_policies
from xdscheduler.scenario import Weights


def test_each_layer_registers_its_own_policies_in_order():
    assert names() == [
        "fifo-single-domain",
        "backfill-single-domain",
        "gang-single-domain",
        "planner-single-domain",
        "greedy-cross-domain",
        "planner",
        "planner-waits",
        "ppo",
    ]
    made = {n: make_policy(n, Weights()) for n in names()[:-1]}
    kinds = {
        "fifo-single-domain": FifoSingleDomain,
        "backfill-single-domain": BackfillSingleDomain,
        "gang-single-domain": GangSingleDomain,
        "planner-single-domain": PlannerPolicy,
        "greedy-cross-domain": GreedyCrossDomain,
        "planner": PlannerPolicy,
        "planner-waits": WaitsForFaster,
    }
    assert all(isinstance(made[n], k) for n, k in kinds.items())
    assert all(p.name == n for n, p in made.items())
    crossing = [n for n, p in made.items() if not p.single_domain]
    assert crossing == ["greedy-cross-domain", "planner", "planner-waits"]


def test_a_serve_url_makes_the_served_policy_where_there_is_one():
    from xdscheduler.rl.agents import PPOPolicy

    served = make_policy("ppo", Weights(), {"serve_url": "http://127.0.0.1:9"})
    assert isinstance(served, PPOPolicy)  # its steps go to the endpoint, when it decides
    assert isinstance(
        make_policy("planner", Weights(), {"serve_url": "http://127.0.0.1:9"}), PlannerPolicy
    )  # no served planner: the one in process


def test_unknown_names_and_options_are_refused_clearly():
    with pytest.raises(
        UserError,
        match=r"unknown policies fifo \(did you mean "
        r"'fifo-single-domain'\?\); known: fifo-single-domain",
    ):
        make_policy("fifo", Weights())
    with pytest.raises(ValueError, match="servce_url"):
        PolicyOptions.model_validate({"servce_url": "http://x"})


def test_a_policy_named_twice_on_the_command_line_runs_once():
    picked = parse_policies(" planner,fifo-single-domain , planner")
    assert picked == ["planner", "fifo-single-domain"]
