"""Step time and memory of a dense transformer job under arrays of plans and placements.

Every quantity is an array over plans; nothing loops per plan. Time per micro-batch and
pipeline stage is built from GEMMs (additive roofline over each matrix shape), attention,
element-wise kernels (memory bound, proportional to the activations they produce, after
Korthikanti et al. 2022) and tensor-parallel collectives; the pipeline adds its bubble and
point-to-point transfers; data parallelism adds the gradient reduction, hierarchical when
replicas span domains and hidden behind the last backward pass where the stack allows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xdscheduler.catalog import ModelArch
from xdscheduler.costmodel.constants import DEFAULT, Calibration
from xdscheduler.costmodel.layers import TIMES, MeasuredLayers, applicable
from xdscheduler.costmodel.messages import MessageCurve, connection_bps, ring_s
from xdscheduler.costmodel.plan import DTYPES, OPERAND_BYTES, Hardware, PlanBatch, Stack, WanUse

GIB = 2**30
ADAM_BYTES_PER_PARAM = 30  # read fp32 master, m, v, grad; write master, m, v, bf16 weight
FLASH_BACKWARD_FACTOR = 2.5  # FlashAttention-2 backward recomputes QK^T: 2.5x forward FLOPs
RUNTIME_OVERHEAD_GIB = 3.0  # CUDA context, NCCL buffers, allocator fragmentation

BREAKDOWN_KEYS = (
    "compute",
    "recompute",
    "tp_comm",
    "pp_comm",
    "dp_comm",
    "bubble",
    "sync",
    "convergence",
    "optimizer",
)


@dataclass(frozen=True)
class StepEstimate:
    """Per-plan arrays: the step time, its parts, memory, and what crosses the WAN."""

    step_time_s: np.ndarray
    breakdown_s: dict[str, np.ndarray]  # exposed time per part; sums to step_time_s
    overlapped_s: dict[str, np.ndarray]  # communication hidden behind compute
    memory_gib: np.ndarray
    memory_parts_gib: dict[str, np.ndarray]
    fits: np.ndarray
    model_flops: float  # per step, without recompute
    hardware_flops: np.ndarray  # per step, with recompute
    tokens: np.ndarray | float  # per step (per plan where the batch is)
    cross_domain_bytes: np.ndarray  # per step, all WAN links, both directions

    def tokens_per_s_per_gpu(self, gpus) -> np.ndarray:
        return self.tokens / self.step_time_s / gpus

    def model_tflops_per_gpu(self, gpus) -> np.ndarray:
        return self.model_flops / self.step_time_s / gpus / 1e12


def model_flops_per_step(arch: ModelArch, global_batch, seq=None) -> float:
    """Model FLOPs of one step (forward + backward, no recompute), full attention matrix.

    For GPT this is Megatron's 72·B·s·L·h²·(1 + s/6h + V/12Lh); GQA and gated MLPs enter
    through the matrix shapes.
    """
    s = seq or arch.seq_len
    h, f = arch.hidden, arch.ffn_hidden
    per_token_layer = (
        2 * (h * h * (2 + 2 * arch.kv_heads / arch.heads) + (3 if arch.gated_mlp else 2) * h * f)
        + 4 * s * h
    )
    per_token = arch.layers * per_token_layer + 2 * h * arch.vocab
    return 3.0 * per_token * global_batch * s


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


CHUNK = 32768  # plans per block: the block's arrays stay in cache, ~1.5x faster than one pass
# DiLoCo's cost in convergence, per replica group beyond the first: the tokens to reach a loss
# grow by this share. Charles et al. 2025 ("Scaling Laws for DiLoCo", arXiv:2503.09799) find
# well-tuned DiLoCo with up to 8 replicas within a few percent of data parallelism's loss at
# equal tokens, and ahead of it at larger models; charging 2% per extra group is the cautious
# reading, so a plan never gains from low communication for free.
DILOCO_EXTRA_TOKENS = 0.02


def estimate(
    arch: ModelArch,
    global_batch,
    plans: PlanBatch,
    hw: Hardware,
    wan: WanUse | None = None,
    stack: Stack | None = None,
    calib: Calibration = DEFAULT,
    seq: int | None = None,
    measured: tuple[MeasuredLayers, ...] = (),
    network: MessageCurve | None = None,
) -> StepEstimate:
    """Evaluate every plan in `plans` at once; arrays broadcast against each other. Where a
    measured layer profile (`measured`) covers a plan's model, accelerator, precision, TP
    degree and micro-batch, its layer times replace the roofline's; where a network curve
    (`network`) is given, a flat ring's messages move at the rate their size gets on it."""
    wan = wan or WanUse()
    stack = stack or Stack()
    measured = applicable(measured, arch, int(seq or arch.seq_len))
    n = len(plans)
    if n <= CHUNK:
        return _estimate(arch, global_batch, plans, hw, wan, stack, calib, seq, measured, network)
    blocks = []
    for start in range(0, n, CHUNK):
        cut = slice(start, start + CHUNK)

        def part(x, cut=cut):
            return x[cut] if np.ndim(x) and np.shape(x)[0] == n else x

        blocks.append(
            _estimate(
                arch,
                part(global_batch),
                plans.take(cut),
                Hardware(**{k: part(v) for k, v in hw.__dict__.items()}),
                WanUse(**{k: part(v) for k, v in wan.__dict__.items()}),
                stack,
                calib,
                seq,
                measured,
                network,
            )
        )
    return _concat(blocks)


