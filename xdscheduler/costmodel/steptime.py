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
from xdscheduler.costmodel.plan import DTYPES, OPERAND_BYTES, Hardware, PlanBatch, Stack, WanUse

GIB = 2**30
ADAM_BYTES_PER_PARAM = 30  # read fp32 master, m, v, grad; write master, m, v, bf16 weight
FLASH_BACKWARD_FACTOR = 2.5  # FlashAttention-2 backward recomputes QK^T: 2.5x forward FLOPs
RUNTIME_OVERHEAD_GIB = 3.0  # CUDA context, NCCL buffers, allocator fragmentation

BREAKDOWN_KEYS = (
    "compute", "recompute", "tp_comm", "pp_comm", "dp_comm", "bubble", "sync", "convergence",
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
    tokens: float  # per step
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
    per_token_layer = 2 * (
        h * h * (2 + 2 * arch.kv_heads / arch.heads) + (3 if arch.gated_mlp else 2) * h * f
    ) + 4 * s * h
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
) -> StepEstimate:
    """Evaluate every plan in `plans` at once; arrays broadcast against each other."""
    wan = wan or WanUse()
    stack = stack or Stack()
    n = len(plans)
    if n <= CHUNK:
        return _estimate(arch, global_batch, plans, hw, wan, stack, calib, seq)
    blocks = []
    for start in range(0, n, CHUNK):
        cut = slice(start, start + CHUNK)

        def part(x, cut=cut):
            return x[cut] if np.ndim(x) and np.shape(x)[0] == n else x

        blocks.append(_estimate(
            arch, part(global_batch), plans.take(cut),
            Hardware(**{k: part(v) for k, v in hw.__dict__.items()}),
            WanUse(**{k: part(v) for k, v in wan.__dict__.items()}), stack, calib, seq))
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
        model_flops=first.model_flops if np.ndim(first.model_flops) == 0
        else cat(lambda b: b.model_flops),
        hardware_flops=cat(lambda b: b.hardware_flops),
        tokens=first.tokens if np.ndim(first.tokens) == 0 else cat(lambda b: b.tokens),
        cross_domain_bytes=cat(lambda b: b.cross_domain_bytes),
    )


