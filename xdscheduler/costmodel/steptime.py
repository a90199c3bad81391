"""Step time of a dense transformer job under arrays of plans and placements.

Every quantity is an array over plans; nothing loops per plan. Time per micro-batch and
pipeline stage is built from GEMMs (additive roofline over each matrix shape), attention,
element-wise kernels (memory bound, proportional to the activations they produce, after
Korthikanti et al. 2022) and tensor-parallel collectives; the pipeline adds its bubble and
point-to-point transfers; data parallelism adds the gradient reduction, hierarchical when
replicas span domains and hidden behind the last backward pass where the stack allows. The
memory of each plan's fullest GPU comes from `costmodel.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xdscheduler.catalog import ModelArch
from xdscheduler.costmodel.constants import DEFAULT, Calibration
from xdscheduler.costmodel.exchanges import PipelineExchanges
from xdscheduler.costmodel.layers import TIMES, MeasuredLayers, applicable, member_codes
from xdscheduler.costmodel.memory import activation_bytes_per_token, memory_gib
from xdscheduler.costmodel.messages import MessageCurve, connection_bps, ring_s
from xdscheduler.costmodel.plan import DTYPES, OPERAND_BYTES, Hardware, PlanBatch, Stack, WanUse
from xdscheduler.costmodel.shape import Shape, floats, stage_layers, stage_params, wide_precision

ADAM_BYTES_PER_PARAM = 30  # read fp32 master, m, v, grad; write master, m, v, bf16 weight
FLASH_BACKWARD_FACTOR = 2.5  # FlashAttention-2 backward recomputes QK^T: 2.5x forward FLOPs

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
    cross_domain_bytes: np.ndarray  # per step, all WAN links (between sites), both directions

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


@dataclass(frozen=True)
class _Rates:
    """What each plan's precision gets of its accelerator: peaks, bytes an element."""

    wide: np.ndarray  # TF32 or FP32 plans
    half_peak: np.ndarray  # the 16-bit peak, FLOP/s
    own_peak: np.ndarray  # the GEMMs' own: 16-bit for bf16 and fp16, else FP8, TF32 or FP32's
    gemm_peak: np.ndarray  # own_peak at the GEMMs' efficiency
    mem_bw: np.ndarray  # bytes/s
    operand_bytes: np.ndarray
    # activations, their gradients and what crosses links: 4 bytes in fp32/tf32, else 2 (fp8
    # recipes keep activations in bf16)
    elem: np.ndarray
    # attention and the output layer run in 16 bits unless the whole plan is 32-bit
    attn_base: np.ndarray

    @classmethod
    def of(cls, plans: PlanBatch, hw: Hardware, calib: Calibration) -> _Rates:
        precision = np.asarray(plans.precision)
        fp8, wide = precision == DTYPES.index("fp8"), wide_precision(plans)
        half_peak = floats(hw.peak_tflops) * 1e12
        own_peak = np.select(
            [fp8, precision == DTYPES.index("tf32"), precision == DTYPES.index("fp32")],
            [
                floats(hw.peak_fp8_tflops) * 1e12,
                floats(hw.peak_tf32_tflops) * 1e12,
                floats(hw.peak_fp32_tflops) * 1e12,
            ],
            half_peak,
        )
        return cls(
            wide=wide,
            half_peak=half_peak,
            own_peak=own_peak,
            gemm_peak=own_peak * np.where(fp8, calib.fp8_gemm_efficiency, calib.gemm_efficiency),
            mem_bw=floats(hw.memory_gbs) * 1e9,
            operand_bytes=np.asarray(OPERAND_BYTES)[precision],
            elem=np.where(wide, 4.0, 2.0),
            attn_base=np.where(wide, own_peak, half_peak),
        )

    def gemm(self, m, k, n, peak=None, elem=None):
        """Additive roofline: small or thin matrices pay for their bytes on top of FLOPs."""
        peak = self.gemm_peak if peak is None else peak
        elem = self.operand_bytes if elem is None else elem
        return 2 * m * k * n / peak + (elem * (m * k + k * n) + 2 * m * n) / self.mem_bw