def _concat(blocks: list[StepEstimate]) -> StepEstimate:
    def cat(get):
        return np.concatenate([get(b) for b in blocks])

    def cat_dict(get):
        return {k: cat(lambda b, k=k: get(b)[k]) for k in get(blocks[0])}

    first = blocks[0]
    return StepEstimate(
        step_time_s=cat(lambda b: b.step_time_s),
        breakdown_s=cat_dict(lambda b: b.breakdown_s),
        overlapped_s=cat_dict(lambda b: b.overlapped_s),
        memory_gib=cat(lambda b: b.memory_gib),
        memory_parts_gib=cat_dict(lambda b: b.memory_parts_gib),
        fits=cat(lambda b: b.fits),
        model_flops=first.model_flops
        if np.ndim(first.model_flops) == 0
        else cat(lambda b: b.model_flops),
        hardware_flops=cat(lambda b: b.hardware_flops),
        tokens=first.tokens if np.ndim(first.tokens) == 0 else cat(lambda b: b.tokens),
        cross_domain_bytes=cat(lambda b: b.cross_domain_bytes),
    )


def _estimate(
    arch, global_batch, plans, hw, wan, stack, calib, seq, measured, network=None
) -> StepEstimate:
    s = float(seq or arch.seq_len)
    h, ffn, heads, vocab = float(arch.hidden), float(arch.ffn_hidden), arch.heads, arch.vocab
    kv_frac = arch.kv_heads / heads
    dp, tp, pp, cp, vp, mb = (
        _f(x) for x in (plans.dp, plans.tp, plans.pp, plans.cp, plans.vp, plans.micro_batch)
    )
    batch = _f(global_batch)
    micro_batches = replica_micro_batches(batch, dp, mb)
    tok = mb * s / cp  # tokens of one micro-batch on one GPU
    heaviest, last = stage_layers(arch.layers, pp)

    precision = np.asarray(plans.precision)
    fp8, wide = precision == DTYPES.index("fp8"), _wide(plans)
    half_peak = _f(hw.peak_tflops) * 1e12
    # the GEMMs' own peak: the 16-bit one for bf16 and fp16, else FP8, TF32 or FP32's
    own_peak = np.select(
        [fp8, precision == DTYPES.index("tf32"), precision == DTYPES.index("fp32")],
        [
            _f(hw.peak_fp8_tflops) * 1e12,
            _f(hw.peak_tf32_tflops) * 1e12,
            _f(hw.peak_fp32_tflops) * 1e12,
        ],
        half_peak,
    )
    gemm_peak = own_peak * np.where(fp8, calib.fp8_gemm_efficiency, calib.gemm_efficiency)
    mem_bw = _f(hw.memory_gbs) * 1e9
    operand_bytes = np.asarray(OPERAND_BYTES)[precision]
    # activations, their gradients and what crosses links: 4 bytes in fp32/tf32, else 2 (fp8
    # recipes keep activations in bf16)
    elem = np.where(wide, 4.0, 2.0)
    # attention and the output layer run in 16 bits unless the whole plan is 32-bit
    attn_base = np.where(wide, own_peak, half_peak)

    def gemm(m, k, n, peak=gemm_peak, elem=operand_bytes):
        # Additive roofline: small or thin matrices pay for their bytes on top of FLOPs.
        return 2 * m * k * n / peak + (elem * (m * k + k * n) + 2 * m * n) / mem_bw

    n_up = 2.0 if arch.gated_mlp else 1.0
    gemm_fwd = (
        gemm(tok, h, h * (1 + 2 * kv_frac) / tp)
        + gemm(tok, h / tp, h)
        + gemm(tok, h, n_up * ffn / tp)
        + gemm(tok, ffn / tp, h)
    )

    half_eff_peak = attn_base * calib.gemm_efficiency
    if stack.flash_attention:
        attn_flops = 4 * mb * (s / cp) * s * h / tp * 0.5  # causal blocks are skipped
        attn_io = 4 * tok * h / tp * elem / mem_bw
        attn_peak = attn_base * calib.attention_efficiency
        attn_fwd = attn_flops / attn_peak + attn_io
        attn_bwd = FLASH_BACKWARD_FACTOR * attn_flops / attn_peak + 2 * attn_io
        score_fwd = score_bwd = 0.0
    else:
        d_head = h / heads
        per_head = gemm(s / cp, d_head, s, half_eff_peak, elem) + gemm(
            s / cp, s, d_head, half_eff_peak, elem
        )
        attn_fwd = mb * heads / tp * per_head
        attn_bwd = 2 * attn_fwd
        scores = tok * heads / tp * s  # attention scores of a micro-batch on one GPU
        per_score = _score_traffic(stack.fused_softmax & ~wide, elem)
        score_fwd, score_bwd = (scores * b / mem_bw for b in per_score)

    act_bytes_per_token = _activation_bytes_per_token(arch, tp, stack) * elem / 2
    # The element-wise kernels (norms, activations, dropout, residuals) move their bytes
    # `memory_passes` times; the attention scores between the two batched GEMMs, as many
    # times as the softmax's kernels pass over them (_score_traffic).
    elem_s2_fwd = score_fwd
    elem_fwd = calib.memory_passes * tok * act_bytes_per_token / mem_bw + elem_s2_fwd
    elem_bwd = 2 * (elem_fwd - elem_s2_fwd) + score_bwd

    # Tensor-parallel all-reduce (or reduce-scatter + all-gather): two per layer each way.
    gpn = _f(hw.gpus_per_node)
    tp_link = np.where(tp <= gpn, _f(hw.scaleup_gbs) * 1e9, _f(hw.scaleout_gbps) * 1e9 / 8)
    coll = np.where(
        tp > 1, 2 * (tp - 1) / tp * tok * h * elem / (calib.collective_efficiency * tp_link), 0.0
    )
    tp_fwd = 2 * coll
    if stack.tp_comm_overlap:
        tp_fwd_exposed = np.maximum(0.0, tp_fwd - gemm_fwd)
        tp_bwd_exposed = np.maximum(0.0, tp_fwd - 2 * gemm_fwd)
    else:
        tp_fwd_exposed = tp_bwd_exposed = tp_fwd

    # Context parallelism passes K and V blocks round a ring of CP ranks while attention runs
    # (and dK, dV back in the backward pass): only what attention cannot cover is exposed.
    cp_link = np.where(tp * cp <= gpn, _f(hw.scaleup_gbs) * 1e9, _f(hw.scaleout_gbps) * 1e9 / 8)
    kv_ring = (cp - 1) * 2 * tok * h * kv_frac / tp * elem / (calib.collective_efficiency * cp_link)
    cp_fwd = np.maximum(0.0, kv_ring - attn_fwd)
    cp_bwd = np.maximum(0.0, 2 * kv_ring - attn_bwd)

    layer_fwd = gemm_fwd + attn_fwd + elem_fwd + cp_fwd + calib.kernel_overhead_s
    layer_bwd = 2 * gemm_fwd + attn_bwd + elem_bwd + cp_bwd + 2 * calib.kernel_overhead_s
    recompute = _f(plans.recompute)
    layer_rec = np.where(
        recompute == 2,
        layer_fwd + tp_fwd_exposed,
        np.where(recompute == 1, attn_fwd + elem_s2_fwd, 0.0),
    )
    if stack.flash_attention:
        layer_rec = np.where(recompute == 1, 0.0, layer_rec)  # flash already recomputes

    # FP8 recipes keep the output layer in BF16 (Transformer Engine casts only the blocks).
    logits = (
        3 * gemm(tok, h, vocab / tp, half_eff_peak, elem)
        + 3 * calib.memory_passes * tok * vocab / tp * 4 / mem_bw
    )
    embed: np.ndarray | float = (
        0.0  # a gather: nothing beside the layers, unless a profile measured it
    )
    # Measured layers stand in for the roofline where a profile covers the plan; their times
    # include the tensor-parallel all-reduces as they ran.
    block = _measured_blocks(measured, plans, hw, cp)
    have = ~np.isnan(block["layer_fwd_s"])
    if have.any():
        layer_fwd = np.where(have, block["layer_fwd_s"], layer_fwd)
        layer_bwd = np.where(have, block["layer_bwd_s"], layer_bwd)
        timed = have & (block["tp_comm_timed"] > 0)
        tp_fwd_exposed = np.where(timed, 0.0, tp_fwd_exposed)
        tp_bwd_exposed = np.where(timed, 0.0, tp_bwd_exposed)
        tp_fwd = np.where(timed, 0.0, tp_fwd)
        # a profile whose last block stops at the final norm leaves the output layer to the
        # roofline
        logits = np.where(
            have,
            block["last_fwd_s"]
            + block["last_bwd_s"]
            + np.where(block["output_layer_timed"] > 0, 0.0, logits),
            logits,
        )
        embed = np.where(have, block["first_fwd_s"] + block["first_bwd_s"], 0.0)
    # The slowest stage sets the pace: the first with the embedding, the heaviest, or the last
    # with the output layer (one stage holds all three without a pipeline).
    per_layer_t = layer_fwd + layer_bwd + layer_rec + tp_fwd_exposed + tp_bwd_exposed
    first_end = np.where(pp > 1, embed, 0.0)
    last_end = logits + np.where(pp > 1, 0.0, embed)
    last_binds = last * per_layer_t + last_end >= heaviest * per_layer_t + first_end
    layers_per_stage = np.where(last_binds, last, heaviest)
    stage_compute = layers_per_stage * (layer_fwd + layer_bwd) + np.where(
        last_binds, last_end, first_end
    )
    stage_rec = layers_per_stage * layer_rec
    stage_tp = layers_per_stage * (tp_fwd_exposed + tp_bwd_exposed)
    t_mb = stage_compute + stage_rec + stage_tp

    # Pipeline: bubble, then activations and their gradients between stages.
    bubble = (pp - 1) / vp * t_mb
    scaleout = _f(hw.scaleout_gbps) * 1e9 / 8
    wan_bps = _f(wan.pp_gbps) * 1e9 / 8 * calib.wan_efficiency
    flow = _f(hw.flow_gbps) * 1e9 / 8  # one connection between two nodes' accelerators
    p2p_intra = tok * h * elem / tp / (calib.collective_efficiency * np.minimum(scaleout, flow))
    crossings = _f(wan.pp_crossings)
    # All replicas share the link; where it is rated per node pair, each of the boundary
    # stage's nodes (dp·tp·cp ranks) streams to its peer at that rate.
    pp_lanes = np.where(_f(wan.pp_per_node) > 0, _lanes(dp * tp * cp, gpn), 1.0)
    # each rank of the boundary stage streams its share on its own connection
    boundary = dp * tp * cp
    p2p_wan = (
        dp
        * mb
        * s
        * h
        * elem
        / boundary
        / _wan_connection_bps(
            wan_bps, wan.pp_flow_gbps, wan.pp_per_node, boundary / pp_lanes, gpn, calib
        )
    )
    link_busy = vp * np.where(crossings > 0, p2p_wan, p2p_intra)
    fill = 2 * ((pp - 1 - crossings) * p2p_intra + crossings * p2p_wan) + 2 * _f(wan.pp_latency_s)
    has_pp = pp > 1
    if stack.overlap_p2p:
        pp_exposed = np.where(has_pp, micro_batches * np.maximum(0.0, link_busy - t_mb) + fill, 0.0)
        pp_hidden = np.where(has_pp, micro_batches * np.minimum(link_busy, t_mb), 0.0)
    else:
        # Blocking sends and receives: an end stage waits for its activations out and their
        # gradients back each micro-batch, a middle stage for both ways on both sides.
        transfers = np.where(pp > 2, 4.0, 2.0)
        pp_exposed = np.where(has_pp, micro_batches * transfers * link_busy + fill, 0.0)
        pp_hidden = 0.0 * pp
    grad_elem = np.where(wide, 4.0, stack.grad_reduce_bytes)  # fp32 gradients in fp32 plans
    if arch.tied_embeddings:
        # The first and last stages both hold the tied embedding: they all-reduce its
        # gradients once a step, over the WAN where the pipeline crosses one.
        tied = arch.vocab * h / tp * grad_elem
        pp_exposed = pp_exposed + np.where(
            has_pp,
            tied
            / np.where(
                crossings > 0,
                wan_bps * pp_lanes,
                calib.collective_efficiency * np.minimum(scaleout, flow),
            ),
            0.0,
        )

    # Data parallelism: reduce inside each domain, then across domains over the WAN.
    gpu_params = _stage_params(arch, pp) / tp
    grad_bytes = gpu_params * grad_elem
    domains = _f(wan.dp_domains)
    local = np.maximum(dp / domains, 1.0)
    flat = (_f(wan.dp_flat) > 0) | (not stack.hierarchical_dp)
    bucket = stack.grad_bucket_elems * grad_elem
    dp_intra = _allreduce_s(
        grad_bytes,
        local,
        tp * cp,
        gpn,
        _f(hw.scaleup_gbs) * 1e9,
        scaleout,
        calib.collective_efficiency,
        flat,
        flow,
        bucket,
        network,
    )
    diloco_h = _f(plans.diloco_h)
    spans = domains > 1
    model_grad_bytes = arch.params * grad_elem
    dp_wan_bps = _f(wan.dp_gbps) * 1e9 / 8 * calib.wan_efficiency
    # Hierarchical: only 1/local of the gradients leaves each domain. A flat ring over every
    # rank sends all of them over each WAN link it crosses.
    wan_share = np.where(flat, 2.0, 2 * (domains - 1) / domains)
    # Over links rated per node pair the bytes spread over the node pairs that carry them:
    # every node of a domain's replicas in the hierarchical exchange, one replica's nodes
    # where a flat ring crosses.
    dp_lanes = np.where(
        _f(wan.dp_per_node) > 0, _lanes(np.where(flat, 1.0, local) * tp * cp * pp, gpn), 1.0
    )
    # Each rank crossing streams on its own connection: a flat ring's one replica's ranks,
    # every rank of a domain's replicas in the hierarchical exchange.
    flows = np.where(flat, 1.0, local) * tp * cp * pp
    wan_conn_bps = _wan_connection_bps(
        dp_wan_bps, wan.dp_flow_gbps, wan.dp_per_node, flows / dp_lanes, gpn, calib
    )
    # a flat ring: each connection carries its replica's share in messages of bucket/dp bytes
    flat_wan = ring_s(model_grad_bytes / flows, dp, wan_conn_bps, bucket, network)
    ring = np.where(
        flat, flat_wan, wan_share * model_grad_bytes / (flows * wan_conn_bps)
    ) + np.where(flat, dp - 1, domains - 1) * _f(wan.dp_rtt_s)  # a step a hop: 2(n-1)·rtt/2
    dp_wan = np.where(spans & (diloco_h == 0), ring, 0.0)
    zero = _f(plans.zero)
    zero3 = zero >= 3
    # DDP all-reduces after the last backward; the distributed optimizer reduce-scatters there
    # and all-gathers parameters during the next step's first forward. ZeRO-3 gathers
    # parameters for forward and backward and scatters gradients every micro-batch (1.5x an
    # all-reduce each time), prefetched behind that micro-batch's compute.
    sharded = (zero >= 1) & ~zero3
    # a flat ring's hops inside and across domains carry the same bytes at once: the slower
    # sets its pace; the hierarchical exchange does one after the other
    dp_step = np.where(flat, np.maximum(dp_intra, dp_wan), dp_intra + dp_wan)
    reduce = np.where(sharded, dp_intra / 2 + dp_wan, dp_step)
    gather = np.where(sharded, dp_intra / 2, 0.0)
    bwd_window = layers_per_stage * layer_bwd if stack.overlap_grad_reduce else 0.0
    fwd_window = layers_per_stage * layer_fwd if stack.overlap_param_gather else 0.0
    dp_total = np.where(zero3, 1.5 * micro_batches * dp_intra + dp_wan, reduce + gather)
    dp_exposed = np.where(
        zero3,
        np.maximum(0.0, dp_total - micro_batches * t_mb),
        np.maximum(0.0, reduce - bwd_window) + np.maximum(0.0, gather - fwd_window),
    )
    dp_hidden = dp_total - dp_exposed

    compute_part = micro_batches * stage_compute
    inner = compute_part + micro_batches * (stage_rec + stage_tp) + bubble + pp_exposed + dp_exposed
    # DiLoCo: outer sync every H steps, overlapped with the next H inner steps where the stack
    # streams it, else waited for in full.
    diloco = spans & (diloco_h > 0)
    sync_total = np.where(diloco, ring / np.maximum(diloco_h, 1), 0.0)
    sync_exposed = np.maximum(0.0, sync_total - inner) if stack.overlap_outer_sync else sync_total
    # Its replica groups drift apart between syncs: charged as steps that train nothing kept.
    convergence = np.where(
        diloco, (inner + sync_exposed) * DILOCO_EXTRA_TOKENS * (domains - 1), 0.0
    )
    opt_params = gpu_params / np.where(zero >= 1, dp, 1.0)
    # fp32 plans have no separate bf16 copy of the weights to write
    optimizer = opt_params * np.where(
        np.isnan(block["optimizer_s_per_param"]),
        np.where(wide, ADAM_BYTES_PER_PARAM - 2, ADAM_BYTES_PER_PARAM) / mem_bw,
        block["optimizer_s_per_param"],
    )

    breakdown = {
        "compute": compute_part,
        "recompute": micro_batches * stage_rec,
        "tp_comm": micro_batches * stage_tp,
        "pp_comm": pp_exposed,
        "dp_comm": dp_exposed,
        "bubble": bubble,
        "sync": sync_exposed,
        "convergence": convergence,
        "optimizer": optimizer,
    }
    step = sum(breakdown.values())
    tp_hidden = micro_batches * layers_per_stage * 3 * tp_fwd - breakdown["tp_comm"]
    overlapped = {
        "tp_comm": np.maximum(tp_hidden, 0.0) if stack.tp_comm_overlap else 0.0,
        "pp_comm": pp_hidden,
        "dp_comm": dp_hidden,
        "sync": sync_total - sync_exposed,
    }

    memory = memory_gib(arch, batch, plans, stack, int(s), measured)
    total_mem = sum(memory.values())
    tokens = batch * s
    mflops = model_flops_per_step(arch, batch, int(s))
    layer_fwd_flops = (mflops / tokens - 6 * h * vocab) / 3  # one forward of all layers
    rec_flops = np.where(
        recompute == 2, layer_fwd_flops, np.where(recompute == 1, 4 * s * h * arch.layers, 0.0)
    )
    hflops = mflops + rec_flops * tokens

    pp_bytes = 2 * crossings * batch * s * h * elem * vp
    dp_bytes = np.where(
        spans,
        np.where(flat, 2 * domains, 2 * (domains - 1))
        * model_grad_bytes
        / np.where(diloco_h > 0, diloco_h, 1.0),
        0.0,
    )

    def full(x):
        return np.broadcast_to(np.asarray(x, dtype=np.float64), step.shape)

    return StepEstimate(
        step_time_s=step,
        breakdown_s={k: full(v) for k, v in breakdown.items()},
        overlapped_s={k: full(v) for k, v in overlapped.items()},
        memory_gib=full(total_mem),
        memory_parts_gib={k: full(v) for k, v in memory.items()},
        fits=full(total_mem) <= _f(hw.memory_gib),
        model_flops=mflops,
        hardware_flops=full(hflops),
        tokens=tokens,
        cross_domain_bytes=full(pp_bytes + dp_bytes),
    )


