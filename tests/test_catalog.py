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


def test_v100_has_no_bf16_and_plans_in_fp16_or_fp32():
    """V100 (Volta) has FP16 tensor cores and no BF16: its 16-bit peak, the yardstick of speed
    and MFU, is the FP16 one; a BF16 plan is refused naming the precisions it has."""
    v100 = catalog.accelerator("V100")
    assert v100.bf16_tflops is None and v100.half_tflops == 125.0
    assert (v100.peak_tflops("fp16"), v100.peak_tflops("fp32")) == (125.0, 15.7)
    with pytest.raises(UserError, match=r"no BF16 tensor cores.*\(fp16, fp32\)"):
        v100.peak_tflops("bf16")
    a100 = catalog.accelerator("A100")  # both: FP16 at the BF16 rate
    assert a100.peak_tflops("fp16") == a100.peak_tflops("bf16") == a100.half_tflops


@pytest.mark.parametrize(
    "name,billions",
    [
        ("gpt3-175b", 175),
        ("gpt3-6.7b", 6.7),
        ("llama2-7b", 6.7),
        ("llama2-13b", 13.0),
        ("llama2-70b", 69.0),
        ("llama3-8b", 8.0),
        ("llama3-70b", 70.6),
        ("llama3.1-405b", 405.8),
    ],
)
def test_parameter_counts_match_published_sizes(name, billions):
    assert catalog.model(name).params / 1e9 == pytest.approx(billions, rel=0.02)


def test_gqa_models_have_fewer_kv_heads():
    m = catalog.model("llama3-70b")
    assert (m.heads, m.kv_heads) == (64, 8) and m.gated_mlp


def test_invalid_architecture_is_explained():
    bad = catalog.ModelArch("x", 4, 1000, 4000, 7, 7, 100, 128, False, True)
    with pytest.raises(UserError, match="hidden 1000 is not divisible by heads 7"):
        bad.validate()


def test_the_shipped_catalog_is_a_file_with_a_source_for_every_entry():
    import yaml

    shipped = yaml.safe_load(catalog.SHIPPED.read_text())["accelerators"]
    assert {e["name"] for e in shipped} <= set(catalog.ACCELERATORS)
    assert all(len(catalog.ACCELERATORS[e["name"]].source) > 20 for e in shipped)
    gh200 = catalog.accelerator("GH200")  # Sailor's GH200 runs: four a node
    assert (gh200.bf16_tflops, gh200.memory_gib, gh200.gpus_per_node) == (989.4, 96, 4)


def _entry(name: str, **figures) -> dict:
    return {
        "name": name,
        "vendor": "Acme",
        "bf16_tflops": 500.0,
        "memory_gib": 96.0,
        "memory_gbs": 3000.0,
        "scaleup_gbs": 200.0,
        "scaleout_gbps": 200.0,
        "gpus_per_node": 8,
        "power_w": 600.0,
        "source": "measured",
        **figures,
    }


def test_a_scenario_plans_on_an_accelerator_of_its_own(tmp_path, capsys):
    import json

    import yaml

    from tests.test_cli import run
    from xdscheduler.scenario import parse_scenario

    data = {
        "name": "own",
        "accelerators": [_entry("TestChip-A")],
        "domains": [
            {
                "name": "a",
                "location": {"city": "x"},
                "nodes": [{"accelerator": "testchip-a", "count": 4}],
            }
        ],
        "jobs": [
            {
                "name": "j",
                "model": "llama3-8b",
                "global_batch": 512,
                "tokens": 1e10,
                "gpus": {"min": 8, "max": 32},
            }
        ],
    }
    scn = parse_scenario(data)
    assert scn.domains[0].accelerator.bf16_tflops == 500.0 and scn.domains[0].gpus == 32
    again = parse_scenario(scn.model_dump(mode="json"))  # as a controller receives it
    assert again.domains[0].accelerator.name == "TestChip-A"
    path = tmp_path / "own.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, _ = run(capsys, "plan", str(path), "--json")
    plan = json.loads(out)
    assert code == 0 and set(plan["plan"]["gpus_per_domain"]) == {"a"}
    assert plan["predicted_step_time_s"] > 0


