import dataclasses
import itertools

import numpy as np
import pytest

from xdscheduler import catalog
from xdscheduler.costmodel.constants import DEFAULT
from xdscheduler.costmodel.messages import NET_STEP_LATENCY_S
from xdscheduler.costmodel.plan import Hardware, Plan, PlanBatch, Stack, WanUse
from xdscheduler.costmodel.steptime import BREAKDOWN_KEYS, estimate, model_flops_per_step

H100 = Hardware.of(catalog.accelerator("H100-SXM"))
A100 = Hardware.of(catalog.accelerator("A100-80GB"))


def one(arch, batch, plan, hw=H100, **kw):
    est = estimate(arch, batch, PlanBatch.of([plan]), hw, **kw)
    return est, float(est.step_time_s[0])


def test_gpt_flops_match_megatron_formula():
    m = catalog.model("gpt3-175b")
    B, s, L, h, V = 1536, m.seq_len, m.layers, m.hidden, m.vocab
    megatron = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert model_flops_per_step(m, B) == pytest.approx(megatron, rel=1e-9)


def test_large_compute_bound_step_is_flops_over_sustained_peak():
    # Huge matrices, one GPU, no parallelism: the step is GEMM FLOPs at the sustained rate
    # plus what a hand calculation bounds: weight reads (intensity ~5000 FLOP/byte against a
    # ridge of 295: ~5%), causal flash attention (~3%), element-wise kernels (34·h bytes a
    # token and layer, three passes each way: ~7%) and the Adam update (~3%).
    arch = catalog.ModelArch("wide", 2, 16384, 65536, 128, 128, 256, 2048, False, True)
    est, t = one(arch, 16, Plan(dp=1, micro_batch=4))
    gemm_flops = est.model_flops - 16 * 3 * 4 * 2048**2 * 16384 * 2  # minus attention
    floor = gemm_flops / (H100.peak_tflops * 1e12 * DEFAULT.gemm_efficiency)
    assert floor * 1.10 < t < floor * 1.25


def test_breakdown_sums_to_step_time_for_many_plans():
    arch = catalog.model("llama2-70b")
    plans = PlanBatch.of(
        [
            Plan(dp=d, tp=t, pp=p, micro_batch=1, recompute=r)
            for d in (1, 4)
            for t in (4, 8)
            for p in (2, 8)
            for r in ("none", "full")
        ]
    )
    est = estimate(arch, 64, plans, H100)
    total = sum(est.breakdown_s[k] for k in BREAKDOWN_KEYS)
    np.testing.assert_allclose(total, est.step_time_s, rtol=1e-12)
    assert (est.step_time_s > 0).all()