def _measured_blocks(
    measured: tuple[MeasuredLayers, ...], plans: PlanBatch, hw: Hardware, cp
) -> dict[str, np.ndarray]:
    """Each plan's block times (TIMES) and optimizer seconds per parameter from the first
    profile that covers it (its accelerator, precision, TP degree, micro-batch; without
    context parallelism); NaN where none does."""
    n = len(plans)
    out = np.full((n, len(TIMES)), np.nan)
    rate, timed, tp_timed = np.full(n, np.nan), np.ones(n), np.ones(n)
    for m in measured:
        t = m.times(plans.micro_batch, plans.tp, hw.accelerator, plans.precision)
        new = np.isnan(out[:, 0]) & ~np.isnan(t[:, 0]) & (np.broadcast_to(cp, n) == 1)
        out[new] = t[new]
        timed[new] = m.profile.output_layer_timed
        tp_timed[new] = m.profile.tp_comm_timed
        if m.profile.optimizer_s_per_param is not None:
            rate[new] = m.profile.optimizer_s_per_param
    return {
        **{k: out[:, i] for i, k in enumerate(TIMES)},
        "optimizer_s_per_param": rate,
        "output_layer_timed": timed,
        "tp_comm_timed": tp_timed,
    }


def _wan_connection_bps(link_bps, flow_gbps, per_node, flows, gpn, calib: Calibration):
    """Bytes/s each of `flows` connections gets across a WAN link (`flows` per node pair where
    the link is rated per node pair, whose node's `gpn` accelerators fill it together)."""
    flow_bps = _f(flow_gbps) * 1e9 / 8 * calib.wan_efficiency
    return connection_bps(link_bps, flow_bps, flows, np.where(_f(per_node) > 0, gpn, 1.0))


