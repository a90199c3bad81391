"""A plan batch's degrees as float arrays, and the counts both the step time and the memory
follow from: micro-batches a replica, layers and parameters a stage, the width of its numbers."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from xdscheduler.catalog import ModelArch
from xdscheduler.costmodel.plan import DTYPES, PlanBatch


def floats(x) -> np.ndarray:
    """A count or array of counts as float64, as every quantity of the models is."""
    return np.asarray(x, dtype=np.float64)


@dataclass(frozen=True)
class Shape:
    """A plan batch's degrees and batch as float arrays, and what follows from them."""

    dp: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    vp: np.ndarray
    mb: np.ndarray
    batch: np.ndarray
    s: float  # sequence length

    @classmethod
    def of(cls, plans: PlanBatch, global_batch, s: float) -> Shape:
        dp, tp, pp, cp, vp, mb = (
            floats(x) for x in (plans.dp, plans.tp, plans.pp, plans.cp, plans.vp, plans.micro_batch)
        )
        return cls(dp, tp, pp, cp, vp, mb, floats(global_batch), s)

    @cached_property  # asked by every part of an estimate
    def micro_batches(self) -> np.ndarray:
        return replica_micro_batches(self.batch, self.dp, self.mb)

    @cached_property
    def tok(self) -> np.ndarray:
        """Tokens of one micro-batch on one GPU."""
        return self.mb * self.s / self.cp


def stage_layers(layers: int, pp) -> tuple[np.ndarray, np.ndarray]:
    """Layers of the heaviest pipeline stage and of the last one.

    Where `pp` divides the layers every stage has as many. Otherwise, as Megatron's
    first/last-stage options allow, stages get ceil(layers/pp) and the shortfall comes off the
    ends, the last stage (which also computes the output layer) first: 126 layers over 16
    stages are 7 + 14 x 8 + 7.
    """
    pp = floats(pp)
    heaviest = np.ceil(layers / pp - 1e-9)
    return heaviest, np.where(heaviest * pp > layers, heaviest - 1, heaviest)


def replica_micro_batches(batch, dp, mb):
    """Micro-batches of the busiest data-parallel replica: a global batch that `dp` does not
    divide leaves some replicas one sample more (ceil(batch/dp)), and the step waits for
    them."""
    return np.ceil(np.ceil(batch / dp - 1e-9) / mb - 1e-9)


def wide_precision(plans: PlanBatch) -> np.ndarray:
    """Plans that compute in 32 bits (TF32 or FP32): 4-byte weights, activations, gradients."""
    return np.asarray(plans.precision) >= DTYPES.index("tf32")


def stage_params(arch: ModelArch, pp):
    """Parameters of the heaviest pipeline stage: its layers plus one embedding table."""
    return stage_layers(arch.layers, pp)[0] * arch.params_per_layer + np.where(
        pp > 1, arch.vocab * arch.hidden, arch.embedding_params
    )
