"""Studies on clusters nobody here wrote. Hypothesis draws small scenarios (domains of eight
catalog accelerators, links of 0.1-100 Gbit/s, some pairs unlinked, some lopsided, tenants with
quotas that preempt and borrow or none), listed jobs and a generated workload at any load, and
every policy runs a short study of each cell, as `xds compare` does, sometimes with faults at
many times the published rates and injected swings of load and latency, as `xds study` may. A
study must end: no policy may place more than a domain holds or stop on an error, and every job
is accounted for; a cell the scenario cannot make (no job fits the cluster) is refused with a
clear message instead.

`XDS_FUZZ_EXAMPLES` draws more scenarios than CI's few (the draws are derandomised: the same
every run)."""

from __future__ import annotations

import math
import os
from dataclasses import replace

import pytest

from xdscheduler.errors import UserError
from xdscheduler.registry import make_policy, names
from xdscheduler.rl.agents import POLICIES as AGENTS
from xdscheduler.runtime.compare import run_cell
from xdscheduler.runtime.study import run_here
from xdscheduler.scenario import parse_scenario
from xdscheduler.sim.cell import cell_workload
from xdscheduler.sim.inputs import StudyInputs
from xdscheduler.sim.recovery import study_faults
from xdscheduler.sim.swings import inject_swings

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")

EXAMPLES = int(os.environ.get("XDS_FUZZ_EXAMPLES", "3"))
HOURS = 3.0
ACCELERATORS = ("H100-SXM", "H800", "H20", "A100-80GB", "A100-40GB", "A800", "Ascend-910B", "L40S")
MODELS = ("gpt3-1.3b", "llama3-8b", "llama2-13b", "llama2-70b", "gpt3-175b")
NAMES = ("ash", "birch", "cedar", "dogwood", "elm")
RULE_BASED = [n for n in names() if n not in AGENTS]  # every policy but the trained agents


@st.composite
def domains(draw) -> list[dict]:
    n = draw(st.integers(1, 4))
    return [
        {
            "name": NAMES[i],
            "location": {"city": NAMES[i]},
            "nodes": [
                {
                    "accelerator": draw(st.sampled_from(ACCELERATORS)),
                    "count": draw(st.integers(1, 24)),
                }
            ],
            "intra_domain_gbps": draw(st.sampled_from([25, 100, 400])),
        }
        for i in range(n)
    ]


@st.composite
def links(draw, names: list[str]) -> list[dict]:
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if not draw(st.booleans()) and out:  # some pairs unlinked (routed, or none)
                continue
            link = {
                "a": a,
                "b": b,
                "bandwidth_gbps": draw(st.sampled_from([0.1, 1, 5, 25, 100])),
                "rtt_ms": draw(st.sampled_from([0.5, 10, 60, 250])),
                "fluctuation": draw(st.sampled_from([0.0, 0.3, 0.8])),
                "price_per_gb": draw(st.sampled_from([0.0, 0.05])),
            }
            if draw(st.booleans()):
                link["bandwidth_gbps_ba"] = draw(st.sampled_from([0.5, 40]))
            out.append(link)
    return out


@st.composite
def tenancy(draw, gpus: int) -> dict | None:
    if draw(st.booleans()):
        return None
    teams = draw(st.integers(1, 3))
    tenants = [
        {
            "name": f"team-{t}",
            "quota": {"all": draw(st.integers(1, gpus))},
            "cohort": "all" if draw(st.booleans()) else None,
            "priority": draw(st.sampled_from([None, 0, 3])),
        }
        for t in range(teams)
    ]
    for t in tenants:
        if t["cohort"] is None:
            del t["cohort"]
        if t["priority"] is None:
            del t["priority"]
    return {
        "tenants": tenants,
        "cohorts": [{"name": "all"}],
        "overcommit": 3.0,
        "preemption": {"grace_s": draw(st.sampled_from([0, 300])), "protect_s": 600},
    }


@st.composite
def scenarios(draw) -> dict:
    doms = draw(domains())
    gpus = sum(8 * d["nodes"][0]["count"] for d in doms)
    doc = {
        "name": "drawn",
        "seed": draw(st.integers(0, 2**16)),
        "domains": doms,
        "links": draw(links([d["name"] for d in doms])),
        "workload": {"load": 0.9, "cluster": "kalos", "min_gpus": draw(st.sampled_from([1, 8]))},
    }
    teams = draw(tenancy(gpus))
    if teams is not None:
        doc["tenancy"] = teams
    listed = draw(st.integers(0, 2))
    doc["jobs"] = [
        {
            "name": f"listed-{j}",
            "model": draw(st.sampled_from(MODELS)),
            "global_batch": draw(st.sampled_from([64, 512, 1536])),
            "tokens": draw(st.sampled_from([1e8, 3e9])),
            "arrival_s": draw(st.sampled_from([0, 1800])),
            "gpus": {"min": (low := draw(st.sampled_from([1, 8, 64]))), "max": low * 4},
            **({"tenant": teams["tenants"][0]["name"]} if teams else {}),
        }
        for j in range(listed)
    ]
    return doc


@pytest.mark.slow  # a few dozen short studies: about a minute
@hypothesis.settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(hypothesis.HealthCheck),
)
@hypothesis.given(
    doc=scenarios(),
    load=st.sampled_from([0.4, 1.0, 1.6]),
    fault_scale=st.sampled_from([0.0, 30.0, 300.0]),
    swings=st.booleans(),
)
def test_every_policy_ends_a_study_on_a_drawn_cluster(doc, load, fault_scale, swings):
    try:
        scn = parse_scenario(doc, "drawn")
        cell = cell_workload(scn, HOURS, scn.seed, load)
    except UserError as e:  # a cluster no drawn job runs on: said, not crashed
        assert str(e)
        return
    for policy in RULE_BASED:
        if fault_scale or swings:
            troubled(scn, cell.jobs, policy, fault_scale, swings)
            continue
        figures = run_cell(scn, cell.jobs, policy, scn.seed, HOURS)
        assert figures["jobs_total"] == len(cell.jobs), (policy, figures)
        assert figures["jobs_completed"] <= figures["jobs_total"], (policy, figures)
        assert 0.0 <= figures["useful_utilization"] <= 1.0 + 1e-9, (policy, figures)
        assert math.isfinite(figures["mean_jct_s"]), (policy, figures)


def troubled(scn, jobs, policy: str, fault_scale: float, swings: bool) -> None:
    """One policy's study with faults (`fault_scale` times the published rates) and swings."""
    seed = scn.seed
    inputs = StudyInputs.of_cell(scn, jobs, seed, HOURS)
    if swings:
        dynamics, _ = inject_swings(inputs.dynamics, seed, 900.0, until_s=HOURS * 3600)
        inputs = replace(inputs, dynamics=dynamics)
    if fault_scale:
        inputs = replace(inputs, faults=study_faults(scn, seed, HOURS, fault_scale))
    res = run_here(inputs, make_policy(policy, scn.weights))
    assert sorted(r.name for r in res.jobs) == sorted(j.name for j in jobs), policy
    for r in res.jobs:
        assert r.end_s is None or (r.start_s is not None and r.start_s <= r.end_s), (policy, r)