def _lanes(ranks, gpn):
    """Node pairs that `ranks` accelerators, `gpn` to a node, stream over in parallel."""
    return np.maximum(np.floor(ranks / gpn + 1e-9), 1.0)


def _allreduce_s(
    size,
    ranks,
    inner,
    gpn,
    scaleup,
    scaleout,
    efficiency,
    flat=False,
    flow=np.inf,
    bucket=np.inf,
    network=None,
):
    """All-reduce of `size` bytes over `ranks` ranks placed `inner` apart.

    Megatron orders ranks TP, CP, DP, PP, so r = gpn / (TP·CP) ranks of a data-parallel group
    share a node: hierarchically, they reduce-scatter over the scale-up links, the node's r
    NICs carry the cross-node all-reduce of 1/r of the data each, and an all-gather over
    scale-up ends it. A flat ring (`flat`) passes everything through one connection between
    nodes, capped at `flow` bytes/s and at the r NICs' share of the node, in buckets of
    `bucket` bytes, each message at the rate its size gets (`messages.ring_s`).
    """
    per_node = np.clip(gpn / inner, 1.0, ranks)
    nodes = ranks / per_node
    inside = 2 * (per_node - 1) / per_node * size / scaleup
    across = 2 * (nodes - 1) / nodes * size / (per_node * np.minimum(scaleout, flow))
    # a ring a data-parallel rank of the node: gpn / per_node of them cross between nodes at once
    conn = connection_bps(gpn * scaleout, flow, gpn / per_node, gpn)
    ring = np.where(nodes > 1, ring_s(size, ranks, conn, bucket, network), inside)
    return np.where(flat, ring, inside + across) / efficiency


