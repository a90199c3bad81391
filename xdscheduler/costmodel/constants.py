"""The few fitted constants of the step-time model, each a physical quantity.

Fitted by `python -m benchmarks.calibrate --fit` on every other published Megatron-LM/NeMo
configuration and checked on the rest; `benchmarks/calibration.md` shows the comparison.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Calibration:
    gemm_efficiency: float = 0.766
    """Fraction of rated BF16 peak that a large, compute-bound GEMM sustains."""

    fp8_gemm_efficiency: float = 0.773
    """Fraction of rated FP8 peak that a large FP8 GEMM sustains (scaling and casts included)."""

    attention_efficiency: float = 0.325
    """Fraction of rated BF16 peak that fused (flash) attention sustains, forward and backward."""

    memory_passes: float = 3.56
    """Bytes moved by element-wise kernels per byte of stored activation, forward pass."""

    collective_efficiency: float = 0.80
    """Bus bandwidth over link bandwidth for NCCL collectives; nccl-tests on DGX A100/H100
    reach 230-240 of 300 GB/s and about 360 of 450 GB/s on NVLink."""

    wan_efficiency: float = 0.90
    """Goodput over nominal bandwidth on a WAN link with many parallel streams."""

    kernel_overhead_s: float = 7.8e-5
    """Fixed time per transformer layer and micro-batch (launches, synchronisation)."""


DEFAULT = Calibration()
