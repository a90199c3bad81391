"""Memory of a plan's fullest GPU: weights, gradients and optimizer states as ZeRO shards them,
and the activations a pipeline schedule keeps in flight (Korthikanti et al. 2022)."""

from __future__ import annotations

import numpy as np

from xdscheduler.catalog import ModelArch
from xdscheduler.costmodel.layers import MeasuredLayers, applicable
from xdscheduler.costmodel.plan import PlanBatch, Stack
from xdscheduler.costmodel.shape import Shape, floats, stage_layers, stage_params, wide_precision

GIB = 2**30
RUNTIME_OVERHEAD_GIB = 3.0  # CUDA context, NCCL buffers, allocator fragmentation


def memory_gib(
    arch: ModelArch,
    global_batch,
    plans: PlanBatch,
    stack: Stack | None = None,
    seq: int | None = None,
    measured: tuple[MeasuredLayers, ...] = (),
) -> dict[str, np.ndarray]:
    """Per-GPU memory of the fullest stage: states sharded by ZeRO, activations in flight."""
    stack = stack or Stack()
    shape = Shape.of(plans, global_batch, float(seq or arch.seq_len))
    gpu_params = stage_params(arch, shape.pp) / shape.tp
    kept = _kept_per_micro_batch(arch, plans, shape, stack, measured)
    activations, logits = _in_flight(arch, shape, *kept)
    return {
        **{k: v / GIB for k, v in _states(plans, shape, gpu_params).items()},
        "buffers": gpu_params * stack.extra_state_bytes / GIB,
        "activations": activations / GIB,
        "logits": logits / GIB,
        "overhead": RUNTIME_OVERHEAD_GIB + 0 * shape.dp,
    }


def _states(plans: PlanBatch, shape: Shape, gpu_params) -> dict[str, np.ndarray]:
    """Bytes of weights, gradients and Adam's states a GPU holds, as ZeRO's stage shards them
    over the data-parallel replicas."""
    zero, wide, dp = floats(plans.zero), wide_precision(plans), shape.dp
    # 16-bit plans keep bf16 weights beside an fp32 master copy; fp32 plans' weights are it
    return {
        "weights": gpu_params * np.where(wide, 4.0, 2.0) / np.where(zero >= 3, dp, 1.0),
        "gradients": gpu_params * 4 / np.where(zero >= 2, dp, 1.0),  # fp32 main gradients
        "optimizer": gpu_params * np.where(wide, 8.0, 12.0) / np.where(zero >= 1, dp, 1.0),
    }


def _kept_per_micro_batch(arch: ModelArch, plans: PlanBatch, shape: Shape, stack: Stack, measured):
    """Bytes one micro-batch keeps until its backward pass: of the embedding, of a layer as the
    plan's recomputation keeps it, of the output layer's logits, and of the layer full recomputation
    rebuilds (0 under any other). A profile's measured activation bytes replace the count
    where it covers the plan's TP degree and precision (no recomputation, no context
    parallelism)."""
    tp, tok, wide = shape.tp, shape.tok, wide_precision(plans)
    recompute = floats(plans.recompute)
    act = tok * activation_bytes_per_token(arch, tp, stack) * np.where(wide, 2.0, 1.0)
    full_layer = act + tok * score_bytes_per_token(arch, tp, shape.s, stack)
    sp_div = tp if stack.sequence_parallel else 1.0
    per_layer = np.where(
        recompute == 2,
        tok * np.where(wide, 4, 2) * arch.hidden / sp_div,
        np.where(recompute == 1, act, full_layer),
    )
    logits = tok * arch.vocab / tp * 4 * 2  # fp32 logits and their gradient, last stage
    embed = 0.0 * tok
    for m in applicable(measured, arch, int(shape.s)):
        kept = (
            m.activation_bytes(
                np.broadcast_to(tp, tok.shape), np.broadcast_to(plans.precision, tok.shape)
            )
            * shape.mb[..., None]
        )
        use = ~np.isnan(kept[..., 1]) & (recompute == 0) & (shape.cp == 1)
        embed, per_layer, logits = (
            np.where(use, kept[..., i], x) for i, x in enumerate((embed, per_layer, logits))
        )
    rebuilt = np.where(recompute == 2, full_layer, 0.0)  # full recomputation rebuilds one layer
    return embed, per_layer, logits, rebuilt


def _in_flight(arch: ModelArch, shape: Shape, embed, per_layer, logits, rebuilt):
    """Activation bytes of the fuller of the first and last stages, and its logits' (0 where
    the first is fuller). 1F1B keeps up to `pp` micro-batches on the first stage (with the
    embedding's) and one on the last (with the output layer's logits); one stage holds all
    without a pipeline."""
    pp, vp = shape.pp, shape.vp
    in_flight = np.minimum(shape.micro_batches, pp) * np.where(
        vp > 1, 1 + (pp - 1) / (pp * vp), 1.0
    )
    heaviest, last = stage_layers(arch.layers, pp)
    first_stage = (per_layer * heaviest + embed) * in_flight
    last_stage = (
        per_layer * last * np.where(vp > 1, in_flight, 1.0) + logits + np.where(pp > 1, 0.0, embed)
    )
    last_fuller = (pp == 1) | (last_stage > first_stage)
    activations = np.where(last_fuller, last_stage - logits, first_stage)
    return activations + rebuilt, np.where(last_fuller, logits, 0.0)


def activation_bytes_per_token(arch: ModelArch, tp, stack: Stack):
    """Stored activation bytes per token and layer, without the attention-score matrices.

    Korthikanti et al. 2022, eq. 2: 10 bytes·h replicated across tensor ranks (norms, dropout
    masks, block inputs) unless sequence parallel splits them, and 24 bytes·h split; here the
    split part is rebuilt from the shapes so that GQA and gated MLPs count right.
    """
    h = float(arch.hidden)
    sp_div = tp if stack.sequence_parallel else 1.0
    mlp = (6.0 if arch.gated_mlp else 4.0) * arch.ffn_hidden / h
    return h * (10.0 / sp_div + (4 + 4 * arch.kv_heads / arch.heads + mlp) / tp)


def score_bytes_per_token(arch: ModelArch, tp, s: float, stack: Stack):
    """Bytes of attention scores, softmax and dropout per token and layer: 5·a·s (Korthikanti).
    The same in fp32: Sailor's fp32 runs on GH200 (max_mem of its 27 measured runs) keep about
    this much, not twice it."""
    return 0.0 if stack.flash_attention else 5.0 * arch.heads * s / tp
