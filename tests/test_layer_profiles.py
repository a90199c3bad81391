"""Measured layer profiles: read (ours, Sailor's), looked up, used by the model in place of
the roofline where they reach, planned with, and measured by `xds layers measure`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import SCENARIOS
from tests.test_cli import run
from xdscheduler import catalog
from xdscheduler.costmodel.layers import (
    LayerProfile,
    LayerTiming,
    MeasuredLayers,
    Shape,
    from_sailor,
)
from xdscheduler.costmodel.plan import Hardware, Plan, PlanBatch, Stack
from xdscheduler.costmodel.steptime import estimate
from xdscheduler.errors import UserError

TINY = catalog.ModelArch("tiny", 4, 256, 1024, 4, 4, 1000, 128, False, True)
H100 = Hardware.of(catalog.accelerator("H100-SXM"))


def profile(arch=TINY, accelerator="H100-SXM", dtype="bf16", **extra) -> LayerProfile:
    """Hand-made times: at micro-batch 4 every block takes twice what it takes at 2."""
    rows = [
        LayerTiming(
            micro_batch=mb,
            tp=1,
            first_fwd_s=0.001 * k,
            first_bwd_s=0.0005 * k,
            layer_fwd_s=0.01 * k,
            layer_bwd_s=0.02 * k,
            last_fwd_s=0.004 * k,
            last_bwd_s=0.006 * k,
        )
        for mb, k in ((2, 1), (4, 2))
    ]
    return LayerProfile(
        accelerator=accelerator,
        dtype=dtype,
        stack="megatron-core",
        shape=Shape.of(arch),
        source="by hand",
        timings=rows,
        **extra,
    )


def step(plan: Plan, measured=(), hw=H100, batch=8, **kw):
    est = estimate(TINY, batch, PlanBatch.of([plan]), hw, measured=measured, **kw)
    return est, {k: float(v[0]) for k, v in est.breakdown_s.items()}


def test_a_profiled_plan_takes_its_measured_times_by_hand():
    """One GPU, micro-batch 2, batch 8: four micro-batches of 4 layers (10 + 20 ms), the
    embedding (1.5 ms) and the output block (10 ms); the optimizer at the profile's rate."""
    m = MeasuredLayers.of(profile(optimizer_s_per_param=1e-9))
    est, parts = step(Plan(dp=1, micro_batch=2, zero=0), (m,))
    assert parts["compute"] == pytest.approx(4 * (4 * 0.030 + 0.0015 + 0.010))
    assert parts["optimizer"] == pytest.approx(TINY.params * 1e-9)
    assert float(est.step_time_s[0]) == pytest.approx(sum(parts.values()))


def test_micro_batches_between_those_measured_are_interpolated_and_beyond_them_not():
    m = MeasuredLayers.of(profile())
    times = m.times(
        np.array([2, 3, 4, 8, 3]), np.array([1, 1, 1, 1, 2]), m.accelerator, m.precision
    )
    assert times[1, 2] == pytest.approx(0.015)  # halfway from 10 to 20 ms
    assert np.isnan(times[3]).all() and np.isnan(times[4]).all()  # micro-batch 8, TP 2
    roofline = step(Plan(dp=1, micro_batch=8, zero=0))[1]["compute"]
    assert step(Plan(dp=1, micro_batch=8, zero=0), (m,))[1]["compute"] == roofline


def test_a_profile_stands_only_for_its_accelerator_precision_and_shape():
    m = MeasuredLayers.of(profile())
    plan = Plan(dp=1, micro_batch=2, zero=0)
    roofline = step(plan)[1]["compute"]
    a100 = Hardware.of(catalog.accelerator("A100-80GB"))
    assert step(plan, (m,), hw=a100)[1]["compute"] == step(plan, hw=a100)[1]["compute"]
    assert (
        step(Plan(dp=1, micro_batch=2, zero=0, dtype="fp8"), (m,))[1]["compute"]
        == step(Plan(dp=1, micro_batch=2, zero=0, dtype="fp8"))[1]["compute"]
    )
    other = MeasuredLayers.of(profile(arch=catalog.model("opt-350m")))
    assert step(plan, (other,))[1]["compute"] == roofline != step(plan, (m,))[1]["compute"]