@dataclass(frozen=True)
class _Layer:
    """Seconds of one transformer layer on one micro-batch, and of the ends of the model."""

    fwd: np.ndarray
    bwd: np.ndarray
    rec: np.ndarray  # recomputed in the backward pass
    tp_fwd: np.ndarray  # tensor-parallel collectives of a forward pass, hidden or not
    tp_fwd_exposed: np.ndarray
    tp_bwd_exposed: np.ndarray
    logits: np.ndarray  # the output layer, forward and backward
    embed: np.ndarray | float  # the embedding, forward and backward

    @property
    def per_layer(self) -> np.ndarray:
        return self.fwd + self.bwd + self.rec + self.tp_fwd_exposed + self.tp_bwd_exposed


def _estimate(
    arch, global_batch, plans, hw, wan, stack, calib, seq, measured, network=None
) -> StepEstimate:
    """`estimate` of one block of plans: a layer's times, the stage that sets the pace, the
    pipeline's and the data-parallel exchanges' waits, DiLoCo's sync, the optimizer step."""
    shape = Shape.of(plans, global_batch, float(seq or arch.seq_len))
    rates = _Rates.of(plans, hw, calib)
    block = _measured_blocks(measured, plans, hw, shape.cp)
    layer = _with_measured(_layer_times(arch, shape, rates, hw, stack, calib, plans), block)
    stage = _Stage.of(arch, shape.pp, layer)
    t_mb = stage.per_micro_batch
    micro_batches = shape.micro_batches

    bubble = (shape.pp - 1) / shape.vp * t_mb
    pp_exposed, pp_hidden = _pipeline_comm(arch, shape, rates, hw, wan, stack, calib, stage)
    dp = _DataParallel.of(arch, shape, rates, hw, wan, stack, calib, network, plans)
    dp_exposed, dp_hidden = dp.exposed(stage, layer, micro_batches * t_mb, stack)

    compute_part = micro_batches * stage.compute
    inner = compute_part + micro_batches * (stage.rec + stage.tp) + bubble + pp_exposed + dp_exposed
    sync_total, sync_exposed, convergence = dp.outer_sync(inner, stack)
    breakdown = {
        "compute": compute_part,
        "recompute": micro_batches * stage.rec,
        "tp_comm": micro_batches * stage.tp,
        "pp_comm": pp_exposed,
        "dp_comm": dp_exposed,
        "bubble": bubble,
        "sync": sync_exposed,
        "convergence": convergence,
        "optimizer": _optimizer_s(dp, shape.dp, rates, block),
    }
    step = sum(breakdown.values())
    tp_hidden = micro_batches * stage.layers * 3 * layer.tp_fwd - breakdown["tp_comm"]
    overlapped = {
        "tp_comm": np.maximum(tp_hidden, 0.0) if stack.tp_comm_overlap else 0.0,
        "pp_comm": pp_hidden,
        "dp_comm": dp_hidden,
        "sync": sync_total - sync_exposed,
    }

    memory = memory_gib(arch, shape.batch, plans, stack, int(shape.s), measured)
    total_mem = sum(memory.values())
    tokens = shape.batch * shape.s
    mflops = model_flops_per_step(arch, shape.batch, int(shape.s))
    pp_bytes = (
        2 * floats(wan.pp_crossings) * shape.batch * shape.s * arch.hidden * rates.elem * shape.vp
    )

    def full(x):
        return np.broadcast_to(np.asarray(x, dtype=np.float64), step.shape)

    return StepEstimate(
        step_time_s=step,
        breakdown_s={k: full(v) for k, v in breakdown.items()},
        overlapped_s={k: full(v) for k, v in overlapped.items()},
        memory_gib=full(total_mem),
        memory_parts_gib={k: full(v) for k, v in memory.items()},
        fits=full(total_mem) <= floats(hw.memory_gib),
        model_flops=mflops,
        hardware_flops=full(
            mflops + _recompute_flops(arch, shape.s, plans, mflops, tokens) * tokens
        ),
        tokens=tokens,
        cross_domain_bytes=full((pp_bytes + dp.cross_domain_bytes()) * floats(wan.offsite_share)),
    )