def _activation_bytes_per_token(arch: ModelArch, tp, stack: Stack):
    """Stored activation bytes per token and layer, without the attention-score matrices.

    Korthikanti et al. 2022, eq. 2: 10 bytes·h replicated across tensor ranks (norms, dropout
    masks, block inputs) unless sequence parallel splits them, and 24 bytes·h split; here the
    split part is rebuilt from the shapes so that GQA and gated MLPs count right.
    """
    h = float(arch.hidden)
    sp_div = tp if stack.sequence_parallel else 1.0
    mlp = (6.0 if arch.gated_mlp else 4.0) * arch.ffn_hidden / h
    return h * (10.0 / sp_div + (4 + 4 * arch.kv_heads / arch.heads + mlp) / tp)


def _score_traffic(fused, elem) -> tuple[np.ndarray, np.ndarray]:
    """Bytes moved per attention score between the two batched GEMMs, forward and backward
    (the GEMMs' own reads and writes are in their roofline).

    Megatron's fused scale-mask-softmax (16-bit only) reads and writes each score once, then
    dropout reads, writes and keeps a 1-byte mask: 4 + 5 bytes forward, 11 back (dropout's,
    then the softmax's gradient reading output and gradient). Unfused, as in fp32, masking,
    softmax and dropout are a kernel each: 6·e + 1 bytes forward, 7·e + 1 back (e bytes a
    score: the masking's gradient is another pass)."""
    return (np.where(fused, 9.0, 6 * elem + 1), np.where(fused, 11.0, 7 * elem + 1))


