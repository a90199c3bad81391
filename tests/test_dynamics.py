import numpy as np
import pytest

from xdscheduler.errors import UserError
from xdscheduler.network.dynamics import BASE_LOAD, LOAD_SWING, Dynamics, base_matrices
from xdscheduler.scenario import load_scenario

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