def _layer_times(arch, shape: Shape, rates: _Rates, hw, stack: Stack, calib, plans) -> _Layer:
    """A layer's GEMMs, attention, element-wise kernels and tensor- and context-parallel
    collectives, by the roofline."""
    tok, tp, cp = shape.tok, shape.tp, shape.cp
    gpn = floats(hw.gpus_per_node)
    h, ffn, heads, vocab = float(arch.hidden), float(arch.ffn_hidden), arch.heads, arch.vocab
    kv_frac = arch.kv_heads / heads
    elem, mem_bw, gemm = rates.elem, rates.mem_bw, rates.gemm
    n_up = 2.0 if arch.gated_mlp else 1.0
    gemm_fwd = (
        gemm(tok, h, h * (1 + 2 * kv_frac) / tp)
        + gemm(tok, h / tp, h)
        + gemm(tok, h, n_up * ffn / tp)
        + gemm(tok, ffn / tp, h)
    )

    half_eff_peak = rates.attn_base * calib.gemm_efficiency
    attn_fwd, attn_bwd, score_fwd, score_bwd = _attention_s(arch, shape, rates, stack, calib)

    act_bytes_per_token = activation_bytes_per_token(arch, tp, stack) * elem / 2
    # The element-wise kernels (norms, activations, dropout, residuals) move their bytes
    # `memory_passes` times; the attention scores between the two batched GEMMs, as many
    # times as the softmax's kernels pass over them (_score_traffic).
    elem_fwd = calib.memory_passes * tok * act_bytes_per_token / mem_bw + score_fwd
    elem_bwd = 2 * (elem_fwd - score_fwd) + score_bwd

    # Tensor-parallel all-reduce (or reduce-scatter + all-gather): two per layer each way.
    tp_link = np.where(tp <= gpn, floats(hw.scaleup_gbs) * 1e9, floats(hw.scaleout_gbps) * 1e9 / 8)
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
    cp_link = np.where(
        tp * cp <= gpn, floats(hw.scaleup_gbs) * 1e9, floats(hw.scaleout_gbps) * 1e9 / 8
    )
    kv_ring = (cp - 1) * 2 * tok * h * kv_frac / tp * elem / (calib.collective_efficiency * cp_link)
    cp_fwd = np.maximum(0.0, kv_ring - attn_fwd)
    cp_bwd = np.maximum(0.0, 2 * kv_ring - attn_bwd)

    layer_fwd = gemm_fwd + attn_fwd + elem_fwd + cp_fwd + calib.kernel_overhead_s
    layer_bwd = 2 * gemm_fwd + attn_bwd + elem_bwd + cp_bwd + 2 * calib.kernel_overhead_s
    recompute = floats(plans.recompute)
    layer_rec = np.where(
        recompute == 2,
        layer_fwd + tp_fwd_exposed,
        np.where(recompute == 1, attn_fwd + score_fwd, 0.0),
    )
    if stack.flash_attention:
        layer_rec = np.where(recompute == 1, 0.0, layer_rec)  # flash already recomputes

    # FP8 recipes keep the output layer in BF16 (Transformer Engine casts only the blocks).
    logits = (
        3 * gemm(tok, h, vocab / tp, half_eff_peak, elem)
        + 3 * calib.memory_passes * tok * vocab / tp * 4 / mem_bw
    )
    embed = 0.0  # a gather: nothing beside the layers, unless a profile measured it
    return _Layer(
        layer_fwd, layer_bwd, layer_rec, tp_fwd, tp_fwd_exposed, tp_bwd_exposed, logits, embed
    )