def _score_bytes_per_token(arch: ModelArch, tp, s: float, stack: Stack):
    """Bytes of attention scores, softmax and dropout per token and layer: 5·a·s (Korthikanti).
    The same in fp32: Sailor's fp32 runs on GH200 (max_mem of its 27 measured runs) keep about
    this much, not twice it."""
    return 0.0 if stack.flash_attention else 5.0 * arch.heads * s / tp


def memory_gib(
    arch: ModelArch,
    global_batch,
    plans: PlanBatch,
    stack: Stack | None = None,
    seq: int | None = None,
    measured: tuple[MeasuredLayers, ...] = (),
) -> dict[str, np.ndarray]:
    """Per-GPU memory of the fullest stage: states sharded by ZeRO, activations in flight.

    1F1B keeps up to `pp` micro-batches of activations on the first stage (with the
    embedding's) and one on the last (with the output layer's logits); one stage holds all
    without a pipeline. A profile's measured activation bytes replace the count where it
    covers the plan's TP degree and precision (no recomputation, no context parallelism).
    """
    stack = stack or Stack()
    s = float(seq or arch.seq_len)
    dp, tp, pp, cp, vp, mb = (
        _f(x) for x in (plans.dp, plans.tp, plans.pp, plans.cp, plans.vp, plans.micro_batch)
    )
    zero, recompute = _f(plans.zero), _f(plans.recompute)
    tok = mb * s / cp
    gpu_params = _stage_params(arch, pp) / tp
    wide = _wide(plans)
    # 16-bit plans keep bf16 weights beside an fp32 master copy; fp32 plans' weights are it
    weights = gpu_params * np.where(wide, 4.0, 2.0) / np.where(zero >= 3, dp, 1.0)
    grads = gpu_params * 4 / np.where(zero >= 2, dp, 1.0)  # fp32 main gradients
    optimizer = gpu_params * np.where(wide, 8.0, 12.0) / np.where(zero >= 1, dp, 1.0)

    act = tok * _activation_bytes_per_token(arch, tp, stack) * np.where(wide, 2.0, 1.0)
    full_layer = act + tok * _score_bytes_per_token(arch, tp, s, stack)
    sp_div = tp if stack.sequence_parallel else 1.0
    per_layer = np.where(
        recompute == 2,
        tok * np.where(wide, 4, 2) * arch.hidden / sp_div,
        np.where(recompute == 1, act, full_layer),
    )
    logits = tok * arch.vocab / tp * 4 * 2  # fp32 logits and their gradient, last stage
    embed = 0.0 * tok
    for m in applicable(measured, arch, int(s)):
        kept = (
            m.activation_bytes(
                np.broadcast_to(tp, tok.shape), np.broadcast_to(plans.precision, tok.shape)
            )
            * mb[..., None]
        )
        use = ~np.isnan(kept[..., 1]) & (recompute == 0) & (cp == 1)
        embed, per_layer, logits = (
            np.where(use, kept[..., i], x) for i, x in enumerate((embed, per_layer, logits))
        )
    micro_batches = replica_micro_batches(_f(global_batch), dp, mb)
    in_flight = np.minimum(micro_batches, pp) * np.where(vp > 1, 1 + (pp - 1) / (pp * vp), 1.0)
    heaviest, last = stage_layers(arch.layers, pp)
    first_stage = (per_layer * heaviest + embed) * in_flight
    last_stage = (
        per_layer * last * np.where(vp > 1, in_flight, 1.0) + logits + np.where(pp > 1, 0.0, embed)
    )
    last_fuller = (pp == 1) | (last_stage > first_stage)
    activations = np.where(last_fuller, last_stage - logits, first_stage)
    activations = activations + np.where(recompute == 2, full_layer, 0.0)  # one layer rebuilt
    return {
        "weights": weights / GIB,
        "gradients": grads / GIB,
        "optimizer": optimizer / GIB,
        "buffers": gpu_params * stack.extra_state_bytes / GIB,
        "activations": activations / GIB,
        "logits": np.where(last_fuller, logits, 0.0) / GIB,
        "overhead": RUNTIME_OVERHEAD_GIB + 0 * dp,
    }