def test_what_a_profile_left_untimed_the_model_adds():
    """An output block timed without the output layer gets the roofline's; TP timed as one
    rank's shard gets the roofline's all-reduces."""
    plan = Plan(dp=1, micro_batch=2, zero=0)
    timed = step(plan, (MeasuredLayers.of(profile()),))[1]["compute"]
    untimed = step(plan, (MeasuredLayers.of(profile(output_layer_timed=False)),))[1]["compute"]
    assert untimed > timed
    tp2 = profile()
    tp2 = tp2.model_copy(update={"timings": [t.model_copy(update={"tp": 2}) for t in tp2.timings]})
    with_comm = step(Plan(dp=1, tp=2, micro_batch=2, zero=0), (MeasuredLayers.of(tp2),))[1]
    without = step(
        Plan(dp=1, tp=2, micro_batch=2, zero=0),
        (MeasuredLayers.of(tp2.model_copy(update={"tp_comm_timed": False})),),
    )[1]
    assert with_comm["tp_comm"] == 0 < without["tp_comm"]


def test_measured_activations_replace_the_count_and_stages_hold_what_1f1b_keeps():
    from xdscheduler.costmodel.layers import LayerMemory
    from xdscheduler.costmodel.memory import memory_gib

    m = MeasuredLayers.of(
        profile(memory=[LayerMemory(tp=1, first_bytes=1e6, layer_bytes=2e7, last_bytes=3e7)])
    )
    one = memory_gib(
        TINY, 8, PlanBatch.of([Plan(dp=1, micro_batch=2, zero=0)]), Stack(), measured=(m,)
    )
    assert one["activations"][0] * 2**30 == pytest.approx(2 * (4 * 2e7 + 1e6))
    assert one["logits"][0] * 2**30 == pytest.approx(2 * 3e7)
    # two stages, four micro-batches: the first keeps two of its 2 layers and the embedding
    two = memory_gib(
        TINY, 8, PlanBatch.of([Plan(dp=1, pp=2, micro_batch=2, zero=0)]), Stack(), measured=(m,)
    )
    first, last = 2 * 2 * (2 * 2e7 + 1e6), 2 * (2 * 2e7) + 2 * 3e7
    assert (two["activations"][0] + two["logits"][0]) * 2**30 == pytest.approx(max(first, last))


def sailor_doc(layers=4, update=0.5):
    """Sailor's simulator format: model -> GPU -> micro-batch -> TP -> layer -> [f, b, u]."""
    table = {
        str(mb): {
            "1": {
                str(i): [0.001 * mb * (3 if i in (0, layers + 1) else 1 + i), 0.002 * mb, update]
                for i in range(layers + 2)
            }
        }
        for mb in (1, 2)
    }
    return {"OPT-350": {"GH-96": table, "A100-40": table}, "GPT-Neo-2.7": {"GH-96": table}}


def test_sailors_profile_reads_as_ours_median_layer_and_memory_in_fp32_floats():
    arch = catalog.ModelArch("four", 4, 1024, 4096, 16, 16, 50272, 2048, False, True)
    info = {
        "OPT-350": {
            "1": {
                str(i): {"act_mem_floats": 1000 * (i + 1), "params_floats": 60_000_000}
                for i in range(6)
            }
        }
    }
    p = from_sailor(
        sailor_doc(),
        arch,
        "GH200",
        sailor_model="OPT-350",
        sailor_gpu="GH-96",
        llm_info=info,
        source="test",
    )
    t = {(r.micro_batch, r.tp): r for r in p.timings}[(2, 1)]
    assert t.layer_fwd_s == pytest.approx(0.002 * 3.5)  # median of layers 1-4: 2, 3, 4, 5
    assert (t.first_fwd_s, t.last_fwd_s) == (pytest.approx(0.006), pytest.approx(0.006))
    assert p.memory[0].layer_bytes == 4 * 3500 and p.memory[0].first_bytes == 4 * 1000
    assert p.dtype == "tf32" and p.stack == "megatron-deepspeed" and p.output_layer_timed
    # the planner's own format (micro-batch at the top) reads the same
    q = from_sailor(sailor_doc()["OPT-350"]["GH-96"], arch, "GH200", source="test")
    assert q.timings == p.timings
    # GPT-Neo's last block is the final norm alone: the output layer is left to the model
    info["OPT-350"]["1"]["5"]["params_floats"] = 5120
    assert not from_sailor(
        sailor_doc(),
        arch,
        "GH200",
        sailor_model="OPT-350",
        sailor_gpu="GH-96",
        llm_info=info,
        source="t",
    ).output_layer_timed