def _attention_s(arch, shape: Shape, rates: _Rates, stack: Stack, calib):
    """A layer's attention on one micro-batch, forward and backward, and the passes of the
    softmax's kernels over the scores forward and backward (none with FlashAttention, which
    keeps them on chip)."""
    s, tok, mb, tp, cp = shape.s, shape.tok, shape.mb, shape.tp, shape.cp
    h, heads, elem, mem_bw = float(arch.hidden), arch.heads, rates.elem, rates.mem_bw
    if stack.flash_attention:
        attn_flops = 4 * mb * (s / cp) * s * h / tp * 0.5  # causal blocks are skipped
        attn_io = 4 * tok * h / tp * elem / mem_bw
        attn_peak = rates.attn_base * calib.attention_efficiency
        attn_fwd = attn_flops / attn_peak + attn_io
        attn_bwd = FLASH_BACKWARD_FACTOR * attn_flops / attn_peak + 2 * attn_io
        return attn_fwd, attn_bwd, 0.0, 0.0
    half_eff_peak = rates.attn_base * calib.gemm_efficiency
    d_head = h / heads
    per_head = rates.gemm(s / cp, d_head, s, half_eff_peak, elem) + rates.gemm(
        s / cp, s, d_head, half_eff_peak, elem
    )
    attn_fwd = mb * heads / tp * per_head
    scores = tok * heads / tp * s  # attention scores of a micro-batch on one GPU
    per_score = _score_traffic(stack.fused_softmax & ~rates.wide, elem)
    score_fwd, score_bwd = (scores * b / mem_bw for b in per_score)
    return attn_fwd, 2 * attn_fwd, score_fwd, score_bwd


def _with_measured(layer: _Layer, block: dict[str, np.ndarray]) -> _Layer:
    """Measured layers stand in for the roofline where a profile covers the plan; their times
    include the tensor-parallel all-reduces as they ran."""
    have = ~np.isnan(block["layer_fwd_s"])
    if not have.any():
        return layer
    timed = have & (block["tp_comm_timed"] > 0)
    return _Layer(
        fwd=np.where(have, block["layer_fwd_s"], layer.fwd),
        bwd=np.where(have, block["layer_bwd_s"], layer.bwd),
        rec=layer.rec,
        tp_fwd=np.where(timed, 0.0, layer.tp_fwd),
        tp_fwd_exposed=np.where(timed, 0.0, layer.tp_fwd_exposed),
        tp_bwd_exposed=np.where(timed, 0.0, layer.tp_bwd_exposed),
        # a profile whose last block stops at the final norm leaves the output layer to the
        # roofline
        logits=np.where(
            have,
            block["last_fwd_s"]
            + block["last_bwd_s"]
            + np.where(block["output_layer_timed"] > 0, 0.0, layer.logits),
            layer.logits,
        ),
        embed=np.where(have, block["first_fwd_s"] + block["first_bwd_s"], 0.0),
    )


@dataclass(frozen=True)
class _Stage:
    """The pipeline stage that sets the pace: the first with the embedding, the heaviest, or
    the last with the output layer (one stage holds all three without a pipeline)."""

    layers: np.ndarray
    compute: np.ndarray  # forward and backward of one micro-batch
    rec: np.ndarray
    tp: np.ndarray  # exposed tensor-parallel collectives
    forward: np.ndarray  # of one micro-batch, its collectives in (an end's pass a third)

    @classmethod
    def of(cls, arch: ModelArch, pp: np.ndarray, layer: _Layer) -> _Stage:
        heaviest, last = stage_layers(arch.layers, pp)
        per_layer_t = layer.per_layer
        first_end = np.where(pp > 1, layer.embed, 0.0)
        last_end = layer.logits + np.where(pp > 1, 0.0, layer.embed)
        last_binds = last * per_layer_t + last_end >= heaviest * per_layer_t + first_end
        layers = np.where(last_binds, last, heaviest)
        end = np.where(last_binds, last_end, first_end)
        return cls(
            layers=layers,
            compute=layers * (layer.fwd + layer.bwd) + end,
            rec=layers * layer.rec,
            tp=layers * (layer.tp_fwd_exposed + layer.tp_bwd_exposed),
            forward=layers * (layer.fwd + layer.tp_fwd_exposed) + end / 3,
        )

    @property
    def per_micro_batch(self) -> np.ndarray:
        return self.compute + self.rec + self.tp


