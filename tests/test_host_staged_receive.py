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
