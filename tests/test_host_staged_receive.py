"""benchmarks/host_staged_receive.py: Sailor's pipeline receive, emulated step for step."""

import pytest
import torch

from benchmarks.host_staged_receive import main, sailor_receive, slices, upstream_receive


@pytest.mark.parametrize(("num_el", "tp"), [(4096, 4), (1000, 3), (17, 1)])
def test_both_receives_rebuild_the_tensor_the_slices_came_from(num_el, tp):
    torch.manual_seed(0)
    parts = slices(torch, num_el, tp, device="cpu")
    whole = torch.cat([buf for _, buf in parts])
    assert whole.numel() == num_el
    assert torch.equal(sailor_receive(torch, parts, device="cpu"), whole)
    assert torch.equal(upstream_receive(torch, parts), whole)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU to time")
def test_without_a_gpu_it_says_so_and_exits_2(capsys):
    assert main(["--repeats", "1"]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and len(err.strip().splitlines()) == 1


def test_the_what_if_adds_the_binding_stages_receives_once_a_slot(capsys):
    """benchmarks/sailor_side_by_side: an end stage pays one receive a micro-batch slot, a
    middle stage two, (micro-batches + stages - 1) slots a step; PP1 pays none."""
    import numpy as np

    from benchmarks.sailor_side_by_side import staged_receives
    from xdscheduler.costmodel.plan import Plan

    def run(pp, dp, mb, gbs, real):
        name = f"sailor/Planner/simulations/validation/clariden/OPT-350/N{pp}/plan_config_x.json"
        plan = Plan(dp=dp, tp=4, pp=pp, micro_batch=mb, zero=0, dtype="tf32")
        return ({"file": name, "gbs": gbs, "real": real}, "OPT-350", None, plan, 26)

    rows = [run(1, 4, 8, 128, 1.0), run(2, 1, 8, 32, 1.0), run(4, 1, 8, 32, 1.0)]
    errs = [-0.1, -0.1, -0.1]  # ours: 0.9 s each
    measured = {
        "gpu": "G",
        "host": "H",
        "rows": [{"model": "OPT-350", "micro_batch": 8, "sailor_ms": 10.0}],
    }
    staged_receives(rows, errs, np.array([True, True, True]), measured)
    out = capsys.readouterr().out
    # PP2: 4 micro-batches + 1 = 5 slots of 10 ms: 0.95 s; PP4: 7 slots, one receive 0.97 s,
    # two 1.04 s
    assert "OPT-350 x   2      5" in out and "-5.0%" in out
    assert "OPT-350 x   4      7" in out and "-3.0%" in out and "+4.0%" in out
    assert "median / max 5.0% / 10.0% with one receive a slot" in out


def test_the_proposed_targets_count_runs_of_many_micro_batches_and_sailors_error():
    """benchmarks/sailor_side_by_side: the max on sane runs of >= 4 micro-batches a replica, and
    the runs where ours is no further off than Sailor's simulator."""
    import numpy as np

    from benchmarks.sailor_side_by_side import proposed_targets
    from xdscheduler.costmodel.plan import Plan

    def run(dp, mb, gbs):
        plan = Plan(dp=dp, tp=4, pp=2, micro_batch=mb, zero=0, dtype="tf32")
        return ({"file": "f", "gbs": gbs}, "OPT-350", None, plan, 26)

    # micro-batches a replica: 1, 4, 4, 16 (the last run not sane)
    rows = [run(1, 1, 1), run(1, 8, 32), run(2, 1, 8), run(1, 1, 16)]
    errs = {"ours": [-0.34, 0.10, -0.05, 0.9], "sailor": [-0.40, 0.08, -0.06, 0.5]}
    text = proposed_targets(rows, errs, np.array([True, True, True, False]))
    assert "Sane runs of >= 4 micro-batches a replica (2): max ours 10.0%" in text
    assert "Sailor's simulator 8.0%" in text
    assert "no further off than Sailor's simulator on 2 of 3 sane runs" in text
    assert "by at most 2.0 points" in text