def _pipeline_comm(arch, shape: Shape, rates: _Rates, hw, wan, stack, calib, stage: _Stage):
    """Seconds a step waits for activations and their gradients between stages (and the tied
    embedding's gradients between the ends), and the seconds of them hidden."""
    dp, tp, pp, cp, vp, mb = shape.dp, shape.tp, shape.pp, shape.cp, shape.vp, shape.mb
    gpn = floats(hw.gpus_per_node)
    h, elem, micro_batches = float(arch.hidden), rates.elem, shape.micro_batches
    scaleout = floats(hw.scaleout_gbps) * 1e9 / 8
    hops_bps = _hops(wan.pp_gbps) * 1e9 / 8 * calib.wan_efficiency
    wan_bps = hops_bps.min(axis=-1)
    flow = floats(hw.flow_gbps) * 1e9 / 8  # one connection between two nodes' accelerators
    p2p_intra = (
        shape.tok * h * elem / tp / (calib.collective_efficiency * np.minimum(scaleout, flow))
    )
    crossings = floats(wan.pp_crossings)
    # All replicas share the link; where it is rated per node pair, each of the boundary
    # stage's nodes (dp·tp·cp ranks) streams to its peer at that rate.
    pp_lanes = np.where(floats(wan.pp_per_node) > 0, _lanes(dp * tp * cp, gpn), 1.0)
    # each rank of the boundary stage streams its share on its own connection
    boundary = dp * tp * cp
    share = dp * mb * shape.s * h * elem / boundary

    def over(bps, flow_gbps, each: bool = False):
        """A transfer's seconds over the slowest of the hops (`bps`, hops last), or over
        each."""
        conns = _wan_connection_bps(
            bps, flow_gbps, wan.pp_per_node, boundary / pp_lanes, gpn, calib, each
        )
        with np.errstate(divide="ignore"):  # a link that carries nothing: forever
            return (share[..., None] if each else share) / conns

    p2p_wan = over(hops_bps, wan.pp_flow_gbps)
    exposed, hidden = PipelineExchanges(
        pp,
        vp,
        micro_batches,
        crossings,
        wan_s=p2p_wan,
        intra_s=p2p_intra,
        t_mb=stage.per_micro_batch,
        overlap=stack.overlap_p2p,
        fwd_s=stage.forward,
        after=floats(wan.pp_after_crossings),
        crossing_s=_each_crossing_s(wan, over, calib),
    ).wait()
    has_pp = pp > 1
    exposed = exposed + np.where(has_pp, 2 * floats(wan.pp_latency_s), 0.0)  # the fill's round trip
    if arch.tied_embeddings:
        # The first and last stages both hold the tied embedding: they all-reduce its
        # gradients once a step, over the WAN where the pipeline crosses one.
        tied = arch.vocab * h / tp * _grad_elem(rates, stack)
        exposed = exposed + np.where(
            has_pp,
            tied
            / np.where(
                crossings > 0,
                wan_bps * pp_lanes,
                calib.collective_efficiency * np.minimum(scaleout, flow),
            ),
            0.0,
        )
    return exposed, hidden


def _grad_elem(rates: _Rates, stack: Stack) -> np.ndarray:
    """Bytes a gradient element is reduced in: fp32 gradients in fp32 plans."""
    return np.where(rates.wide, 4.0, stack.grad_reduce_bytes)