def _estimate(arch, global_batch, plans, hw, wan, stack, calib, seq) -> StepEstimate:
    s = float(seq or arch.seq_len)
    h, ffn, heads, vocab = float(arch.hidden), float(arch.ffn_hidden), arch.heads, arch.vocab
    kv_frac = arch.kv_heads / heads
    dp, tp, pp, cp, vp, mb = (_f(x) for x in (plans.dp, plans.tp, plans.pp, plans.cp,
                                               plans.vp, plans.micro_batch))
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
        [_f(hw.peak_fp8_tflops) * 1e12, _f(hw.peak_tf32_tflops) * 1e12,
         _f(hw.peak_fp32_tflops) * 1e12], half_peak)
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
    gemm_fwd = (gemm(tok, h, h * (1 + 2 * kv_frac) / tp) + gemm(tok, h / tp, h)
                + gemm(tok, h, n_up * ffn / tp) + gemm(tok, ffn / tp, h))

    half_eff_peak = attn_base * calib.gemm_efficiency
    if stack.flash_attention:
        attn_flops = 4 * mb * (s / cp) * s * h / tp * 0.5  # causal blocks are skipped
        attn_io = 4 * tok * h / tp * elem / mem_bw
        attn_peak = attn_base * calib.attention_efficiency
        attn_fwd = attn_flops / attn_peak + attn_io
        attn_bwd = FLASH_BACKWARD_FACTOR * attn_flops / attn_peak + 2 * attn_io
        s2_bytes_per_token = 0.0
    else:
        d_head = h / heads
        per_head = (gemm(s / cp, d_head, s, half_eff_peak, elem)
                    + gemm(s / cp, s, d_head, half_eff_peak, elem))
        attn_fwd = mb * heads / tp * per_head
        attn_bwd = 2 * attn_fwd
        s2_bytes_per_token = _score_bytes_per_token(arch, tp, s, stack)

    act_bytes_per_token = _activation_bytes_per_token(arch, tp, stack) * elem / 2
    # The fused softmax reads and writes each attention score once; the other element-wise
    # kernels (norms, activations, dropout, residuals) move their bytes `memory_passes` times.
    elem_s2_fwd = tok * s2_bytes_per_token / mem_bw
    elem_fwd = calib.memory_passes * tok * act_bytes_per_token / mem_bw + elem_s2_fwd

    # Tensor-parallel all-reduce (or reduce-scatter + all-gather): two per layer each way.
    gpn = _f(hw.gpus_per_node)
    tp_link = np.where(tp <= gpn, _f(hw.scaleup_gbs) * 1e9, _f(hw.scaleout_gbps) * 1e9 / 8)
    coll = np.where(tp > 1, 2 * (tp - 1) / tp * tok * h * elem / (calib.collective_efficiency
                                                              * tp_link), 0.0)
    tp_fwd = 2 * coll
    if stack.tp_comm_overlap:
        tp_fwd_exposed = np.maximum(0.0, tp_fwd - gemm_fwd)
        tp_bwd_exposed = np.maximum(0.0, tp_fwd - 2 * gemm_fwd)
    else:
        tp_fwd_exposed = tp_bwd_exposed = tp_fwd

    # Context parallelism passes K and V blocks round a ring of CP ranks while attention runs
    # (and dK, dV back in the backward pass): only what attention cannot cover is exposed.
    cp_link = np.where(tp * cp <= gpn, _f(hw.scaleup_gbs) * 1e9, _f(hw.scaleout_gbps) * 1e9 / 8)
    kv_ring = (cp - 1) * 2 * tok * h * kv_frac / tp * elem / (calib.collective_efficiency
                                                             * cp_link)
    cp_fwd = np.maximum(0.0, kv_ring - attn_fwd)
    cp_bwd = np.maximum(0.0, 2 * kv_ring - attn_bwd)

    layer_fwd = gemm_fwd + attn_fwd + elem_fwd + cp_fwd + calib.kernel_overhead_s
    layer_bwd = 2 * gemm_fwd + attn_bwd + 2 * elem_fwd + cp_bwd + 2 * calib.kernel_overhead_s
    recompute = _f(plans.recompute)
    layer_rec = np.where(recompute == 2, layer_fwd + tp_fwd_exposed,
                         np.where(recompute == 1, attn_fwd + elem_s2_fwd, 0.0))
    if stack.flash_attention:
        layer_rec = np.where(recompute == 1, 0.0, layer_rec)  # flash already recomputes

    # FP8 recipes keep the output layer in BF16 (Transformer Engine casts only the blocks).
    logits = (3 * gemm(tok, h, vocab / tp, half_eff_peak, elem)
              + 3 * calib.memory_passes * tok * vocab / tp * 4 / mem_bw)
    # The slowest stage sets the pace: the heaviest, or the last with the output layer.
    per_layer_t = layer_fwd + layer_bwd + layer_rec + tp_fwd_exposed + tp_bwd_exposed
    last_binds = last * per_layer_t + logits >= heaviest * per_layer_t
    layers_per_stage = np.where(last_binds, last, heaviest)
    stage_compute = layers_per_stage * (layer_fwd + layer_bwd) + np.where(last_binds, logits, 0.0)
    stage_rec = layers_per_stage * layer_rec
    stage_tp = layers_per_stage * (tp_fwd_exposed + tp_bwd_exposed)
    t_mb = stage_compute + stage_rec + stage_tp

    # Pipeline: bubble, then activations and their gradients between stages.
    bubble = (pp - 1) / vp * t_mb
    scaleout = _f(hw.scaleout_gbps) * 1e9 / 8
    wan_bps = _f(wan.pp_gbps) * 1e9 / 8 * calib.wan_efficiency
    p2p_intra = tok * h * elem / tp / (calib.collective_efficiency * scaleout)
    crossings = _f(wan.pp_crossings)
    # All replicas share the link; where it is rated per node pair, each of the boundary
    # stage's nodes (dp·tp·cp ranks) streams to its peer at that rate.
    pp_lanes = np.where(_f(wan.pp_per_node) > 0, _lanes(dp * tp * cp, gpn), 1.0)
    p2p_wan = dp * mb * s * h * elem / (wan_bps * pp_lanes)
    link_busy = vp * np.where(crossings > 0, p2p_wan, p2p_intra)
    fill = 2 * ((pp - 1 - crossings) * p2p_intra + crossings * p2p_wan) + 2 * _f(wan.pp_latency_s)
    has_pp = pp > 1
    pp_exposed = np.where(has_pp, micro_batches * np.maximum(0.0, link_busy - t_mb) + fill, 0.0)
    pp_hidden = np.where(has_pp, micro_batches * np.minimum(link_busy, t_mb), 0.0)

    # Data parallelism: reduce inside each domain, then across domains over the WAN.
    gpu_params = _stage_params(arch, pp) / tp
    grad_elem = np.where(wide, 4.0, stack.grad_reduce_bytes)  # fp32 gradients in fp32 plans
    grad_bytes = gpu_params * grad_elem
    domains = _f(wan.dp_domains)
    local = np.maximum(dp / domains, 1.0)
    dp_intra = _allreduce_s(grad_bytes, local, tp * cp, gpn, _f(hw.scaleup_gbs) * 1e9, scaleout,
                            calib.collective_efficiency)
    diloco_h = _f(plans.diloco_h)
    spans = (domains > 1)
    model_grad_bytes = arch.params * grad_elem
    dp_wan_bps = _f(wan.dp_gbps) * 1e9 / 8 * calib.wan_efficiency
    # Hierarchical: only 1/local of the gradients leaves each domain. A flat ring over every
    # rank sends all of them over each WAN link it crosses.
    flat = _f(wan.dp_flat) > 0
    wan_share = np.where(flat, 2.0, 2 * (domains - 1) / domains)
    # Over links rated per node pair the bytes spread over the node pairs that carry them:
    # every node of a domain's replicas in the hierarchical exchange, one replica's nodes
    # where a flat ring crosses.
    dp_lanes = np.where(_f(wan.dp_per_node) > 0,
                        _lanes(np.where(flat, 1.0, local) * tp * cp * pp, gpn), 1.0)
    ring = (wan_share * model_grad_bytes / (dp_wan_bps * dp_lanes)
            + (domains - 1) * _f(wan.dp_rtt_s))
    dp_wan = np.where(spans & (diloco_h == 0), ring, 0.0)
    zero = _f(plans.zero)
    zero3 = zero >= 3
    # DDP all-reduces after the last backward; the distributed optimizer reduce-scatters there
    # and all-gathers parameters during the next step's first forward. ZeRO-3 gathers
    # parameters for forward and backward and scatters gradients every micro-batch (1.5x an
    # all-reduce each time), prefetched behind that micro-batch's compute.
    sharded = (zero >= 1) & ~zero3
    reduce = np.where(sharded, dp_intra / 2, dp_intra) + dp_wan
    gather = np.where(sharded, dp_intra / 2, 0.0)
    bwd_window = layers_per_stage * layer_bwd if stack.overlap_grad_reduce else 0.0
    fwd_window = layers_per_stage * layer_fwd if stack.overlap_param_gather else 0.0
    dp_total = np.where(zero3, 1.5 * micro_batches * dp_intra + dp_wan, reduce + gather)
    dp_exposed = np.where(
        zero3, np.maximum(0.0, dp_total - micro_batches * t_mb),
        np.maximum(0.0, reduce - bwd_window) + np.maximum(0.0, gather - fwd_window))
    dp_hidden = dp_total - dp_exposed

    compute_part = micro_batches * stage_compute
    inner = compute_part + micro_batches * (stage_rec + stage_tp) + bubble + pp_exposed + dp_exposed
    # DiLoCo: outer sync every H steps, overlapped with the next H inner steps where the stack
    # streams it, else waited for in full.
    diloco = spans & (diloco_h > 0)
    sync_total = np.where(diloco, ring / np.maximum(diloco_h, 1), 0.0)
    sync_exposed = np.maximum(0.0, sync_total - inner) if stack.overlap_outer_sync else sync_total
    # Its replica groups drift apart between syncs: charged as steps that train nothing kept.
    convergence = np.where(diloco, (inner + sync_exposed) * DILOCO_EXTRA_TOKENS * (domains - 1),
                           0.0)
    opt_params = gpu_params / np.where(zero >= 1, dp, 1.0)
    # fp32 plans have no separate bf16 copy of the weights to write
    optimizer = opt_params * np.where(wide, ADAM_BYTES_PER_PARAM - 2, ADAM_BYTES_PER_PARAM) / mem_bw

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

    memory = memory_gib(arch, batch, plans, stack, int(s))
    total_mem = sum(memory.values())
    tokens = batch * s
    mflops = model_flops_per_step(arch, batch, int(s))
    layer_fwd_flops = (mflops / tokens - 6 * h * vocab) / 3  # one forward of all layers
    rec_flops = np.where(recompute == 2, layer_fwd_flops,
                         np.where(recompute == 1, 4 * s * h * arch.layers, 0.0))
    hflops = mflops + rec_flops * tokens

    pp_bytes = 2 * crossings * batch * s * h * elem * vp
    dp_bytes = np.where(spans, np.where(flat, 2 * domains, 2 * (domains - 1)) * model_grad_bytes
                        / np.where(diloco_h > 0, diloco_h, 1.0), 0.0)

    def full(x):
        return np.broadcast_to(np.asarray(x, dtype=np.float64), step.shape)

    return StepEstimate(
        step_time_s=step, breakdown_s={k: full(v) for k, v in breakdown.items()},
        overlapped_s={k: full(v) for k, v in overlapped.items()},
        memory_gib=full(total_mem), memory_parts_gib={k: full(v) for k, v in memory.items()},
        fits=full(total_mem) <= _f(hw.memory_gib), model_flops=mflops,
        hardware_flops=full(hflops), tokens=tokens,
        cross_domain_bytes=full(pp_bytes + dp_bytes),
    )


