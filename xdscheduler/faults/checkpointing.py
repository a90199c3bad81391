"""Checkpoint intervals from a job's failure rate and checkpoint cost, and the work lost.

Young (1974), "A first order approximation to the optimum checkpoint interval":
    tau = sqrt(2·C·M)
Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps":
    tau = sqrt(2·C·M)·[1 + (1/3)·sqrt(C/(2M)) + (1/9)·(C/(2M))] - C   for C < 2M,
    tau = M                                                             for C ≥ 2M,
with C the time to write a checkpoint and M the mean time between failures of the job. A failure
lands uniformly within a segment of compute plus checkpoint, so on average half of it
(tau + C)/2 is lost, plus the restart time R.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdscheduler.errors import UserError


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    _check(checkpoint_s, mtbf_s)
    return math.sqrt(2 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    _check(checkpoint_s, mtbf_s)
    if checkpoint_s >= 2 * mtbf_s:
        return mtbf_s
    x = checkpoint_s / (2 * mtbf_s)
    return math.sqrt(2 * checkpoint_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - checkpoint_s


# Mixed-precision Adam: bf16 weights (2) + fp32 master weights (4) + two fp32 moments (8).
CHECKPOINT_BYTES_PER_PARAM = 14.0


def checkpoint_cost_s(
    params: float, write_gbs: float, bytes_per_param: float = CHECKPOINT_BYTES_PER_PARAM
) -> float:
    """Seconds to write a full training state at an aggregate write bandwidth (GB/s)."""
    if params <= 0 or write_gbs <= 0:
        raise UserError(f"need params and write bandwidth > 0, got {params}, {write_gbs}")
    return params * bytes_per_param / 1e9 / write_gbs


def job_mtbf_s(nodes: int, node_failures_per_hour: float) -> float:
    """Any node's failure interrupts a synchronous job: rates add."""
    if nodes < 1 or node_failures_per_hour <= 0:
        raise UserError(
            f"need nodes ≥ 1 and a positive failure rate, got {nodes}, {node_failures_per_hour}"
        )
    return 3600.0 / (nodes * node_failures_per_hour)


def expected_loss_per_failure_s(
    interval_s: float, checkpoint_s: float, restart_s: float = 0.0
) -> float:
    """Work redone plus restart after one failure: half a segment on average, plus R."""
    return (interval_s + checkpoint_s) / 2 + restart_s


@dataclass(frozen=True)
class CheckpointPlan:
    interval_s: float
    young_s: float
    mtbf_s: float
    overhead_fraction: float  # checkpoint writes + expected losses, per second of training
    expected_lost_s_per_failure: float

    def to_json(self) -> dict:
        return self.__dict__.copy()


def plan_checkpoints(
    nodes: int,
    checkpoint_s: float,
    restart_s: float = 300.0,
    node_failures_per_hour: float | None = None,
) -> CheckpointPlan:
    """Daly's interval for a job on `nodes` nodes (default rate: Llama 3's, per node)."""
    from xdscheduler.faults.failure_model import NODE_FAILURE_PER_HOUR

    rate = NODE_FAILURE_PER_HOUR if node_failures_per_hour is None else node_failures_per_hour
    m = job_mtbf_s(nodes, rate)
    tau = daly_interval_s(checkpoint_s, m)
    lost = expected_loss_per_failure_s(tau, checkpoint_s, restart_s)
    overhead = checkpoint_s / tau + lost / m
    return CheckpointPlan(tau, young_interval_s(checkpoint_s, m), m, overhead, lost)


def _check(checkpoint_s: float, mtbf_s: float) -> None:
    if checkpoint_s <= 0 or mtbf_s <= 0:
        raise UserError(f"checkpoint time and MTBF must be positive, got {checkpoint_s}, {mtbf_s}")
