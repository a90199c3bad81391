"""Messages priced at the rate their size gets: a measured curve, or NCCL's step latency."""

import json

import numpy as np
import pytest

from tests.test_cli import run
from xdscheduler import catalog
from xdscheduler.costmodel.messages import (
    NET_STEP_LATENCY_S,
    MessageCurve,
    NetworkProfile,
    connection_bps,
    from_sailor,
    ring_s,
)
from xdscheduler.costmodel.plan import Hardware, Plan, PlanBatch, Stack
from xdscheduler.costmodel.steptime import estimate
from xdscheduler.errors import UserError

# 2 GB/s at 1 MB, rising 1 GB/s a doubling, capped at 4 GB/s (32 Gbit/s) from 4 MB
CURVE = MessageCurve((1.0, 2.0), peak_gbps=32.0)


def test_a_curve_gives_a_small_message_a_share_of_the_peak_and_a_large_one_all_of_it():
    assert CURVE.share([0.5e6, 1e6, 4e6, 1e9]) == pytest.approx([0.25, 0.5, 1.0, 1.0])


# Sailor's measured peaks (multizone_bandwidths_het.json, Gbit/s) of 1, 2 and 4 GPUs of a
# 4-GPU A100-40 VM sending at once to as many of another: inside us-central1-a, and from
# us-central1-a to us-west1-b
PEAKS = {"zone": (19.363, 29.399, 48.287), "to Oregon": (4.960, 7.103, 8.733)}


@pytest.mark.parametrize("where", PEAKS)
def test_two_connections_of_a_vm_pair_get_what_sailor_measured_for_two(where):
    """From the one-connection and whole-VM peaks alone, the two-connection total comes
    within 8% of the measurement; capping 2 x one connection at the VM's rate did not."""
    one, two, four = PEAKS[where]
    total = 2 * connection_bps(four, one, 2, 4)
    assert total == pytest.approx(two, rel=0.08)
    assert abs(min(2 * one, four) / two - 1) > 0.2
    # the two measured ends are met exactly
    assert connection_bps(four, one, [1, 4], 4) == pytest.approx([one, four / 4])


def test_connections_beyond_a_node_or_without_a_flow_rate_share_the_pair_evenly():
    assert connection_bps(48.0, 20.0, 8, 4) == pytest.approx(6.0)  # 8 over a 4-GPU pair
    assert connection_bps(48.0, np.inf, [1, 2, 4], 4) == pytest.approx([48.0, 24.0, 12.0])
    assert connection_bps(48.0, 20.0, [1, 2, 4], 1) == pytest.approx([20.0, 20.0, 12.0])
    # a connection faster than the pair: the pair binds
    assert connection_bps(10.0, 20.0, [1, 2], 4) == pytest.approx([10.0, 5.0])


def test_a_ring_by_hand_buckets_and_message_sizes():
    """2(n-1) messages of bucket/n bytes a bucket: 16 MB over 8 ranks in 8 MB buckets is two
    buckets of 14 messages of 1 MB, each at 2 GB/s (half the 4 GB/s peak)."""
    peak, step = 4e9, NET_STEP_LATENCY_S
    assert ring_s(16e6, 8, peak, bucket=8e6, curve=CURVE) == pytest.approx(
        2 * 14 * (step + 1e6 / 2e9)
    )
    # one bucket: messages of 2 MB at 3 GB/s; without a curve, the peak and the latency alone
    assert ring_s(16e6, 8, peak, curve=CURVE) == pytest.approx(14 * (step + 2e6 / 3e9))
    assert ring_s(16e6, 8, peak) == pytest.approx(14 * (step + 2e6 / peak))
    # a remainder bucket is its own ring of smaller messages (0.5 MB at 1 GB/s); one rank
    # sends nothing
    assert ring_s(12e6, 8, peak, 8e6, CURVE) == pytest.approx(
        14 * (step + 1e6 / 2e9) + 14 * (step + 0.5e6 / 1e9)
    )
    assert ring_s(16e6, 1, peak, 8e6, CURVE) == 0.0


def test_the_step_time_model_prices_a_flat_ring_at_its_message_sizes():
    """Sailor's stack reduces over a flat ring: with a curve that gives its messages less than
    the peak the gradient all-reduce takes longer; a hierarchical stack is unchanged."""
    arch = catalog.model("opt-350m")
    hw = Hardware.of(catalog.accelerator("A100-40GB"), scaleout_gbps=12.07)
    hw = Hardware(**{**hw.__dict__, "gpus_per_node": 4, "flow_gbps": 19.4})
    plans = PlanBatch.of([Plan(dp=64, tp=1, micro_batch=4, zero=0, dtype="tf32")])
    slow = MessageCurve((0.5,), peak_gbps=19.4)  # a flat half of the peak at every size
    for stack, slower in ((Stack.preset("megatron-deepspeed"), True), (Stack(), False)):
        base = estimate(arch, 256, plans, hw, stack=stack).breakdown_s["dp_comm"][0]
        curved = estimate(arch, 256, plans, hw, stack=stack, network=slow).breakdown_s["dp_comm"][0]
        assert (curved > 1.9 * base) if slower else curved == base


def test_sailors_network_file_reads_and_a_bad_one_is_a_user_error(tmp_path):
    path = tmp_path / "network_coeffs.json"
    path.write_text(json.dumps({"inter": {"A100-40": {"1": [[0.0, 1.0, 2.0], 2.5e9]}}}))
    curve = from_sailor(path, "A100-40")
    assert curve.coeffs == (0.0, 1.0, 2.0) and curve.peak_gbps == pytest.approx(20.0)
    assert np.isclose(curve.share(1e6), 2.0 * 8 / 20.0)
    with pytest.raises(UserError, match="inter/GH-96/1"):
        from_sailor(path, "GH-96")


def test_xds_layers_import_network_writes_a_profile_the_planner_reads(capsys, tmp_path):
    src = tmp_path / "network_coeffs.json"
    src.write_text(json.dumps({"inter": {"A100-40": {"1": [[-0.002, 0.14, 1.12], 2.42e9]}}}))
    out = tmp_path / "net.yaml"
    code, text, _ = run(
        capsys, "layers", "import-network", str(src), "--sailor-gpu", "A100-40", "--out", str(out)
    )
    assert code == 0 and "wrote" in text
    curve = NetworkProfile.load(out).curve()
    assert curve.coeffs == (-0.002, 0.14, 1.12) and curve.peak_gbps == pytest.approx(19.36)
    bad = tmp_path / "bad.yaml"
    bad.write_text("coeffs: []\npeak_gbps: 10\n")
    with pytest.raises(UserError, match="coeffs"):
        NetworkProfile.load(bad)
    code, _, err = run(
        capsys,
        "layers",
        "import-network",
        str(src),
        "--sailor-gpu",
        "GH-96",
        "--out",
        str(tmp_path / "x.yaml"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
