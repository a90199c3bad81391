"""Dense GEMM throughput per precision, and copy bandwidth, on this machine's accelerator,
against the catalog's rated figures and what the step-time model assumes of them.

The model rates a large GEMM at `gemm_efficiency` (`fp8_gemm_efficiency` for FP8) of the
catalog's dense peak; this measures the rate a plain `torch.matmul` (`torch._scaled_mm` for
FP8) reaches, so the constant can be checked against the hardware rather than only fitted to
published runs. The last column is the model's rate over the measured one (above 1: the model
is optimistic for that GEMM).

    python -m benchmarks.gemm_rates [--device cuda|cpu] [--accelerator NAME]
        [--sizes 4096,8192] [--seconds 0.5]

On a GPU the catalog entry is found from the device's name (`NVIDIA H100 80GB HBM3`: H100);
`--accelerator` names it otherwise. Shapes: square GEMMs of `--sizes`, and on a GPU the MLP
up-projection of Llama 3 70B for 8192 tokens (8192 x 8192 x 28672).
"""

from __future__ import annotations

import argparse
import sys

from benchmarks._table import print_table
from xdscheduler import catalog
from xdscheduler.costmodel.constants import DEFAULT
from xdscheduler.errors import UserError
from xdscheduler.timing import per_second

# precision -> (the catalog's field for its dense peak, torch dtype name, TF32 allowed)
PRECISIONS = {
    "fp32": ("fp32_tflops", "float32", False),
    "tf32": ("tf32_tflops", "float32", True),
    "bf16": ("bf16_tflops", "bfloat16", None),
    "fp16": ("bf16_tflops", "float16", None),
    "fp8": ("fp8_tflops", "float8_e4m3fn", None),
}
LLAMA70B_MLP = (8192, 8192, 28672)  # tokens x hidden x FFN hidden
COPY_BYTES = {"cuda": 2 * 2**30, "cpu": 64 * 2**20}


def gemm_op(torch, precision: str, shape: tuple[int, int, int], device: str):
    """A GEMM of `shape` (m, k, n) in `precision`, as a callable."""
    _, dtype, tf32 = PRECISIONS[precision]
    m, k, n = shape
    if precision == "fp8":
        a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()  # column-major
        one = torch.tensor(1.0, device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    a = torch.randn(m, k, device=device, dtype=getattr(torch, dtype))
    b = torch.randn(k, n, device=device, dtype=getattr(torch, dtype))
    if tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return lambda: torch.matmul(a, b)


def rows(device: str, acc, sizes: list[int], seconds: float) -> list[list]:
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    shapes = [(s, s, s) for s in sizes] + ([LLAMA70B_MLP] if device == "cuda" else [])
    out: list[list] = []
    for precision, (field, _, _) in PRECISIONS.items():
        rated = getattr(acc, field, None) if acc else None
        eff = DEFAULT.fp8_gemm_efficiency if precision == "fp8" else DEFAULT.gemm_efficiency
        for shape in shapes:
            label = "x".join(map(str, shape))
            try:
                tflops = (
                    2
                    * shape[0]
                    * shape[1]
                    * shape[2]
                    * per_second(gemm_op(torch, precision, shape, device), seconds, sync)
                    / 1e12
                )
            except (RuntimeError, TypeError) as err:  # a precision this device lacks
                out.append(
                    [precision, label, f"not run: {str(err).splitlines()[0][:60]}", "", "", ""]
                )
                continue
            out.append(
                [
                    precision,
                    label,
                    tflops,
                    rated or "",
                    tflops / rated if rated else "",
                    eff * rated / tflops if rated else "",
                ]
            )
    copy = torch.empty(COPY_BYTES[device] // 4, device=device)
    dst = torch.empty_like(copy)
    gbs = 2 * copy.numel() * 4 * per_second(lambda: dst.copy_(copy), seconds, sync) / 1e9
    memory = getattr(acc, "memory_gbs", None) if acc else None
    out.append(
        [
            "copy",
            f"{COPY_BYTES[device] >> 20} MiB",
            gbs,
            memory or "",
            gbs / memory if memory else "",
            "",
        ]
    )
    return out


def find_accelerator(device: str, name: str | None):
    """The catalog entry named, or found from the GPU's name; None on a CPU without a name."""
    if name:
        return catalog.accelerator(name)
    if device != "cuda":
        return None
    import torch

    seen = torch.cuda.get_device_name(0)
    for token in seen.replace("NVIDIA", "").split():
        try:
            return catalog.accelerator(token)
        except UserError:
            continue
    raise UserError(f"no catalog entry found for the device {seen!r}: name one with --accelerator")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.gemm_rates",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--device", choices=("cuda", "cpu"), default=None, help="default: cuda where there is one"
    )
    ap.add_argument("--accelerator", help="the catalog entry to compare with")
    ap.add_argument("--sizes", default="4096,8192", help="square GEMM sizes, comma-separated")
    ap.add_argument("--seconds", type=float, default=0.5, help="per measurement (0.01-60)")
    args = ap.parse_args(argv)
    try:
        import torch

        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device == "cuda" and not torch.cuda.is_available():
            raise UserError("--device cuda: torch sees no CUDA device here")
        try:
            sizes = [int(s) for s in args.sizes.split(",")]
        except ValueError:
            raise UserError(f"--sizes {args.sizes!r}: give sizes like 4096,8192") from None
        if not sizes or min(sizes) < 16 or max(sizes) > 65536:
            raise UserError(f"--sizes {args.sizes!r}: each 16-65536")
        if not 0.01 <= args.seconds <= 60:
            raise UserError(f"--seconds {args.seconds:g}: give 0.01 to 60")
        acc = find_accelerator(device, args.accelerator)
    except UserError as err:
        print(f"gemm_rates: error: {err}", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    print_table(
        f"Dense GEMM TFLOP/s and copy GB/s on {name} (torch {torch.__version__}), against "
        f"{acc.name if acc else 'no catalog entry'}",
        ["precision", "m x k x n", "measured", "rated", "measured/rated", "model/measured"],
        rows(device, acc, sizes, args.seconds),
        f"the model rates a large GEMM at {DEFAULT.gemm_efficiency:.1%} of rated "
        f"({DEFAULT.fp8_gemm_efficiency:.1%} in FP8); fp16 is compared with the BF16 peak, "
        "which NVIDIA rates the same",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
