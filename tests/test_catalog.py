import pytest

from xdscheduler import catalog
from xdscheduler.errors import UserError

REQUIRED = ["H100", "H800", "H20", "A100", "A800", "L40S", "Ascend-910B", "MI300X"]


@pytest.mark.parametrize("name", [*REQUIRED, "a100-80gb", "H100-SXM", "h100 sxm", "910b"])
def test_accelerators_resolve_case_insensitively(name):
    acc = catalog.accelerator(name)
    assert acc.bf16_tflops > 100 and acc.memory_gib >= 40 and acc.gpus_per_node == 8


def test_unknown_accelerator_lists_known_ones():
    with pytest.raises(UserError, match=r"unknown accelerator 'TPU9'.*H100-SXM"):
        catalog.accelerator("TPU9")


def test_fp8_only_where_it_exists():
    assert catalog.accelerator("H100").peak_tflops("fp8") == pytest.approx(1978.9)
    with pytest.raises(UserError, match="no FP8"):
        catalog.accelerator("A100").peak_tflops("fp8")


@pytest.mark.parametrize("name,billions", [
    ("gpt3-175b", 175), ("gpt3-6.7b", 6.7), ("llama2-7b", 6.7), ("llama2-13b", 13.0),
    ("llama2-70b", 69.0), ("llama3-8b", 8.0), ("llama3-70b", 70.6), ("llama3.1-405b", 405.8),
])
def test_parameter_counts_match_published_sizes(name, billions):
    assert catalog.model(name).params / 1e9 == pytest.approx(billions, rel=0.02)


def test_gqa_models_have_fewer_kv_heads():
    m = catalog.model("llama3-70b")
    assert (m.heads, m.kv_heads) == (64, 8) and m.gated_mlp


def test_invalid_architecture_is_explained():
    bad = catalog.ModelArch("x", 4, 1000, 4000, 7, 7, 100, 128, False, True)
    with pytest.raises(UserError, match="hidden 1000 is not divisible by heads 7"):
        bad.validate()