def test_per_gpu_efficiency_falls_as_tensor_parallelism_grows():
    arch = catalog.model("llama2-7b")
    rates = []
    for tp in (1, 2, 4, 8):
        est, t = one(arch, 64, Plan(dp=8 // tp, tp=tp))
        rates.append(est.model_flops / t / 8)
    assert all(a > b for a, b in itertools.pairwise(rates))


def test_recompute_trades_time_for_memory():
    arch = catalog.model("llama2-13b")
    runs = {r: one(arch, 64, Plan(dp=2, tp=4, recompute=r)) for r in ("none", "full")}
    (e_none, t_none), (e_full, t_full) = runs["none"], runs["full"]
    assert t_full > t_none * 1.2
    assert e_full.memory_parts_gib["activations"][0] < e_none.memory_parts_gib["activations"][0] / 4


def test_zero_shards_optimizer_state_across_replicas():
    arch = catalog.model("llama2-7b")
    states = [one(arch, 64, Plan(dp=8, zero=z))[0].memory_parts_gib for z in (0, 1, 2, 3)]
    opt = [s["optimizer"][0] for s in states]
    assert opt[1] == pytest.approx(opt[0] / 8)
    assert states[2]["gradients"][0] == pytest.approx(states[1]["gradients"][0] / 8)
    assert states[3]["weights"][0] == pytest.approx(states[2]["weights"][0] / 8)


def test_wan_pipeline_boundary_is_far_cheaper_than_wan_gradient_allreduce():
    arch = catalog.model("llama2-70b")
    wan = dict(pp_gbps=10.0, dp_gbps=10.0, pp_latency_s=0.015, dp_rtt_s=0.03)
    pp_split = WanUse(pp_crossings=1, **wan)
    dp_split = WanUse(dp_domains=2, **wan)
    plan = Plan(dp=8, tp=8, pp=8)
    e_pp, t_pp = one(arch, 512, plan, wan=pp_split)
    e_dp, t_dp = one(arch, 512, plan, wan=dp_split)
    _, t_local = one(arch, 512, plan)
    assert t_local < t_pp < t_dp / 3
    assert e_dp.cross_domain_bytes[0] > 1.5 * e_pp.cross_domain_bytes[0]
    # 68.7 GB of activations and their gradients per step, half each way over 1.125 GB/s.
    assert e_pp.cross_domain_bytes[0] == pytest.approx(2 * 512 * 4096 * 8192 * 2)
    # The stages beside the crossing wait for one exchange over it a micro-batch (both ways at
    # once): the step grows by the time one way's bytes take.
    one_way_s = e_pp.cross_domain_bytes[0] / 2 / 1.125e9
    assert t_pp - t_local == pytest.approx(one_way_s, rel=0.05)


def test_wan_transfer_hides_behind_compute_only_in_an_interleaved_schedule():
    """Megatron's interleaved schedule posts the next exchange before a micro-batch's compute
    and hides it there; its plain 1F1B waits for every exchange, since the next pass needs
    what it receives (`costmodel.schedules`)."""
    arch = catalog.model("llama2-70b")
    wan = WanUse(pp_crossings=1, pp_gbps=10.0, pp_latency_s=0.015)
    interleaved = Plan(dp=1, tp=4, pp=8, vp=2)
    _, t_local = one(arch, 64, interleaved)
    _, t_pp = one(arch, 64, interleaved, wan=wan)
    assert t_local < t_pp < 1.1 * t_local
    plain = Plan(dp=1, tp=4, pp=8)
    e_plain, _ = one(arch, 64, plain, wan=wan)
    transfer_s = 4096 * 8192 * 2 / 4 / 1.125e9  # a micro-batch's activations, each TP rank's
    assert e_plain.breakdown_s["pp_comm"][0] > 64 * transfer_s
    assert e_plain.overlapped_s["pp_comm"][0] == 0.0


def test_diloco_divides_the_wan_traffic_by_h():
    arch = catalog.model("llama2-7b")
    wan = WanUse(dp_domains=2, dp_gbps=5.0, dp_rtt_s=0.02)
    sync = one(arch, 256, Plan(dp=16, tp=1), wan=wan)[0]
    lazy = one(arch, 256, Plan(dp=16, tp=1, diloco_h=100), wan=wan)[0]
    assert lazy.cross_domain_bytes[0] == pytest.approx(sync.cross_domain_bytes[0] / 100)
    assert lazy.step_time_s[0] < sync.step_time_s[0] / 3
    assert lazy.breakdown_s["dp_comm"][0] < sync.breakdown_s["dp_comm"][0]


def test_an_outer_sync_not_streamed_is_waited_for_in_full():
    """Streamed, DiLoCo's outer sync hides behind the next H inner steps; taken in the step
    that syncs (the live runner's plain loop), every step pays its share of it."""
    arch = catalog.model("llama2-7b")
    wan = WanUse(dp_domains=2, dp_gbps=5.0, dp_rtt_s=0.02)
    plan = Plan(dp=16, tp=1, diloco_h=100)
    streamed = one(arch, 256, plan, wan=wan)[0]
    waited = one(arch, 256, plan, wan=wan, stack=Stack(overlap_outer_sync=False))[0]
    share = streamed.breakdown_s["sync"][0] + streamed.overlapped_s["sync"][0]
    assert streamed.breakdown_s["sync"][0] == 0.0 < share  # 17 GB at 5 Gbit/s over 100 steps
    assert waited.breakdown_s["sync"][0] == pytest.approx(share)
    assert waited.overlapped_s["sync"][0] == 0.0
    assert not Stack.preset("plain-dp").overlap_outer_sync


def test_links_rated_per_node_pair_carry_the_wan_bytes_over_every_node_pair():
    """A cloud's inter-zone figure is what one pair of VMs gets (Sailor profiles one 4-GPU VM
    pair); a job's node pairs across the link each get it. 16 replicas a domain on 8-GPU nodes
    exchange their gradients over 2 node pairs: half the time of one shared 5 Gbit/s pipe."""
    arch = catalog.model("llama2-7b")
    plan = Plan(dp=32, tp=1)
    link = dict(dp_domains=2, dp_gbps=5.0, dp_rtt_s=0.02)
    shared = one(arch, 256, plan, wan=WanUse(**link))[0]
    per_node = one(arch, 256, plan, wan=WanUse(dp_per_node=1.0, **link))[0]

    def dp_total(e):
        return e.breakdown_s["dp_comm"][0] + e.overlapped_s["dp_comm"][0]

    # a ring over 2 domains sends 2·(2-1)/2 = 1 copy of the bf16 gradients; 2 pairs halve it
    ring = arch.params * 2 / (5e9 / 8 * DEFAULT.wan_efficiency)
    assert dp_total(shared) - dp_total(per_node) == pytest.approx(ring / 2, rel=1e-9)
    assert per_node.cross_domain_bytes[0] == shared.cross_domain_bytes[0]
    # replicas that fill less than a node pair get the one pair's figure, as a shared link
    small = Plan(dp=8, tp=1)
    assert one(arch, 256, small, wan=WanUse(dp_per_node=1.0, **link))[1] == pytest.approx(
        one(arch, 256, small, wan=WanUse(**link))[1]
    )
    # a pipeline boundary: the stage's 16 ranks stream over 2 node pairs
    wan = dict(pp_crossings=1, pp_gbps=2.0, pp_latency_s=0.015)
    stages = Plan(dp=16, tp=1, pp=2)
    e_shared, t_shared = one(arch, 256, stages, wan=WanUse(**wan))
    e_node, t_node = one(arch, 256, stages, wan=WanUse(pp_per_node=1.0, **wan))
    assert t_node < t_shared
    assert (
        e_node.breakdown_s["pp_comm"][0] + e_node.overlapped_s["pp_comm"][0]
        < e_shared.breakdown_s["pp_comm"][0] + e_shared.overlapped_s["pp_comm"][0]
    )


def test_older_software_stack_is_slower():
    arch = catalog.model("gpt3-13b")
    plan = Plan(dp=4, tp=8, pp=1, recompute="full")
    _, modern = one(arch, 256, plan, hw=A100)
    _, old = one(arch, 256, plan, hw=A100, stack=Stack.preset("megatron-2021"))
    assert old > modern


def test_a_plain_data_parallel_loop_waits_for_its_whole_fp32_reduction():
    """plain-dp (the live runner): the gradients are reduced after the backward pass, in fp32,
    nothing hidden; every rank keeps the whole optimizer state, nothing is recomputed."""
    from xdscheduler.planner.space import memory_ladder

    arch = catalog.model("gpt3-1.3b")
    plan = Plan(dp=8, tp=1, pp=1, micro_batch=4, zero=0, dtype="fp32")
    plain = Stack.preset("plain-dp")
    est, _ = one(arch, 32, plan, hw=A100, stack=plain)
    core, _ = one(arch, 32, plan, hw=A100)
    exposed, hidden = float(est.breakdown_s["dp_comm"][0]), float(est.overlapped_s["dp_comm"][0])
    assert exposed > 0 and hidden == 0
    # a ring all-reduce of fp32 gradients over the node's scale-up links, at the collective
    # efficiency: 2 (n - 1) / n of the bytes
    ring = 2 * 7 / 8 * arch.params * 4 / (A100.scaleup_gbs * 1e9) / DEFAULT.collective_efficiency
    assert exposed == pytest.approx(ring, rel=1e-6)
    assert float(core.breakdown_s["dp_comm"][0]) < exposed  # Megatron hides it in the backward
    assert memory_ladder(plain) == ((0, 0),)


def test_vectorised_equals_one_at_a_time():
    arch = catalog.model("llama3-8b")
    rng = np.random.default_rng(0)
    plans = [
        Plan(
            dp=int(rng.choice([1, 2, 4])),
            tp=int(rng.choice([1, 2, 4, 8])),
            pp=int(rng.choice([1, 2, 4])),
            micro_batch=int(rng.choice([1, 2])),
            recompute=str(rng.choice(["none", "selective", "full"])),
            zero=int(rng.integers(0, 4)),
        )
        for _ in range(50)
    ]
    batch = estimate(arch, 64, PlanBatch.of(plans), H100)
    singles = [one(arch, 64, p)[1] for p in plans]
    np.testing.assert_allclose(batch.step_time_s, singles, rtol=1e-12)


def test_heterogeneous_hardware_broadcasts_per_plan():
    arch = catalog.model("llama2-7b")
    plans = PlanBatch.of([Plan(dp=8), Plan(dp=8)])
    hw = Hardware(
        **{
            f.name: np.array([getattr(H100, f.name), getattr(A100, f.name)])
            for f in dataclasses.fields(Hardware)
        }
    )
    est = estimate(arch, 64, plans, hw)
    assert est.step_time_s[1] > 2 * est.step_time_s[0]


def test_chunked_evaluation_matches_one_pass(monkeypatch):
    from xdscheduler.costmodel import steptime

    arch = catalog.model("llama2-13b")
    plans = PlanBatch.of(
        [Plan(dp=d, tp=t, pp=p) for d in (1, 2, 4) for t in (1, 2, 4, 8) for p in (1, 2, 4, 5)]
    )
    hw = Hardware(
        **{f.name: np.full(len(plans), getattr(H100, f.name)) for f in dataclasses.fields(Hardware)}
    )
    whole = estimate(arch, 64, plans, hw)
    monkeypatch.setattr(steptime, "CHUNK", 7)
    parts = estimate(arch, 64, plans, hw)
    np.testing.assert_array_equal(whole.step_time_s, parts.step_time_s)
    np.testing.assert_array_equal(whole.memory_gib, parts.memory_gib)
    np.testing.assert_array_equal(whole.breakdown_s["bubble"], parts.breakdown_s["bubble"])


# ------------------------------------------------------------------ uneven splits


def test_uneven_stages_take_the_shortfall_off_the_last_stage_first():
    """By hand: 126 layers over 16 stages are 7 + 14 x 8 + 7; the heaviest has 8, the last 7."""
    from xdscheduler.costmodel.shape import stage_layers

    assert [tuple(map(int, stage_layers(126, p))) for p in (16, 8, 9, 1)] == [
        (8, 7),
        (16, 15),
        (14, 14),
        (126, 126),
    ]
    assert tuple(map(int, stage_layers(7, 3))) == (3, 2)


def test_an_uneven_pipeline_runs_at_the_pace_of_its_heaviest_stage():
    """126 layers over 16 stages: no faster than 7 layers a stage everywhere (112 layers), no
    slower than 8 everywhere (128), where the last stage also computes the output layer."""
    base = catalog.model("llama3.1-405b")
    plan = Plan(dp=1, tp=8, pp=16, micro_batch=1)
    step = {n: one(dataclasses.replace(base, layers=n), 64, plan)[1] for n in (112, 126, 128)}
    assert step[112] < step[126] <= step[128]


def test_an_uneven_data_parallel_split_waits_for_the_busiest_replica():
    """1024 samples over 147 or over 160 replicas: 7 on the busiest either way."""
    from xdscheduler.costmodel.shape import replica_micro_batches

    assert replica_micro_batches(1024, 160, 1) == 7 == replica_micro_batches(1024, 147, 1)
    assert replica_micro_batches(1024, 128, 8) == 1
    arch = catalog.model("llama2-7b")
    compute = [
        one(arch, 1024, Plan(dp=d, micro_batch=1))[0].breakdown_s["compute"][0]
        for d in (128, 147, 160)
    ]
    assert compute[1] == pytest.approx(compute[2]) and compute[1] == pytest.approx(
        compute[0] * 7 / 8
    )


def test_precisions_by_hand():
    """The same plan on H100 in every precision: fp16 computes at the 16-bit rate of bf16; a
    step in TF32 or FP32 takes between twice as long (every byte doubles) and the peak ratio
    longer (989 / 495 TF; 989 / 67); 32-bit plans hold 4-byte weights (no separate master copy:
    Adam's m and v alone are the optimizer state) and 4-byte activations."""
    arch = catalog.model("gpt3-13b")
    base = dict(dp=8, tp=8, pp=1, micro_batch=1, zero=1)
    est = {d: one(arch, 512, Plan(**base, dtype=d))[0] for d in ("bf16", "fp16", "tf32", "fp32")}
    step = {d: float(e.step_time_s[0]) for d, e in est.items()}
    assert step["fp16"] == step["bf16"]
    assert 1.6 < step["tf32"] / step["bf16"] <= 989.4 / 494.7
    assert 2.0 < step["fp32"] / step["bf16"] <= 989.4 / 66.9
    mem = {d: {k: float(v[0]) for k, v in e.memory_parts_gib.items()} for d, e in est.items()}
    assert mem["fp32"]["weights"] == pytest.approx(2 * mem["bf16"]["weights"])
    assert mem["fp32"]["optimizer"] == pytest.approx(8 / 12 * mem["bf16"]["optimizer"])
    assert mem["fp32"]["gradients"] == pytest.approx(mem["bf16"]["gradients"])
    assert mem["fp32"]["activations"] == pytest.approx(2 * mem["bf16"]["activations"])
    assert mem["tf32"] == mem["fp32"]


def test_a_precision_the_catalog_does_not_rate_is_refused_or_planned_around():
    from xdscheduler.errors import UserError
    from xdscheduler.planner.search import THROUGHPUT_ONLY, JobSpec, search
    from xdscheduler.planner.space import SearchOptions
    from xdscheduler.planner.view import ClusterView, DomainView

    npu = catalog.accelerator("Ascend-910B")
    with pytest.raises(UserError, match="no FP32 peak rated"):
        npu.peak_tflops("fp32")
    h100 = catalog.accelerator("H100-SXM")
    view = ClusterView(
        (
            DomainView("npu", npu, 64, npu.scaleup_gbs, 200, 1.0),
            DomainView("gpu", h100, 16, h100.scaleup_gbs, 400, 2.0),
        ),
        np.array([[0, 100.0], [100.0, 0]]),
        np.full((2, 2), 2.0),
        np.full((2, 2), 0.01),
    )
    arch = catalog.model("llama2-7b")
    job = JobSpec("j", arch, 512, arch.seq_len, 8, 64)
    fp32 = search(job, view, THROUGHPUT_ONLY, SearchOptions(dtype="fp32"), pareto=False).best
    assert fp32.names == ("gpu",)  # the NPUs have no FP32 figure: never planned in FP32
    bf16 = search(job, view, THROUGHPUT_ONLY, SearchOptions(), pareto=False).best
    assert "npu" in bf16.names


DEEPSPEED = Stack.preset("megatron-deepspeed")


def test_deepspeeds_blocking_sends_wait_for_every_transfer_by_hand():
    """DeepSpeed's pipeline engine blocks on its sends and receives: a middle stage of four
    waits for 4 transfers a micro-batch (activations in and out, gradients in and out), where
    Megatron's 1F1B waits for 2 exchanges, each both ways at once. Over the fill and drain
    the blocking calls wait for none beyond those (four stages, transfers shorter than a
    pass), 1F1B for three (`costmodel.schedules`' programs). One transfer: a micro-batch's
    fp32 activations split over the TP ranks, at the node's scale-out rate."""
    arch = catalog.model("opt-350m")
    plan = Plan(dp=1, tp=4, pp=4, micro_batch=8, zero=0, dtype="tf32")
    blocking = one(arch, 64, plan, stack=DEEPSPEED)[0]
    batched = one(arch, 64, plan, stack=dataclasses.replace(DEEPSPEED, overlap_p2p=True))[0]
    p2p = 8 * 2048 * 1024 * 4 / 4 / (DEFAULT.collective_efficiency * H100.scaleout_gbps * 1e9 / 8)
    micro_batches = 64 / 8
    # Megatron's exchanges send and receive at once: two a micro-batch for a middle stage
    extra = blocking.breakdown_s["pp_comm"][0] - batched.breakdown_s["pp_comm"][0]
    assert extra == pytest.approx((micro_batches * 2 - 3) * p2p, rel=1e-9)
    assert blocking.overlapped_s["pp_comm"][0] == 0.0 == batched.overlapped_s["pp_comm"][0]


def test_beside_one_wan_crossing_a_blocking_stage_waits_on_the_wan_one_side_only():
    """Four DeepSpeed stages over two domains (one crossing): the stages beside it wait for
    two transfers a micro-batch over the WAN and two inside their domain, not four over the
    WAN as with a stage between two crossings (every stage in its own domain). With m
    micro-batches, a slower WAN adds 2m + 2 of its transfers' extra time with one crossing
    (sends, and the fill's one crossing), 4m + 6 with three."""
    arch = catalog.model("llama2-7b")  # no tied embedding to reduce between the ends
    plan = Plan(dp=1, tp=4, pp=4, micro_batch=1, zero=0, dtype="tf32")

    def pp_comm(crossings: int, gbps: float) -> float:
        wan = WanUse(pp_crossings=crossings, pp_gbps=gbps)
        return one(arch, 8, plan, stack=DEEPSPEED, wan=wan)[0].breakdown_s["pp_comm"][0]

    m = 8
    slower = {k: pp_comm(k, 10.0) - pp_comm(k, 20.0) for k in (1, 3)}
    assert slower[1] / slower[3] == pytest.approx((2 * m + 2) / (4 * m + 6), rel=1e-9), slower


def test_a_flat_ring_through_one_capped_connection_a_node_by_hand():
    """DeepSpeed reduces over one flat ring. With TP 1 the four ranks of a 4-GPU VM pass the
    ring on through a single connection between VMs (19.4 Gbit/s, as Sailor measures one GPU
    pair on GCP): 2·(n-1)/n of the fp32 gradients through it. With TP 4 each of the four TP
    ranks has its own ring and connection, sharing the VM's 4 × 12 Gbit/s. Each of the
    2(n-1) steps also waits NCCL's network step latency."""
    arch = catalog.model("opt-350m")
    a100 = Hardware.of(catalog.accelerator("A100-40GB"), scaleout_gbps=12.07)
    capped = dataclasses.replace(a100, gpus_per_node=4, flow_gbps=19.4)
    eff = DEFAULT.collective_efficiency
    for tp, dp, flow in ((1, 32, 19.4), (4, 8, 12.07)):
        plan = Plan(dp=dp, tp=tp, micro_batch=8, zero=0, dtype="tf32")
        e = one(arch, 256, plan, hw=capped, stack=DEEPSPEED)[0]
        grads = (arch.layers * arch.params_per_layer + arch.embedding_params) / tp * 4
        ring = 2 * (dp - 1) * (NET_STEP_LATENCY_S + grads / dp / (flow * 1e9 / 8)) / eff
        assert e.breakdown_s["dp_comm"][0] == pytest.approx(ring, rel=1e-9)
    # without a cap a connection gets the node's whole rate: the ring is faster
    plan = Plan(dp=32, tp=1, micro_batch=8, zero=0, dtype="tf32")
    assert (
        one(arch, 256, plan, hw=dataclasses.replace(a100, gpus_per_node=4), stack=DEEPSPEED)[1]
        < one(arch, 256, plan, hw=capped, stack=DEEPSPEED)[1]
    )


def test_a_flat_ring_across_domains_runs_at_its_slower_hops_pace_with_a_step_a_hop():
    """A flat ring's hops inside and across domains carry its bytes at once: the slower sets
    the pace (the hierarchical exchange adds the two), and each of its 2(n-1) steps waits a
    one-way latency beside NCCL's step latency; each of the four TP ranks' rings has its
    own connection, a quarter of the link."""
    arch = catalog.model("opt-350m")
    plan = Plan(dp=16, tp=4, micro_batch=8, zero=0, dtype="tf32")
    link = WanUse(dp_domains=2, dp_gbps=50.0, dp_rtt_s=0.001)
    flat = one(arch, 256, plan, wan=link, stack=DEEPSPEED)[0]
    inside = one(arch, 256, plan, stack=DEEPSPEED)[0]
    conn = 50e9 / 8 * DEFAULT.wan_efficiency / 4
    ring_wan = 2 * 15 * (NET_STEP_LATENCY_S + arch.params * 4 / 4 / 16 / conn) + 15 * 0.001
    assert flat.breakdown_s["dp_comm"][0] == pytest.approx(
        max(inside.breakdown_s["dp_comm"][0], ring_wan), rel=1e-9
    )


def test_tied_embeddings_are_reduced_between_the_first_and_last_stage():
    """The first and last stages both hold a tied embedding and all-reduce its gradients once
    a step: over the WAN where the pipeline crosses it."""
    tied = catalog.model("opt-350m")
    untied = dataclasses.replace(tied, tied_embeddings=False)
    plan = Plan(dp=1, tp=1, pp=2, micro_batch=1, zero=0)
    wan = WanUse(pp_crossings=1, pp_gbps=10.0)

    def pp(arch):
        e = one(arch, 8, plan, wan=wan)[0]
        return e.breakdown_s["pp_comm"][0]

    bf16_grads = tied.vocab * tied.hidden * Stack().grad_reduce_bytes
    assert pp(tied) - pp(untied) == pytest.approx(
        bf16_grads / (10e9 / 8 * DEFAULT.wan_efficiency), rel=1e-9
    )
    assert one(tied, 8, Plan(dp=1, micro_batch=1))[0].breakdown_s["pp_comm"][0] == 0.0


def test_unfused_fp32_softmax_passes_over_the_scores_more_than_the_fused_kernel():
    """Between the two batched GEMMs: fused (16-bit) 9 bytes a score forward, 11 back;
    unfused fp32 (mask, softmax, dropout a kernel each) 25 and 29."""
    from xdscheduler.costmodel.steptime import _score_traffic

    assert [float(x) for x in _score_traffic(True, 2.0)] == [9.0, 11.0]
    assert [float(x) for x in _score_traffic(False, 4.0)] == [25.0, 29.0]
    arch = catalog.model("opt-350m")
    plan = Plan(dp=1, tp=1, micro_batch=4, zero=0, dtype="bf16")
    fused = one(arch, 4, plan, stack=DEEPSPEED)[1]
    unfused = one(arch, 4, plan, stack=dataclasses.replace(DEEPSPEED, fused_softmax=False))[1]
    scores = 4 * 2048 * 16 * 2048 * arch.layers  # a micro-batch's scores in all layers
    assert unfused - fused == pytest.approx(
        scores * (13 + 15 - 20) / (H100.memory_gbs * 1e9), rel=1e-9
    )


def test_deepspeed_keeps_its_buffers_and_a_pipeline_keeps_logits_on_its_last_stage():
    from xdscheduler.costmodel.memory import memory_gib

    arch = catalog.model("opt-350m")
    plans = PlanBatch.of(
        [Plan(dp=1, tp=4, pp=p, micro_batch=8, zero=0, dtype="tf32") for p in (1, 4)]
    )
    mem = memory_gib(arch, 128, plans, DEEPSPEED)
    params = (arch.layers * arch.params_per_layer + arch.embedding_params) / 4
    assert mem["buffers"][0] * 2**30 == pytest.approx(8 * params)
    assert mem["logits"][0] > 0  # one stage holds all
    # four stages: the first keeps 4 micro-batches of its 6 layers, the last one of its 6 with
    # the logits: the first is the fuller, and holds no logits
    assert mem["logits"][1] == 0.0
    assert memory_gib(arch, 128, plans, Stack())["buffers"][0] == 0.0
