"""Bandwidth-aware input movement against fixed shards on one seeded, swinging link."""

from __future__ import annotations

import numpy as np
import pytest

from xdscheduler import datamove as dm
from xdscheduler.errors import UserError


def test_bandwidth_trace_swings_within_30_percent_and_is_seeded():
    job = dm.DataJob()
    bw = dm.bandwidth_trace(job, 0, 5000)
    nominal = job.link_gbps / 8
    assert np.all(np.abs(bw / nominal - 1) <= dm.SWING + 1e-12)
    assert bw.max() / nominal - 1 > 0.2 and 1 - bw.min() / nominal > 0.2  # it does swing
    assert np.array_equal(bw, dm.bandwidth_trace(job, 0, 5000))


def test_forecast_uses_only_the_past():
    bw = np.r_[np.ones(50), np.full(50, 3.0)]
    mean, _ = dm.forecast(bw, 10)
    assert mean[49] == 1.0 and mean[50] == pytest.approx((9 + 3) / 10)


def test_adapt_shrinks_shards_and_moves_work_when_bandwidth_is_low():
    job = dm.DataJob()
    high, low = dm.adapt(job, 1.6, 0.05), dm.adapt(job, 0.9, 0.1)
    assert low.shard_gb < high.shard_gb
    assert low.move_share > high.move_share >= 0
    assert low.wan_input_gb < job.input_gb and low.compute_s > job.compute_s
    assert dm.adapt(job, 1.2, 0.0, ready_gb=0.0).pause_during_collective is False


def test_adaptive_beats_fixed_on_a_seeded_trace():
    out = dm.compare(dm.DataJob(steps=1000), seed=0)
    fixed, adaptive = out["fixed"], out["adaptive"]
    assert adaptive["idle_wait_fraction"] <= 0.6 * fixed["idle_wait_fraction"]
    assert adaptive["blocking_rate"] <= 0.65 * fixed["blocking_rate"]
    assert fixed["contended_steps"] > 0.3 * fixed["steps"]  # eager transfers hit collectives
    assert adaptive["steps_per_s"] > fixed["steps_per_s"]


def test_bad_job_is_a_user_error():
    with pytest.raises(UserError):
        dm.compare(dm.DataJob(steps=0))
