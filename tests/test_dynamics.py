import numpy as np
import pytest

from xdscheduler.errors import UserError
from xdscheduler.network.dynamics import BASE_LOAD, LOAD_SWING, Dynamics, base_matrices
from xdscheduler.scenario import load_scenario, parse_scenario
from xdscheduler.yamlfile import read_yaml

from .conftest import SCENARIOS


@pytest.fixture(scope="module")
def scn():
    return load_scenario(SCENARIOS / "five_domains.yaml")


def test_fluctuation_stays_within_each_links_bound(scn):
    d = Dynamics.generate(scn, 1, 48 * 3600)
    bw, _, bound = base_matrices(scn)
    linked = bw > 0
    ratio = d.bandwidth_gbps[:, linked] / bw[linked]
    assert np.all(np.abs(ratio - 1) <= bound[linked] + 1e-12)
    assert ratio.std() > 0.02  # it does move
    assert np.all(d.bandwidth_gbps[:, ~linked] == 0)


def test_a_link_may_swing_by_nine_tenths_and_keeps_a_tenth_of_its_bandwidth():
    doc = read_yaml(SCENARIOS / "five_domains.yaml")
    for link in doc["links"]:
        link["fluctuation"] = 0.9  # measured WAN pairs swing by half or more
    wide = parse_scenario(doc, "five_domains.yaml")
    bw, _, _ = base_matrices(wide)
    linked = bw > 0
    ratio = Dynamics.generate(wide, 1, 48 * 3600).bandwidth_gbps[:, linked] / bw[linked]
    assert ratio.min() >= 0.1 - 1e-12 and ratio.max() <= 1.9 + 1e-12
    assert ratio.min() < 0.5 and ratio.max() > 1.5  # it does swing by half


def test_same_seed_same_network_other_seed_other_network(scn):
    a, b = Dynamics.generate(scn, 5, 24 * 3600), Dynamics.generate(scn, 5, 24 * 3600)
    c = Dynamics.generate(scn, 6, 24 * 3600)
    assert np.array_equal(a.bandwidth_gbps, b.bandwidth_gbps)
    assert np.array_equal(a.rtt_ms, b.rtt_ms)
    assert not np.array_equal(a.bandwidth_gbps, c.bandwidth_gbps)


def test_latency_spikes_raise_rtt_by_half_to_three_times(scn):
    d = Dynamics.generate(scn, 2, 7 * 24 * 3600)
    _, rtt, _ = base_matrices(scn)
    linked = rtt > 0
    ratio = d.rtt_ms[:, linked] / rtt[linked]
    spiking = ratio > 1
    assert spiking.any() and spiking.mean() < 0.2
    assert ratio[spiking].min() >= 1.5 and ratio.max() <= 3.0


def test_background_load_swings_by_at_most_a_fifth(scn):
    d = Dynamics.generate(scn, 3, 7 * 24 * 3600)
    low, high = BASE_LOAD * (1 - LOAD_SWING), BASE_LOAD * (1 + LOAD_SWING)
    assert d.background_load.min() >= low - 1e-12 and d.background_load.max() <= high + 1e-12
    swings = np.abs(np.diff(d.background_load, axis=0)) / BASE_LOAD
    assert swings.max() >= LOAD_SWING  # swings big enough to trigger re-planning happen


def test_lookups_hold_the_value_of_their_step(scn):
    d = Dynamics.generate(scn, 4, 3600, step_s=300)
    assert d.at(0) == 0 and d.at(299.9) == 0 and d.at(300) == 1 and d.at(1e9) == 12
    assert np.array_equal(d.bandwidth(650), d.bandwidth_gbps[2])


def test_trace_replay_and_its_errors(scn, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("time_s,a,b,bandwidth_gbps,rtt_ms\n0,jjj,imn,9,5\n900,jjj,imn,3,12\n")
    d = Dynamics.from_trace(scn, trace)
    j, i = 0, 4
    assert d.bandwidth(0)[j, i] == 9 and d.bandwidth(1000)[i, j] == 3 and d.rtt(1000)[j, i] == 12
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,a,b,gbps\n0,jjj,imn,9\n")
    with pytest.raises(UserError, match="missing columns bandwidth_gbps, rtt_ms"):
        Dynamics.from_trace(scn, bad)


def mixed_three_tenants():
    """three_tenants with jjj also holding 16 A100 nodes: two pools of one data centre."""
    from xdscheduler.scenario import parse_scenario
    from xdscheduler.yamlfile import read_yaml

    doc = read_yaml(SCENARIOS / "three_tenants.yaml", "scenario")
    jjj = next(d for d in doc["domains"] if d["name"] == "jjj")
    jjj["nodes"].append({"accelerator": "A100-80GB", "count": 16})
    return parse_scenario(doc, "mixed.yaml")


def test_a_mixed_domains_pools_share_its_lines_and_fail_together(tmp_path):
    """A WAN line serving both pools of jjj swings, carries its goodput and is cut as one; the
    pools' own network neither swings nor is cut; an outage takes the whole data centre; a
    trace naming jjj as written drives the line to each pool (before: unknown domain)."""
    from xdscheduler.faults.failure_model import Cluster, FailureModel, on_domains
    from xdscheduler.sim.truth import Truth

    scn = mixed_three_tenants()
    names = [d.name for d in scn.domains]
    h800, a100 = names.index("jjj.H800"), names.index("jjj.A100-80GB")
    other = next(i for i, n in enumerate(names) if n not in ("jjj.H800", "jjj.A100-80GB"))
    dyn = Dynamics.generate(scn, seed=3, horizon_s=6 * 3600)
    bw = dyn.bandwidth_gbps
    assert np.allclose(
        bw[:, h800, other] / bw[0, h800, other], bw[:, a100, other] / bw[0, a100, other]
    )
    assert np.ptp(bw[:, h800, a100]) == 0 and np.ptp(dyn.rtt_ms[:, h800, a100]) == 0
    truth = Truth.draw(scn, [], seed=3)
    assert truth.goodput[h800, other] == truth.goodput[a100, other]
    assert truth.goodput[h800, a100] == 1.0
    events = on_domains(
        FailureModel(scale=200).generate(Cluster.of_scenario(scn), 24 * 3600, 3), scn
    )
    outages = [e for e in events if e.kind == "domain_outage" and e.target.startswith("jjj")]
    assert outages and len(outages) % 2 == 0  # each on both pools at once
    assert len({(e.time_s, e.target) for e in outages}) == len(outages)
    cuts = [e.target for e in events if e.kind == "link_cut"]
    assert cuts and "jjj.A100-80GB|jjj.H800" not in cuts
    assert {e.target.split("/")[0] for e in events if "/" in e.target} <= set(names)
    trace = tmp_path / "trace.csv"
    trace.write_text(f"time_s,a,b,bandwidth_gbps,rtt_ms\n0,jjj,{names[other]},1.5,40\n")
    replay = Dynamics.from_trace(scn, trace)
    assert replay.bandwidth_gbps[0, h800, other] == replay.bandwidth_gbps[0, a100, other] == 1.5