def test_sailors_profile_of_another_shape_or_key_is_refused_with_the_choices():
    arch = catalog.ModelArch("six", 6, 1024, 4096, 16, 16, 50272, 2048, False, True)
    with pytest.raises(UserError, match="right --model"):
        from_sailor(sailor_doc(), arch, "GH200", sailor_model="OPT-350", sailor_gpu="GH-96")
    with pytest.raises(UserError, match=r"--sailor-model one of: GPT-Neo-2\.7, OPT-350"):
        from_sailor(sailor_doc(), arch, "GH200")
    with pytest.raises(UserError, match="--sailor-gpu one of: A100-40, GH-96"):
        from_sailor(sailor_doc(), arch, "GH200", sailor_model="OPT-350")


def test_layers_import_show_and_estimate_with_a_profile(capsys, tmp_path):
    src, out = tmp_path / "sailor.json", tmp_path / "gh200.yaml"
    doc = sailor_doc(layers=24)
    src.write_text(json.dumps(doc))
    argv = [
        "layers",
        "import",
        str(src),
        "--model",
        "opt-350m",
        "--accelerator",
        "GH200",
        "--sailor-model",
        "OPT-350",
        "--sailor-gpu",
        "GH-96",
        "--out",
        str(out),
    ]
    code, text, err = run(capsys, *argv)
    assert code == 0, err
    assert "wrote" in text and LayerProfile.load(out).accelerator == "GH200"
    code, _, err = run(capsys, *argv)
    assert code == 2 and "--force" in err
    code, text, _ = run(capsys, "layers", "show", str(out), "--json")
    assert code == 0 and json.loads(text)["shape"]["hidden"] == 1024
    estimate_argv = [
        "estimate",
        "--gpu",
        "GH200",
        "--model",
        "opt-350m",
        "--gpus",
        "4",
        "--global-batch",
        "8",
        "--micro-batch",
        "2",
        "--dtype",
        "tf32",
        "--zero",
        "0",
        "--stack",
        "megatron-deepspeed",
        "--json",
    ]
    code, text, err = run(capsys, *estimate_argv, "--layer-profile", str(out))
    assert code == 0, err
    with_profile = json.loads(text)
    code, text, _ = run(capsys, *estimate_argv)
    assert with_profile["measured_layers"] and not json.loads(text)["measured_layers"]
    assert with_profile["step_time_s"] != json.loads(text)["step_time_s"]


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not JSON"),
        ("[1, 2]", "a JSON object is expected"),
        ('{"OPT-350": {"GH-96": {"1": {"1": {"0": [1, 1, 1]}}}}}', "needs 26 (embedding"),
        (json.dumps({"1": {"1": {str(i): "fast" for i in range(26)}}}), "micro-batch 1, TP 1: not"),
        (
            json.dumps({"1": {"1": {str(i): [-1, 1, 1] for i in range(26)}}}),
            "micro-batch 1, TP 1: not",
        ),
    ],
)
def test_a_bad_sailor_file_is_one_line_and_exit_2(capsys, tmp_path, content, message):
    src = tmp_path / "bad.json"
    src.write_text(content)
    code, _, err = run(
        capsys,
        "layers",
        "import",
        str(src),
        "--model",
        "opt-350m",
        "--accelerator",
        "GH200",
        "--out",
        str(tmp_path / "x.yaml"),
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_bad_profile_file_names_the_field(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    doc = profile().model_dump(mode="json")
    doc["timings"][0]["layer_fwd_s"] = -1
    bad.write_text(json.dumps(doc))
    code, _, err = run(capsys, "layers", "show", str(bad))
    assert code == 2 and "timings.0.layer_fwd_s" in err


def test_the_search_plans_only_what_a_profile_of_its_accelerator_timed():
    """Sailor's five zones (A100-40GB) with a profile of OPT-350M there at TP 4 and
    micro-batch 8 alone: every plan the search keeps is one it timed."""
    from xdscheduler.planner.search import JobSpec, evaluate_space
    from xdscheduler.planner.space import SearchOptions
    from xdscheduler.planner.view import ClusterView
    from xdscheduler.scenario import Weights, load_scenario

    scn = load_scenario(SCENARIOS / "sailor_five_zones.yaml")
    arch = catalog.model("opt-350m")
    rows = [
        LayerTiming(
            micro_batch=8,
            tp=4,
            first_fwd_s=1e-3,
            first_bwd_s=0.0,
            layer_fwd_s=6e-3,
            layer_bwd_s=13e-3,
            last_fwd_s=8e-3,
            last_bwd_s=8e-3,
        )
    ]
    m = MeasuredLayers.of(
        LayerProfile(
            accelerator="A100-40GB",
            dtype="tf32",
            stack="megatron-deepspeed",
            shape=Shape.of(arch),
            source="by hand",
            timings=rows,
        )
    )
    opts = SearchOptions(dtype="tf32", stack=Stack.preset("megatron-deepspeed"), layers=(m,))
    ev = evaluate_space(
        JobSpec.of(scn.job("opt-350m-sailor")),
        ClusterView.from_scenario(scn),
        Weights(efficiency=1.0, utilization=0.0, cost=0.0),
        opts,
    )
    assert len(ev.place) > 0
    assert set(ev.plans.tp) == {4} and set(ev.plans.micro_batch) == {8}


SMALLEST = catalog.ModelArch("tiny", 2, 64, 256, 4, 4, 128, 32, False, True)  # to time


def on_the_cpu(**given) -> LayerProfile:
    """`SMALLEST` measured on the CPU, one micro-batch of one repeat at TP 1 as an H100's
    profile, unless `given` says otherwise."""
    from xdscheduler.live import layer_timer

    tried = {"micro_batches": [1], "tp": 1, "accelerator": "H100-SXM", "device": "cpu"}
    return layer_timer.measure(SMALLEST, **(tried | {"repeats": 1} | given))


def test_layer_timer_measures_a_tiny_model_on_the_cpu():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a loaded machine: one thread times steadier
    try:
        arch = SMALLEST
        p = on_the_cpu(micro_batches=[1, 2], tp=2, dtype="tf32", accelerator="A100-40GB")
        fused = on_the_cpu(dtype="bf16", accelerator="A100-40GB", fused_attention=True)
    finally:
        torch.set_num_threads(threads)
    assert [t.micro_batch for t in p.timings] == [1, 2]
    assert all(t.layer_fwd_s > 0 and t.layer_bwd_s > 0 for t in p.timings)
    assert p.dtype == "fp32"  # no TF32 on a CPU: what ran is recorded
    assert not p.tp_comm_timed and fused.tp_comm_timed and fused.dtype == "bf16"
    assert p.optimizer_s_per_param > 0 and not p.memory  # memory is measured on a GPU
    # the file it writes reads back, and the model uses it for that shape
    assert LayerProfile.model_validate(p.model_dump(mode="json")) == p
    assert MeasuredLayers.of(p).applies(arch, 32)


def test_layers_measure_on_the_cpu_needs_the_accelerator_named(capsys, tmp_path):
    code, _, err = run(
        capsys,
        "layers",
        "measure",
        "--model",
        "gpt3-125m",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "p.yaml"),
    )
    assert code == 2 and "--accelerator" in err
    code, _, err = run(
        capsys,
        "layers",
        "measure",
        "--model",
        "gpt3-125m",
        "--device",
        "cpu",
        "--accelerator",
        "A100-40GB",
        "--micro-batch",
        "0,2",
        "--out",
        str(tmp_path / "p.yaml"),
    )
    assert code == 2 and "--micro-batch" in err


def test_xds_plan_with_a_layer_profile_plans_on_its_stack_and_what_it_timed(capsys, tmp_path):
    arch = catalog.model("opt-350m")
    rows = [
        LayerTiming(
            micro_batch=8,
            tp=4,
            first_fwd_s=1e-3,
            first_bwd_s=0.0,
            layer_fwd_s=6e-3,
            layer_bwd_s=13e-3,
            last_fwd_s=8e-3,
            last_bwd_s=8e-3,
        )
    ]
    path = tmp_path / "a100.yaml"
    LayerProfile(
        accelerator="A100-40GB",
        dtype="tf32",
        stack="megatron-deepspeed",
        shape=Shape.of(arch),
        source="by hand",
        timings=rows,
    ).save(path)
    code, out, err = run(
        capsys,
        "plan",
        str(SCENARIOS / "sailor_five_zones.yaml"),
        "--dtype",
        "tf32",
        "--weights",
        "1,0,0",
        "--layer-profile",
        str(path),
        "--json",
    )
    assert code == 0, err
    plan = json.loads(out)["plan"]
    assert (plan["tp"], plan["micro_batch"], plan["zero"]) == (4, 8, 0)  # DeepSpeed's ZeRO-0


@pytest.mark.parametrize(
    "device, name",
    [
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("NVIDIA GeForce RTX 3090", "RTX-3090"),
        ("NVIDIA GeForce RTX 2060", None),
    ],
)
def test_a_cuda_device_name_finds_its_catalog_entry(device, name):
    """The profiler names the accelerator from torch.cuda.get_device_name: the longest catalog
    name or alias the device's name holds (GH200 holds H200's too)."""
    assert catalog.accelerator_in(device) == name


def test_an_accelerator_outside_the_catalog_has_no_code_for_a_profile_to_match():
    assert catalog.accelerator_code("GH200") >= 0
    assert catalog.accelerator_code("not-an-accelerator") == -1


def test_layer_timer_times_transformers_own_gpt2_modules():
    """`--implementation hf-gpt2`: transformers' GPT-2 block, embedding and loss, fp32 weights
    under autocast in 16-bit (as its Trainer runs them); what it cannot time, it says."""
    pytest.importorskip("transformers", reason="the hf extra is not installed")
    import torch

    arch = SMALLEST
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        half = on_the_cpu(dtype="bf16", fused_attention=True, implementation="hf-gpt2")
        with pytest.raises(UserError, match="TP 1"):
            on_the_cpu(tp=2, dtype="bf16", implementation="hf-gpt2")
    finally:
        torch.set_num_threads(threads)
    (t,) = half.timings
    assert min(t.first_fwd_s, t.layer_fwd_s, t.layer_bwd_s, t.last_fwd_s, t.last_bwd_s) > 0
    assert half.dtype == "bf16" and "GPT-2 modules, fp32 weights under autocast" in half.source
    assert MeasuredLayers.of(half).applies(arch, 32)


def test_the_gpu_steps_benchmark_reads_the_committed_h100_runs(capsys):
    """The committed measurements (benchmarks/gpu_runs, one H100) read back and compare."""
    from benchmarks import gpu_steps

    gpu_steps.main([str(gpu_steps.RUNS)])
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert "training steps of a Hugging Face GPT-2 measured on NVIDIA H100" in first
    assert "ours, a profile of transformers' GPT-2 modules" in out and "roofline alone" in out
    assert gpu_steps.accelerator_of(gpu_steps.RUNS) == "H100-SXM"


def test_the_gpu_steps_benchmark_reads_the_committed_h200_runs(capsys):
    """One H200's measurements, with profiles of layers timed alone and four at once: each
    estimate is made on the H200's own figures, and the chained profile leads."""
    from benchmarks import gpu_steps

    folder = gpu_steps.RUNS / "h200"
    assert gpu_steps.accelerator_of(folder) == "H200"
    gpu_steps.main([str(folder)])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("ours, a profile of transformers' GPT-2 modules, 4 run at once:")
    assert "20 training steps of a Hugging Face GPT-2 measured on NVIDIA H200" in first


def test_a_folder_of_two_machines_profiles_is_refused_in_one_line(tmp_path):
    """Profiles of an H100 and an H200 in one folder: which machine its steps ran on cannot
    be told, so the benchmark stops naming both (and a folder of none, saying so)."""
    import shutil

    from benchmarks import gpu_steps

    for folder in (gpu_steps.RUNS, gpu_steps.RUNS / "h200"):
        first = sorted(folder.glob("profile-*.yaml"))[0]
        shutil.copy(first, tmp_path / first.name.replace("profile-", f"profile-{folder.name}-"))
    with pytest.raises(SystemExit, match="holds profiles of H100-SXM, H200"):
        gpu_steps.accelerator_of(tmp_path)
    with pytest.raises(SystemExit, match="no layer profiles"):
        gpu_steps.accelerator_of(tmp_path / "none")


class CountingClock:
    """One second a timed call, whatever it is: what a layer is charged is then its share."""

    cuda = False

    def __init__(self, device):
        pass

    def __call__(self, fn) -> float:
        fn()
        return 1.0


@pytest.mark.parametrize("implementation", ["xds", "hf-gpt2"])
def test_a_layer_is_timed_as_its_share_of_layers_run_at_once(monkeypatch, implementation):
    """`--chain N`: N distinct blocks run back to back, each layer charged 1/N of the run (a
    whole step hides the launch latency a block timed alone pays); the embedding and the
    output block are timed once."""
    if implementation == "hf-gpt2":
        pytest.importorskip("transformers", reason="the hf extra is not installed")
    import torch

    from xdscheduler.live import layer_timer

    shape = Shape.of(SMALLEST, 32)
    cpu = torch.device("cpu")
    one, three = (
        layer_timer._blocks(shape, 1, "fp32", cpu, True, implementation, chain)[0]["layer"]
        for chain in (1, 3)
    )
    params = [{id(p) for p in m.parameters()} for m in (one, three)]
    assert len(params[1]) == 3 * len(params[0])  # three blocks of their own, not one reused
    monkeypatch.setattr(layer_timer, "Clock", CountingClock)
    got = {
        chain: on_the_cpu(
            dtype="fp32", fused_attention=True, implementation=implementation, chain=chain
        )
        for chain in (1, 3)
    }
    (alone,), (chained,) = got[1].timings, got[3].timings
    assert alone.layer_fwd_s == alone.layer_bwd_s == 1.0
    assert chained.layer_fwd_s == chained.layer_bwd_s == pytest.approx(1 / 3)
    assert chained.first_fwd_s == chained.last_bwd_s == 1.0
    assert "a share of 3 run at once" in got[3].source and "share" not in got[1].source


def scaled(p: LayerProfile, k: float, accelerator: str) -> LayerProfile:
    """`p` on another accelerator, every block `k` times as long."""
    blocks = ("first_fwd_s", "first_bwd_s", "layer_fwd_s", "layer_bwd_s", "last_fwd_s")
    rows = [
        t.model_copy(update={b: getattr(t, b) * k for b in (*blocks, "last_bwd_s")})
        for t in p.timings
    ]
    return p.model_copy(update={"accelerator": accelerator, "timings": rows})


def test_a_placement_over_two_kinds_is_timed_by_its_slowest_members_profile():
    """An H100 and an A100 together: each member's profile times the plan and the slower
    stands; a member no profile covers leaves the roofline; a scale multiplies the times."""
    fast = profile()
    slow = scaled(fast, 3.0, "A100-80GB")
    codes = [catalog.accelerator_code(a) for a in ("H100-SXM", "A100-80GB")]
    both = Hardware(**{**H100.__dict__, "accelerator": -1.0, "members": np.array([codes])})
    plan = Plan(dp=1, micro_batch=2, zero=0)
    per_micro_batch = 4 * 0.030 + 0.0015 + 0.010
    measured = (MeasuredLayers.of(fast), MeasuredLayers.of(slow))
    assert step(plan, measured, hw=both)[1]["compute"] == pytest.approx(12 * per_micro_batch)
    assert step(plan, measured[::-1], hw=both)[1]["compute"] == pytest.approx(12 * per_micro_batch)
    roofline = step(plan, hw=both)[1]["compute"]
    assert step(plan, measured[:1], hw=both)[1]["compute"] == roofline
    halved = Hardware(**{**both.__dict__, "measured_scale": 0.5})
    assert step(plan, measured, hw=halved)[1]["compute"] == pytest.approx(6 * per_micro_batch)
