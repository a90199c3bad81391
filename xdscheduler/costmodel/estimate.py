"""One plan from a person's input: validated, estimated, and reported with units in the keys."""

from __future__ import annotations

from xdscheduler import catalog
from xdscheduler.costmodel.constants import DEFAULT, Calibration
from xdscheduler.costmodel.layers import coverage
from xdscheduler.costmodel.plan import Hardware, Plan, PlanBatch, Stack
from xdscheduler.costmodel.shape import replica_micro_batches, stage_layers
from xdscheduler.costmodel.steptime import estimate
from xdscheduler.errors import UserError


def check_plan(
    arch: catalog.ModelArch, acc: catalog.Accelerator, gpus: int, plan_args: dict, global_batch: int
) -> Plan:
    """The plan these numbers describe, or a UserError naming what does not divide."""
    tp, pp, cp, vp, mb = (plan_args[k] for k in ("tp", "pp", "cp", "vp", "micro_batch"))
    for name, value in (
        ("--gpus", gpus),
        ("--tp", tp),
        ("--pp", pp),
        ("--cp", cp),
        ("--vp", vp),
        ("--micro-batch", mb),
        ("--global-batch", global_batch),
    ):
        if value < 1:
            raise UserError(f"{name} must be at least 1, got {value}")
    if gpus % (tp * pp * cp):
        raise UserError(f"--gpus {gpus} is not divisible by TP×PP×CP = {tp * pp * cp}")
    dp = gpus // (tp * pp * cp)
    if arch.heads % tp:
        raise UserError(f"TP {tp} does not divide the {arch.heads} attention heads of {arch.name}")
    if arch.kv_heads % tp and tp % arch.kv_heads:
        raise UserError(f"TP {tp} and the {arch.kv_heads} KV heads of {arch.name} do not divide")
    # Uneven splits are allowed as Megatron allows them: the pipeline's end stages a layer
    # lighter, some replicas a sample lighter (stage_layers, replica_micro_batches).
    heaviest = -(-arch.layers // pp)
    if pp > arch.layers:
        raise UserError(f"PP {pp} is more stages than the {arch.layers} layers of {arch.name}")
    if vp > 1 and pp == 1:
        raise UserError("--vp (interleaved stages) needs --pp of at least 2")
    if heaviest % vp:
        raise UserError(
            f"VP {vp} does not divide the {heaviest} layers of the heaviest of "
            f"{pp} stages of {arch.name}"
        )
    share = -(-global_batch // dp)
    if dp > global_batch or share % mb:
        raise UserError(
            f"--micro-batch {mb} does not divide the {share} samples of the busiest "
            f"of {dp} data-parallel replicas (--global-batch {global_batch})"
        )
    if vp > 1 and (share // mb) % pp:
        raise UserError(
            f"interleaving needs the {share // mb} micro-batches per step to be a "
            f"multiple of PP {pp}"
        )
    if arch.seq_len % cp:
        raise UserError(f"CP {cp} does not divide the sequence length {arch.seq_len}")
    acc.peak_tflops(plan_args["dtype"])  # raises where the catalog rates no such peak
    return Plan(dp=dp, **plan_args)


def _too_large(acc: catalog.Accelerator, need: float, memory: dict[str, float]) -> str:
    """Why a plan does not fit: what it needs against what the accelerator has, its three
    largest parts, and what to change."""
    largest = sorted(memory.items(), key=lambda kv: -kv[1])[:3]
    return (
        f"needs {need:.1f} GiB per GPU, {acc.name} has {acc.memory_gib:.0f} GiB; largest: "
        + ", ".join(f"{k} {v:.1f}" for k, v in largest)
        + "; try more TP/PP, a higher --zero, or --recompute full"
    )


def estimate_one(
    gpu: str,
    arch: catalog.ModelArch,
    gpus: int,
    tp: int,
    pp: int,
    cp: int,
    vp: int,
    global_batch: int,
    micro_batch: int,
    recompute: str,
    dtype: str,
    zero: int,
    stack: str = "megatron-core",
    calibration: Calibration = DEFAULT,
    measured: tuple = (),
) -> dict:
    acc = catalog.accelerator(gpu)
    try:
        software = Stack.preset(stack)
    except ValueError as err:
        raise UserError(str(err)) from None
    plan = check_plan(
        arch,
        acc,
        gpus,
        dict(
            tp=tp,
            pp=pp,
            cp=cp,
            vp=vp,
            micro_batch=micro_batch,
            zero=zero,
            recompute=recompute,
            dtype=dtype,
        ),
        global_batch,
    )
    one, hw = PlanBatch.of([plan]), Hardware.of(acc)
    est = estimate(
        arch, global_batch, one, hw, stack=software, calib=calibration, measured=measured
    )
    profiled = bool(coverage(measured, arch, arch.seq_len, one, hw)[0][0])
    step = float(est.step_time_s[0])
    heaviest, last = stage_layers(arch.layers, pp)
    memory = {k: float(v[0]) for k, v in est.memory_parts_gib.items()}
    need = float(est.memory_gib[0])
    fits = bool(est.fits[0])
    warnings = []
    if tp > acc.gpus_per_node:
        warnings.append(
            f"TP {tp} spans nodes of {acc.gpus_per_node} GPUs: its all-reduces "
            "run over the scale-out network"
        )
    reason = "" if fits else _too_large(acc, need, memory)
    model_tflops = est.model_flops / step / gpus / 1e12
    return {
        "gpu": acc.name,
        "model": arch.name,
        "params_b": arch.params / 1e9,
        "gpus": gpus,
        "plan": {
            **plan.as_dict(),
            "micro_batches": int(replica_micro_batches(global_batch, plan.dp, micro_batch)),
            "layers_per_stage": {"heaviest": int(heaviest), "last": int(last)},
        },
        "stack": stack,
        "measured_layers": profiled,  # a layer profile's times replaced the roofline's
        "step_time_s": step,
        "tokens_per_s_per_gpu": est.tokens / step / gpus,
        "model_tflops_per_gpu": model_tflops,
        "hardware_tflops_per_gpu": float(est.hardware_flops[0]) / step / gpus / 1e12,
        "mfu": model_tflops / acc.half_tflops,
        "memory_gib_per_gpu": need,
        "memory_breakdown_gib": memory,
        "fits": fits,
        "reason": reason,
        "breakdown_s": {k: float(v[0]) for k, v in est.breakdown_s.items()},
        "overlapped_s": {k: float(v[0]) for k, v in est.overlapped_s.items()},
        "warnings": warnings,
    }
