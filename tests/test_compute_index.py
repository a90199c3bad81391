import itertools

import pytest

from xdscheduler import catalog
from xdscheduler.perception.compute_index import compute_index

DATA_CENTRE = [
    "H100-SXM",
    "H800",
    "H20",
    "H200",
    "A100-80GB",
    "A800",
    "Ascend-910B",
    "MI300X",
    "L40S",
    "A100-40GB",
    "B200",
]


@pytest.mark.parametrize("model", ["llama2-7b", "llama2-70b", "gpt3-175b"])
def test_index_ratios_predict_throughput_ratios_within_10_percent(model):
    result = compute_index(catalog.model(model), DATA_CENTRE, gpus=64)
    rows = {k: v for k, v in result["accelerators"].items() if v["throughput_ratio"]}
    assert len(rows) >= 8
    for (a, ra), (b, rb) in itertools.combinations(rows.items(), 2):
        predicted = ra["index"] / rb["index"]
        measured = ra["throughput_ratio"] / rb["throughput_ratio"]
        assert predicted == pytest.approx(measured, rel=0.10), (a, b)


def test_sensitivities_are_shares_of_the_step():
    result = compute_index(catalog.model("llama2-13b"), ["H100-SXM", "A100-80GB"], check=False)
    weights = result["sensitivity"]
    assert weights["matrix_tflops"] > 0.5  # a training step is mostly GEMMs
    assert 0.9 < sum(weights.values()) <= 1.01
    assert result["accelerators"]["H100-SXM"]["index"] == pytest.approx(1.0)


def test_an_accelerator_that_cannot_hold_the_task_gets_zero():
    result = compute_index(catalog.model("gpt3-175b"), ["H100-SXM", "L40S"], gpus=64)
    assert result["accelerators"]["L40S"]["index"] == 0.0