@dataclass(frozen=True)
class _DataParallel:
    """The gradients' reduction: inside each domain, then across domains over the WAN (every
    step, or DiLoCo's outer sync every H steps)."""

    intra: np.ndarray  # the reduction inside a domain
    ring: np.ndarray  # one exchange across domains
    flat: np.ndarray  # one flat ring over every rank, no reduction inside
    domains: np.ndarray
    diloco_h: np.ndarray
    gpu_params: np.ndarray  # of the heaviest stage, on one accelerator
    model_grad_bytes: np.ndarray
    micro_batches: np.ndarray
    zero: np.ndarray  # ZeRO stage

    @property
    def spans(self) -> np.ndarray:
        return self.domains > 1

    @classmethod
    def of(cls, arch, shape: Shape, rates, hw, wan, stack, calib, network, plans):
        dp, tp, pp, cp = shape.dp, shape.tp, shape.pp, shape.cp
        gpn = floats(hw.gpus_per_node)
        grad_elem = _grad_elem(rates, stack)
        gpu_params = stage_params(arch, pp) / tp
        domains = floats(wan.dp_domains)
        local = np.maximum(dp / domains, 1.0)
        flat = (floats(wan.dp_flat) > 0) | (not stack.hierarchical_dp)
        bucket = stack.grad_bucket_elems * grad_elem
        intra = _allreduce_s(
            gpu_params * grad_elem,
            local,
            tp * cp,
            gpn,
            floats(hw.scaleup_gbs) * 1e9,
            floats(hw.scaleout_gbps) * 1e9 / 8,
            calib.collective_efficiency,
            flat,
            floats(hw.flow_gbps) * 1e9 / 8,
            bucket,
            network,
        )
        model_grad_bytes = arch.params * grad_elem
        dp_wan_bps = _hops(wan.dp_gbps) * 1e9 / 8 * calib.wan_efficiency
        # Hierarchical: only 1/local of the gradients leaves each domain. A flat ring over every
        # rank sends all of them over each WAN link it crosses.
        wan_share = np.where(flat, 2.0, 2 * (domains - 1) / domains)
        # Over links rated per node pair the bytes spread over the node pairs that carry them:
        # every node of a domain's replicas in the hierarchical exchange, one replica's nodes
        # where a flat ring crosses.
        dp_lanes = np.where(
            floats(wan.dp_per_node) > 0, _lanes(np.where(flat, 1.0, local) * tp * cp * pp, gpn), 1.0
        )
        # Each rank crossing streams on its own connection: a flat ring's one replica's ranks,
        # every rank of a domain's replicas in the hierarchical exchange.
        flows = np.where(flat, 1.0, local) * tp * cp * pp
        wan_conn_bps = _wan_connection_bps(
            dp_wan_bps, wan.dp_flow_gbps, wan.dp_per_node, flows / dp_lanes, gpn, calib
        )
        # a flat ring: each connection carries its replica's share in messages of bucket/dp
        # bytes
        flat_wan = ring_s(model_grad_bytes / flows, dp, wan_conn_bps, bucket, network)
        ring = np.where(
            flat, flat_wan, wan_share * model_grad_bytes / (flows * wan_conn_bps)
        ) + np.where(flat, dp - 1, domains - 1) * floats(wan.dp_rtt_s)  # a step a hop: 2(n-1)·rtt/2
        return cls(
            intra,
            ring,
            flat,
            domains,
            floats(plans.diloco_h),
            gpu_params,
            model_grad_bytes,
            shape.micro_batches,
            floats(plans.zero),
        )

    def exposed(self, stage: _Stage, layer: _Layer, busy, stack: Stack):
        """Seconds a step waits for the reduction, and the seconds of it hidden, `busy` the
        seconds of a replica's micro-batches. DDP all-reduces after the last backward; the
        distributed optimizer reduce-scatters there and all-gathers parameters during the next
        step's first forward. ZeRO-3 gathers parameters for forward and backward and scatters
        gradients every micro-batch (1.5x an all-reduce each time), prefetched behind that
        micro-batch's compute."""
        intra = self.intra
        dp_wan = np.where(self.spans & (self.diloco_h == 0), self.ring, 0.0)
        zero3 = self.zero >= 3
        sharded = (self.zero >= 1) & ~zero3
        # a flat ring's hops inside and across domains carry the same bytes at once: the
        # slower sets its pace; the hierarchical exchange does one after the other
        dp_step = np.where(self.flat, np.maximum(intra, dp_wan), intra + dp_wan)
        reduce = np.where(sharded, intra / 2 + dp_wan, dp_step)
        gather = np.where(sharded, intra / 2, 0.0)
        bwd_window = stage.layers * layer.bwd if stack.overlap_grad_reduce else 0.0
        fwd_window = stage.layers * layer.fwd if stack.overlap_param_gather else 0.0
        total = np.where(zero3, 1.5 * self.micro_batches * intra + dp_wan, reduce + gather)
        exposed = np.where(
            zero3,
            np.maximum(0.0, total - busy),
            np.maximum(0.0, reduce - bwd_window) + np.maximum(0.0, gather - fwd_window),
        )
        return exposed, total - exposed

    def outer_sync(self, inner, stack: Stack):
        """DiLoCo's outer sync: its seconds a step, those exposed, and its cost in convergence.
        The sync comes every H steps, overlapped with the next H inner steps where the stack
        streams it, else waited for in full."""
        diloco = self.spans & (self.diloco_h > 0)
        total = np.where(diloco, self.ring / np.maximum(self.diloco_h, 1), 0.0)
        exposed = np.maximum(0.0, total - inner) if stack.overlap_outer_sync else total
        # Its replica groups drift apart between syncs: charged as steps that train nothing
        # kept.
        convergence = np.where(
            diloco, (inner + exposed) * DILOCO_EXTRA_TOKENS * (self.domains - 1), 0.0
        )
        return total, exposed, convergence

    def cross_domain_bytes(self) -> np.ndarray:
        """Bytes a step sends across domains, every link, both directions."""
        return np.where(
            self.spans,
            np.where(self.flat, 2 * self.domains, 2 * (self.domains - 1))
            * self.model_grad_bytes
            / np.where(self.diloco_h > 0, self.diloco_h, 1.0),
            0.0,
        )