def _lanes(ranks, gpn):
    """Node pairs that `ranks` accelerators, `gpn` to a node, stream over in parallel."""
    return np.maximum(np.floor(ranks / gpn + 1e-9), 1.0)


def _allreduce_s(size, ranks, inner, gpn, scaleup, scaleout, efficiency):
    """Hierarchical all-reduce of `size` bytes over `ranks` ranks placed `inner` apart.

    Megatron orders ranks TP, CP, DP, PP, so r = gpn / (TP·CP) ranks of a data-parallel group
    share a node: they reduce-scatter over the scale-up links, the node's r NICs carry the
    cross-node all-reduce of 1/r of the data each, and an all-gather over scale-up ends it.
    """
    per_node = np.clip(gpn / inner, 1.0, ranks)
    nodes = ranks / per_node
    inside = 2 * (per_node - 1) / per_node * size / scaleup
    across = 2 * (nodes - 1) / nodes * size / (per_node * scaleout)
    return (inside + across) / efficiency


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


def _score_bytes_per_token(arch: ModelArch, tp, s: float, stack: Stack):
    """Bytes of attention scores, softmax and dropout per token and layer: 5·a·s (Korthikanti)."""
    return 0.0 if stack.flash_attention else 5.0 * arch.heads * s / tp


def memory_gib(arch: ModelArch, global_batch, plans: PlanBatch, stack: Stack | None = None,
               seq: int | None = None) -> dict[str, np.ndarray]:
    """Per-GPU memory of the heaviest stage: states sharded by ZeRO, activations in flight."""
    stack = stack or Stack()
    s = float(seq or arch.seq_len)
    dp, tp, pp, cp, vp, mb = (_f(x) for x in (plans.dp, plans.tp, plans.pp, plans.cp,
                                               plans.vp, plans.micro_batch))
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
    per_layer = np.where(recompute == 2, tok * np.where(wide, 4, 2) * arch.hidden / sp_div,
                         np.where(recompute == 1, act, full_layer))
    micro_batches = replica_micro_batches(_f(global_batch), dp, mb)
    in_flight = np.minimum(micro_batches, pp) * np.where(vp > 1, 1 + (pp - 1) / (pp * vp), 1.0)
    activations = per_layer * stage_layers(arch.layers, pp)[0] * in_flight
    activations = activations + np.where(recompute == 2, full_layer, 0.0)  # one layer rebuilt
    logits = tok * arch.vocab / tp * 4 * 2  # fp32 logits and their gradient, last stage
    return {
        "weights": weights / GIB,
        "gradients": grads / GIB,
        "optimizer": optimizer / GIB,
        "activations": activations / GIB,
        "logits": logits / GIB,
        "overhead": RUNTIME_OVERHEAD_GIB + 0 * dp,
    }


def _wide(plans: PlanBatch) -> np.ndarray:
    """Plans that compute in 32 bits (TF32 or FP32): 4-byte weights, activations, gradients."""
    return np.asarray(plans.precision) >= DTYPES.index("tf32")


def _stage_params(arch: ModelArch, pp):
    """Parameters of the heaviest pipeline stage: its layers plus one embedding table."""
    return stage_layers(arch.layers, pp)[0] * arch.params_per_layer + np.where(
        pp > 1, arch.vocab * arch.hidden, arch.embedding_params)


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
