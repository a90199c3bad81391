"""Parallel plans and placements, one plan or many as arrays of equal length."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal, get_args

import numpy as np

RECOMPUTE = ("none", "selective", "full")
# The precision of a plan's GEMMs (a job's `dtype` in a scenario or request)
Precision = Literal["bf16", "fp8", "fp16", "tf32", "fp32"]
DTYPES: tuple[str, ...] = get_args(Precision)
# bytes of one GEMM operand in each (fp8 recipes keep activations in bf16; see steptime)
OPERAND_BYTES = (2.0, 1.0, 2.0, 4.0, 4.0)


@dataclass(frozen=True)
class Plan:
    """How one job is split: data, tensor, pipeline and context parallelism and the rest."""

    dp: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    vp: int = 1  # virtual (interleaved) stages per pipeline rank
    micro_batch: int = 1
    zero: int = 1  # 0 none, 1 distributed optimizer, 2 + gradients, 3 + parameters
    recompute: str = "none"
    dtype: str = "bf16"
    diloco_h: int = 0  # outer synchronisation every H steps across domains; 0 = every step

    def __post_init__(self) -> None:
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute {self.recompute!r}: one of {', '.join(RECOMPUTE)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"precision {self.dtype!r}: one of {', '.join(DTYPES)}")

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class PlanBatch:
    """Many plans as parallel integer arrays, for vectorised evaluation."""

    dp: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    vp: np.ndarray
    micro_batch: np.ndarray
    zero: np.ndarray
    recompute: np.ndarray  # index into RECOMPUTE
    precision: np.ndarray  # index into DTYPES
    diloco_h: np.ndarray

    @classmethod
    def of(cls, plans: list[Plan]) -> PlanBatch:
        cols = {f.name: [getattr(p, f.name) for p in plans] for f in fields(Plan)}
        return cls(
            dp=np.array(cols["dp"]),
            tp=np.array(cols["tp"]),
            pp=np.array(cols["pp"]),
            cp=np.array(cols["cp"]),
            vp=np.array(cols["vp"]),
            micro_batch=np.array(cols["micro_batch"]),
            zero=np.array(cols["zero"]),
            recompute=np.array([RECOMPUTE.index(r) for r in cols["recompute"]]),
            precision=np.array([DTYPES.index(d) for d in cols["dtype"]]),
            diloco_h=np.array(cols["diloco_h"]),
        )

    def __len__(self) -> int:
        return int(np.size(self.dp))

    @property
    def gpus(self) -> np.ndarray:
        return self.dp * self.tp * self.pp * self.cp

    def plan(self, i: int) -> Plan:
        return Plan(
            dp=int(self.dp[i]),
            tp=int(self.tp[i]),
            pp=int(self.pp[i]),
            cp=int(self.cp[i]),
            vp=int(self.vp[i]),
            micro_batch=int(self.micro_batch[i]),
            zero=int(self.zero[i]),
            recompute=RECOMPUTE[int(self.recompute[i])],
            dtype=DTYPES[int(self.precision[i])],
            diloco_h=int(self.diloco_h[i]),
        )

    def take(self, index: np.ndarray | slice) -> PlanBatch:
        return PlanBatch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


@dataclass(frozen=True)
class Hardware:
    """The accelerators a plan runs on; scalars or arrays broadcast against a PlanBatch."""

    peak_tflops: np.ndarray | float  # 16-bit dense: BF16, or FP16 where there is no BF16
    peak_fp8_tflops: np.ndarray | float  # 0 where there is no FP8
    peak_tf32_tflops: np.ndarray | float  # 0 where there is no TF32
    peak_fp32_tflops: np.ndarray | float  # 0 where it is not rated
    memory_gib: np.ndarray | float
    memory_gbs: np.ndarray | float
    scaleup_gbs: np.ndarray | float  # per direction
    scaleout_gbps: np.ndarray | float  # per accelerator, Gbit/s
    gpus_per_node: np.ndarray | float
    flow_gbps: np.ndarray | float = np.inf  # one connection between two nodes' accelerators
    # which accelerator (catalog.accelerator_code) a measured layer profile may stand for;
    # -1 where there is none to name (placements over accelerators of different kinds)
    accelerator: np.ndarray | float = -1.0
    # (plans, members): the accelerators of a placement's members, -1 padded; where
    # `accelerator` is -1, each member's profile times the plan and the slowest stands
    members: np.ndarray | None = None
    # what a measured profile's times are multiplied by: a domain slowed down, or the member
    # that paces a split by speed taking more than an even share of the work
    measured_scale: np.ndarray | float = 1.0

    def one(self, i: int = 0) -> Hardware:
        """Plan `i`'s hardware alone, as scalars."""
        return Hardware(
            **{
                k: float(np.asarray(v)[i]) if np.ndim(v) else v
                for k, v in self.__dict__.items()
                if k != "members"
            },
            members=None if self.members is None else np.asarray(self.members)[i : i + 1],
        )

    @classmethod
    def of(cls, acc, scaleup_gbs: float | None = None, scaleout_gbps: float | None = None):
        from xdscheduler.catalog import accelerator_code

        return cls(
            peak_tflops=acc.half_tflops,
            peak_fp8_tflops=acc.fp8_tflops or 0.0,
            peak_tf32_tflops=acc.tf32_tflops or 0.0,
            peak_fp32_tflops=acc.fp32_tflops or 0.0,
            memory_gib=acc.memory_gib,
            memory_gbs=acc.memory_gbs,
            scaleup_gbs=scaleup_gbs or acc.scaleup_gbs,
            scaleout_gbps=scaleout_gbps or acc.scaleout_gbps,
            gpus_per_node=acc.gpus_per_node,
            accelerator=accelerator_code(acc.name),
        )