def _optimizer_s(data: _DataParallel, dp, rates: _Rates, block) -> np.ndarray:
    """The optimizer step: a profile's measured rate, else Adam's bytes at the memory's rate
    (fp32 plans have no separate bf16 copy of the weights to write)."""
    opt_params = data.gpu_params / np.where(data.zero >= 1, dp, 1.0)
    return opt_params * np.where(
        np.isnan(block["optimizer_s_per_param"]),
        np.where(rates.wide, ADAM_BYTES_PER_PARAM - 2, ADAM_BYTES_PER_PARAM) / rates.mem_bw,
        block["optimizer_s_per_param"],
    )


def _recompute_flops(arch, s: float, plans, mflops, tokens) -> np.ndarray:
    """FLOPs a token recomputes: a whole forward of the layers, or selective's attention."""
    h = float(arch.hidden)
    layer_fwd_flops = (mflops / tokens - 6 * h * arch.vocab) / 3  # one forward of all layers
    recompute = floats(plans.recompute)
    return np.where(
        recompute == 2, layer_fwd_flops, np.where(recompute == 1, 4 * s * h * arch.layers, 0.0)
    )


def _measured_blocks(
    measured: tuple[MeasuredLayers, ...], plans: PlanBatch, hw: Hardware, cp
) -> dict[str, np.ndarray]:
    """Each plan's block times (TIMES) and optimizer seconds per parameter from the first
    profile that covers it (its accelerator, precision, TP degree, micro-batch; without
    context parallelism); NaN where none does. A placement over accelerators of different
    kinds takes its slowest member's, as measured, where a profile covers each member."""
    n = len(plans)
    codes = member_codes(hw, n) if measured else np.full((n, 1), -1.0)
    kinds = [
        _one_kind(measured if (codes[:, j] >= 0).any() else (), plans, codes[:, j], cp)
        for j in range(codes.shape[1])
    ]
    total = np.stack([k[:, : len(TIMES)].sum(axis=1) for k in kinds], axis=1)  # NaN: uncovered
    total = np.where(codes >= 0, total, -np.inf)  # padding never stands
    slowest = np.where(np.isnan(total).any(axis=1), 0, np.nan_to_num(total).argmax(axis=1))
    out = np.stack(kinds, axis=1)[np.arange(n), slowest]
    out[np.isnan(total).any(axis=1), : len(TIMES)] = np.nan
    # the times and the optimizer's rate: a stage's share of either grows with its layers
    out[:, : len(TIMES) + 1] *= np.broadcast_to(np.asarray(hw.measured_scale, float), n)[:, None]
    return {
        **{k: out[:, i] for i, k in enumerate(TIMES)},
        "optimizer_s_per_param": out[:, len(TIMES)],
        "output_layer_timed": out[:, len(TIMES) + 1],
        "tp_comm_timed": out[:, len(TIMES) + 2],
    }