@pytest.mark.parametrize(
    "entry, message",
    [
        (_entry("TestChip-B", bf16_tflops=-1.0), r"accelerators\[0\]\.bf16_tflops"),
        (
            {k: v for k, v in _entry("TestChip-F").items() if k != "bf16_tflops"},
            r"accelerators\[0\].*give bf16_tflops, or fp16_tflops",
        ),
        (_entry("H100", bf16_tflops=1000.0), "already known as 'H100-SXM'"),
        ({**_entry("TestChip-C"), "source": ""}, r"accelerators\[0\]\.source"),
        (  # in words, with a name that fits; not pydantic's pattern
            _entry("My GPU"),
            r"accelerators\[0\]\.name: 'My GPU' is not accepted: an accelerator's name starts "
            r"with a letter or digit and takes only .*; e\.g\. 'My-GPU'$",
        ),
    ],
)
def test_bad_accelerators_of_a_scenario_are_named(entry, message):
    from xdscheduler.scenario import parse_scenario

    data = {
        "name": "own",
        "accelerators": [entry],
        "domains": [
            {"name": "a", "location": {"city": "x"}, "nodes": [{"accelerator": "H100", "count": 1}]}
        ],
    }
    with pytest.raises(UserError, match=message):
        parse_scenario(data, "s.yaml")


def test_catalog_files_extend_the_catalog(tmp_path, monkeypatch, capsys):
    import json

    import yaml

    from tests.test_cli import run

    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"accelerators": [_entry("TestChip-D", aliases=["tcd"])]}))
    code, out, _ = run(capsys, "catalog", "--accelerators", str(path), "--json")
    assert code == 0
    assert "TestChip-D" in {a["name"] for a in json.loads(out)["accelerators"]}
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"accelerators": [_entry("TestChip-E")]}))
    monkeypatch.setenv("XDS_ACCELERATORS", str(other))
    assert catalog.accelerator("TestChip-E").bf16_tflops == 500.0
    (tmp_path / "bad.yaml").write_text("accelerators: [{name: x}]\n")
    code, _, err = run(capsys, "catalog", "--accelerators", str(tmp_path / "bad.yaml"))
    assert code == 2 and r"accelerators[0].vendor: Field required" in err
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"accelerators": [_entry("Ä100")]}))
    code, _, err = run(capsys, "catalog", "--accelerators", str(tmp_path / "bad.yaml"))
    assert code == 2 and "accelerators[0].name: 'Ä100' is not accepted" in err
    assert "Value error" not in err and "e.g. 'A100'" in err


@pytest.mark.parametrize("card,has_fp8", [("RTX-4090", True), ("RTX-3090", False)])
def test_consumer_cards_plan_a_7b_model_split_to_fit_24_gb(tmp_path, capsys, card, has_fp8):
    """A GeForce card is rated at its FP32-accumulate tensor rate (half the FP16-accumulate
    one on the box), and 24 GB holds no 7B model with its optimizer state: the plan splits it
    and fits; FP8 only where the card has it."""
    import json

    import yaml

    from tests.test_cli import run

    acc = catalog.accelerator(card.replace("-", "").lower())  # an alias: rtx4090, rtx3090
    assert acc.name == card and acc.memory_gib == 24 and acc.tf32_tflops == acc.fp32_tflops
    assert acc.bf16_tflops == pytest.approx(2 * acc.fp32_tflops, rel=0.01)
    scenario = tmp_path / "cards.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "name": "cards",
                "seed": 1,
                "domains": [
                    {
                        "name": "lab",
                        "location": {"city": "x"},
                        "nodes": [{"accelerator": card, "count": 2}],
                    }
                ],
                "jobs": [
                    {
                        "name": "l7",
                        "model": "llama2-7b",
                        "global_batch": 64,
                        "tokens": 1e9,
                        "gpus": {"min": 8, "max": 16},
                    }
                ],
            }
        )
    )
    code, out, _ = run(capsys, "plan", str(scenario), "--json")
    plan = json.loads(out)["plan"]
    assert code == 0 and (plan["tp"] * plan["pp"] > 1 or plan["zero"] > 0), plan
    code, out, err = run(capsys, "plan", str(scenario), "--dtype", "fp8", "--json")
    assert (code == 0) == has_fp8, err