@dataclass(frozen=True)
class WanUse:
    """What a placement asks of the WAN; scalars or arrays. Zeros: the job stays in one domain.
    The link rates (`*_gbps`) may be (plans, hops): the hops that may pace a connection, each
    with its own bandwidth and flow rate, padded with inf; one hop where they are not."""

    pp_crossings: np.ndarray | float = 0.0  # pipeline boundaries that cross a WAN link
    pp_gbps: np.ndarray | float = np.inf  # narrowest of those links, per direction
    pp_latency_s: np.ndarray | float = 0.0  # sum of one-way latencies over those boundaries
    # (plans, hops): the stage boundaries after each WAN crossing of a pipeline, in its order
    # (-1 past its last), which its fill and drain depend on; -1: not known
    pp_after_crossings: np.ndarray | float = -1.0
    # (plans, hops): every crossing of a pipeline (each link's narrower direction) and its flow
    # rate, padded with inf; the fill and drain send a micro-batch over each at its own rate.
    # nan where not known: the slowest crossing then stands for each
    pp_crossing_gbps: np.ndarray | float = np.nan
    pp_crossing_flow_gbps: np.ndarray | float = np.nan
    dp_domains: np.ndarray | float = 1.0  # domains each data-parallel group spans
    dp_gbps: np.ndarray | float = np.inf  # narrowest link of the cross-domain ring
    dp_rtt_s: np.ndarray | float = 0.0  # largest RTT on that ring
    dp_flat: np.ndarray | float = 0.0  # 1: one flat ring over every rank, no reduction inside
    # 1 where the link figures above are what one pair of nodes gets (a cloud's per-VM cap):
    # the job's node pairs across such a link each get it, so its share grows with them
    pp_per_node: np.ndarray | float = 0.0
    dp_per_node: np.ndarray | float = 0.0
    # what one connection between two accelerators gets across those links (a cloud caps a
    # TCP flow well below its VM's rate): rings of few connections cannot fill a fast link
    pp_flow_gbps: np.ndarray | float = np.inf
    dp_flow_gbps: np.ndarray | float = np.inf
    # of the bytes sent between domains, the share that leaves their data centre: the rest
    # rides a mixed domain's own network between its pools, timed but not WAN traffic
    offsite_share: np.ndarray | float = 1.0

    def with_(self, **changes) -> WanUse:
        return replace(self, **changes)