def _one_kind(measured: tuple[MeasuredLayers, ...], plans: PlanBatch, code, cp) -> np.ndarray:
    """(n, TIMES + 3): the block times of each plan on accelerator `code` from the first profile
    that covers it, then its optimizer rate and its output-layer and TP flags."""
    n = len(plans)
    out = np.full((n, len(TIMES) + 3), np.nan)
    out[:, len(TIMES) + 1 :] = 1.0
    for m in measured:
        t = m.times(plans.micro_batch, plans.tp, code, plans.precision)
        new = np.isnan(out[:, 0]) & ~np.isnan(t[:, 0]) & (np.broadcast_to(cp, n) == 1)
        out[new, : len(TIMES)] = t[new]
        out[new, len(TIMES) + 1] = m.profile.output_layer_timed
        out[new, len(TIMES) + 2] = m.profile.tp_comm_timed
        if m.profile.optimizer_s_per_param is not None:
            out[new, len(TIMES)] = m.profile.optimizer_s_per_param
    return out


def _each_crossing_s(wan: WanUse, over, calib: Calibration) -> np.ndarray | None:
    """A micro-batch's transfer over each crossing of each plan's pipeline at its own rate
    (`over`: a transfer's seconds at a link's rate), (plans, hops), nan past the last
    crossing; None where not known."""
    links, flows = floats(wan.pp_crossing_gbps), floats(wan.pp_crossing_flow_gbps)
    if links.ndim != 2 or np.isnan(links).any():
        return None
    seconds = over(links * 1e9 / 8 * calib.wan_efficiency, flows, each=True)
    return np.where(np.isposinf(links), np.nan, seconds)


def _wan_connection_bps(
    hops_bps, flow_gbps, per_node, flows, gpn, calib: Calibration, each: bool = False
):
    """Bytes/s each of `flows` connections gets across the slowest of the WAN hops it crosses
    (or, `each`, across each), each at its own bandwidth `hops_bps` and flow rate (hops on the
    last axis; `flows` per node pair where the links are rated per node pair, whose node's
    `gpn` accelerators fill them together)."""
    flow_bps = _hops(flow_gbps) * 1e9 / 8 * calib.wan_efficiency
    gpn = np.where(floats(per_node) > 0, gpn, 1.0)
    bps = connection_bps(hops_bps, flow_bps, floats(flows)[..., None], gpn[..., None])
    return bps if each else bps.min(axis=-1)


def _hops(gbps) -> np.ndarray:
    """A WanUse rate with its hops on the last axis: (plans, hops) as placements describe
    them, or one hop (a scalar, or one a plan)."""
    gbps = floats(gbps)
    return gbps if gbps.ndim == 2 else gbps[..., None]


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


def _score_traffic(fused, elem) -> tuple[np.ndarray, np.ndarray]:
    """Bytes moved per attention score between the two batched GEMMs, forward and backward
    (the GEMMs' own reads and writes are in their roofline).

    Megatron's fused scale-mask-softmax (16-bit only) reads and writes each score once, then
    dropout reads, writes and keeps a 1-byte mask: 4 + 5 bytes forward, 11 back (dropout's,
    then the softmax's gradient reading output and gradient). Unfused, as in fp32, masking,
    softmax and dropout are a kernel each: 6·e + 1 bytes forward, 7·e + 1 back (e bytes a
    score: the masking's gradient is another pass)."""
    return (np.where(fused, 9.0, 6 * elem + 1), np.where(fused, 11.0, 7 * elem + 1))