def _wide(plans: PlanBatch) -> np.ndarray:
    """Plans that compute in 32 bits (TF32 or FP32): 4-byte weights, activations, gradients."""
    return np.asarray(plans.precision) >= DTYPES.index("tf32")


def _stage_params(arch: ModelArch, pp):
    """Parameters of the heaviest pipeline stage: its layers plus one embedding table."""
    return stage_layers(arch.layers, pp)[0] * arch.params_per_layer + np.where(
        pp > 1, arch.vocab * arch.hidden, arch.embedding_params
    )


def stage_layers(layers: int, pp) -> tuple[np.ndarray, np.ndarray]:
    """Layers of the heaviest pipeline stage and of the last one.

    Where `pp` divides the layers every stage has as many. Otherwise, as Megatron's
    first/last-stage options allow, stages get ceil(layers/pp) and the shortfall comes off the
    ends, the last stage (which also computes the output layer) first: 126 layers over 16
    stages are 7 + 14 x 8 + 7.
    """
    pp = _f(pp)
    heaviest = np.ceil(layers / pp - 1e-9)
    return heaviest, np.where(heaviest * pp > layers, heaviest - 1, heaviest)


def replica_micro_batches(batch, dp, mb):
    """Micro-batches of the busiest data-parallel replica: a global batch that `dp` does not
    divide leaves some replicas one sample more (ceil(batch/dp)), and the step waits for
    them."""
    return np.ceil(np.ceil(batch / dp - 1e-9) / mb - 1e-9)