@dataclass(frozen=True)
class Stack:
    """What the training software does: the features that change speed, not the math."""

    flash_attention: bool = True
    sequence_parallel: bool = True
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = False
    grad_reduce_bytes: int = 2  # bf16 gradient reduction (Megatron-Core default)
    sharded: bool = False  # FSDP: parameters, gradients and optimizer state always sharded
    memory_savers: bool = True  # a distributed optimizer and recomputation, when memory is short
    # DiLoCo's outer sync streamed behind the next inner steps (Streaming DiLoCo), or taken in
    # the step that syncs, every rank waiting for it
    overlap_outer_sync: bool = True
    # Megatron's fused scale-mask-softmax kernel (16-bit only: in fp32 it runs unfused, as
    # separate masked_fill, softmax and dropout kernels over the attention scores)
    fused_softmax: bool = True
    # Megatron's pipeline exchanges (a send and a receive at once, waited for in plain 1F1B,
    # hidden behind compute in the interleaved schedule, which posts them early); False:
    # blocking calls, each waited for (DeepSpeed's pipeline engine)
    overlap_p2p: bool = True
    # data-parallel gradients reduced inside each domain first (Megatron's rank order); False:
    # one flat NCCL ring over every replica, as a framework that sees only one group runs it
    hierarchical_dp: bool = True
    # bytes per parameter held beyond weights, gradients and optimizer state: DeepSpeed's
    # flattened all-reduce buffer (4) and the copies its engine makes at start (4), as Sailor
    # counts them (sailor/Planner/simulations/runtime_simulator.py, check_config_fits)
    extra_state_bytes: float = 0.0
    # gradients all-reduced in buckets of this many elements (each bucket its own ring);
    # inf: one message stream for them all
    grad_bucket_elems: float = float("inf")

    @classmethod
    def preset(cls, name: str) -> Stack:
        if name not in PRESETS:
            raise ValueError(f"unknown software stack {name!r}; known: {', '.join(STACKS)}")
        return PRESETS[name]


# Stacks that differ from another only by a mechanism the model has (TP communication
# overlapped): they share its constants, and calibrate with it.
VARIANT_OF = {"megatron-core-tp-overlap": "megatron-core", "fsdp2-async-tp": "fsdp2"}
# Each stack, by what it does unlike Megatron-Core's defaults (Stack's)
PRESETS: dict[str, Stack] = {
    "megatron-core": Stack(),
    "megatron-core-tp-overlap": Stack(tp_comm_overlap=True),
    # Korthikanti et al. 2022: sequence parallelism added, still no flash attention.
    "megatron-2022": Stack(
        flash_attention=False,
        overlap_grad_reduce=False,
        overlap_param_gather=False,
    ),
    # Narayanan et al. 2021: fused softmax but no flash attention, no sequence parallelism,
    # gradient all-reduce after the backward pass.
    "megatron-2021": Stack(
        flash_attention=False,
        sequence_parallel=False,
        overlap_grad_reduce=False,
        overlap_param_gather=False,
    ),
    # PyTorch FSDP (ZeRO-3) with flash attention, no tensor parallelism to split by.
    "fsdp": Stack(sequence_parallel=False, sharded=True),
    # PyTorch FSDP2 as TorchTitan runs it: per-parameter sharding (ZeRO-3), sequence
    # parallelism with its tensor parallelism, gradients reduced in fp32 (its default
    # mixed-precision policy); compiled (torch.compile) or eager, which differ in their
    # constants, not their mechanisms.
    "fsdp2": Stack(grad_reduce_bytes=4, sharded=True),
    "fsdp2-eager": Stack(grad_reduce_bytes=4, sharded=True),
    # with asynchronous tensor parallelism: TP communication overlapped with its GEMMs
    "fsdp2-async-tp": Stack(grad_reduce_bytes=4, tp_comm_overlap=True, sharded=True),
    # Megatron-DeepSpeed with DeepSpeed's engine and ZeRO-0, as Sailor trains (its
    # ae_scripts/clariden_scripts/run_opt.slurm): no flash attention or sequence parallelism,
    # one fp32 all-reduce after the last backward pass over a flat ring, blocking pipeline
    # sends, every state on every rank, no recomputation.
    "megatron-deepspeed": Stack(
        flash_attention=False,
        sequence_parallel=False,
        overlap_grad_reduce=False,
        overlap_param_gather=False,
        grad_reduce_bytes=4,
        memory_savers=False,
        overlap_outer_sync=False,
        overlap_p2p=False,
        hierarchical_dp=False,
        extra_state_bytes=8.0,
        grad_bucket_elems=5e8,  # allreduce_bucket_size
    ),
    # A plain data-parallel loop, as the live runner trains: whole optimizer state on every
    # rank, no recomputation, one fp32 gradient reduction after the backward pass, DiLoCo's
    # outer average in the step that syncs.
    "plain-dp": Stack(
        sequence_parallel=False,
        overlap_grad_reduce=False,
        overlap_param_gather=False,
        grad_reduce_bytes=4,
        memory_savers=False,
        overlap_outer_sync=False,
    ),
}
STACKS = tuple(PRESETS)
