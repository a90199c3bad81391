"""What Sailor's pipeline receive costs: an activation rebuilt in host memory, copied to the GPU.

Sailor's measured runs use its own DeepSpeed pipeline engine. Its receiver rebuilds each
activation (and each activation gradient) from the tensor-parallel slices it was sent with
`reconstruct_tensor`: a host sync for the slices' metadata, then per slice a clone, a host
sync and two `.item()`s, and the whole tensor zero-filled in host memory and copied to the GPU
from pageable memory. Upstream DeepSpeed allocates the buffer on the GPU. This times both, as
plain PyTorch, at the activation sizes of Sailor's runs (micro-batch x 2048 tokens x hidden,
fp32, in `tp` slices); the ratio is Sailor's receive over upstream's, measured in the same run.

    python -m benchmarks.host_staged_receive [--tp 4] [--repeats 30]

Needs a CUDA GPU (exits 2 with a message without one). The host matters as much as the GPU:
the table names both.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

from benchmarks._table import print_table

SEQ = 2048
# (Sailor's model, hidden size, micro-batches its GH200 runs use)
SHAPES = (("OPT-350", 1024, (1, 2, 4, 8)), ("GPT-Neo-2.7", 2560, (1, 4)))


def slices(torch, num_el: int, tp: int, device: str = "cuda") -> list[tuple]:
    """The (metadata, slice) pairs a receiver holds: metadata as Sailor packs it (ndim, shape,
    then the sender's rank and the partition bounds), all on the GPU."""
    shape = [num_el]
    bounds = [num_el * r // tp for r in range(tp + 1)]
    out = []
    for rank in range(tp):
        meta = torch.tensor([len(shape), *shape, 0, rank, *bounds], device=device)
        buf = torch.randn(bounds[rank + 1] - bounds[rank], device=device)
        out.append((meta, buf))
    return out


def sailor_receive(torch, parts: list[tuple], device: str = "cuda"):
    """Sailor's `reconstruct_tensor`, step for step: host syncs, host zero-fill, pageable copy."""
    meta = parts[0][0].to("cpu")
    num_el = int(meta[1 : int(meta[0]) + 1].prod())
    flat = torch.zeros(num_el, dtype=torch.float32).to(device)  # Sailor: .cuda()
    for pair in parts:
        meta_gpu, buf = (t.clone() for t in pair)
        meta = meta_gpu.to("cpu")
        meta = meta[1 + int(meta[0]) :]
        partition = meta[2:]
        rank = int(meta[1])
        start, end = partition[rank], partition[rank + 1]
        flat[start:end].copy_(buf)
        start.item(), end.item()
    return flat


def upstream_receive(torch, parts: list[tuple]):
    """The same slices gathered into a buffer allocated on the GPU, as upstream DeepSpeed does."""
    return torch.cat([buf for _, buf in parts])


def host_cpu() -> str:
    """The host processor's model name, as the kernel reports it."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def timed_ms(torch, fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=4, help="slices per activation (Sailor's runs: 4)")
    ap.add_argument("--repeats", type=int, default=30, help="timed receives per size")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("host_staged_receive: needs PyTorch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("host_staged_receive: needs a CUDA GPU; none is visible here", file=sys.stderr)
        return 2
    rows = []
    for model, hidden, micro_batches in SHAPES:
        for mb in micro_batches:
            parts = slices(torch, mb * SEQ * hidden, args.tp)
            mib = mb * SEQ * hidden * 4 / 2**20
            ours = timed_ms(torch, lambda p=parts: sailor_receive(torch, p), args.repeats)
            base = timed_ms(torch, lambda p=parts: upstream_receive(torch, p), args.repeats)
            rows.append(
                [model, mb, f"{mib:.0f}", f"{ours:.2f}", f"{base:.3f}", f"{ours / base:.0f}x"]
            )
    print_table(
        f"Sailor's pipeline receive against upstream's, {torch.cuda.get_device_name()} "
        f"on {host_cpu()}",
        ["model", "micro-batch", "MiB", "Sailor's receive (ms)", "upstream (ms)", "ratio"],
        rows,
        f"median of {args.repeats} receives of {args.tp} slices each, after 3 warm-ups",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
