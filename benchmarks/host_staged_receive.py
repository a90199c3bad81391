"""What Sailor's pipeline receive costs: an activation rebuilt in host memory, copied to the GPU.

Sailor's measured runs use its own DeepSpeed pipeline engine. Its receiver rebuilds each
activation (and each activation gradient) from the tensor-parallel slices it was sent with
`reconstruct_tensor`: a host sync for the slices' metadata, then per slice a clone, a host
sync and two `.item()`s, and the whole tensor zero-filled in host memory and copied to the GPU
from pageable memory. Upstream DeepSpeed allocates the buffer on the GPU. This times both, as
plain PyTorch, at the activation sizes of Sailor's runs (micro-batch x 2048 tokens x hidden,
fp32, in `tp` slices); the ratio is Sailor's receive over upstream's, measured in the same run.

    python -m benchmarks.host_staged_receive [--tp 4] [--repeats 30] [--out FILE]

`--out` writes the measurements as JSON; benchmarks/gpu_runs/host_staged_receive.json holds
those of one H100, which `benchmarks.sailor_side_by_side` reads to show what the receive would
add to Sailor's runs (without a GPU).

Needs a CUDA GPU (exits 2 with a message without one). The host matters as much as the GPU:
the table names both.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np

from benchmarks._table import print_table, time_calls

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
    """Median milliseconds of fn() to the GPU's end of it, after 3 warm-ups."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return float(np.median(time_calls(lambda: (fn(), torch.cuda.synchronize()), repeats)))


def parts_ms(torch, num_el: int, repeats: int) -> dict[str, float]:
    """Where Sailor's receive spends its time: the host's zero-fill, the copy from pageable
    memory, and (what pinning would give) the same copy from pinned memory."""
    pageable = torch.zeros(num_el)
    pinned = torch.zeros(num_el).pin_memory()
    return {
        "fill_ms": timed_ms(torch, lambda: torch.zeros(num_el), repeats),
        "pageable_copy_ms": timed_ms(torch, lambda: pageable.cuda(), repeats),
        "pinned_copy_ms": timed_ms(torch, lambda: pinned.to("cuda", non_blocking=True), repeats),
    }


def measure(torch, tp: int, repeats: int) -> dict:
    """Every activation size of Sailor's runs: its receive, upstream's, and the parts."""
    rows = []
    for model, hidden, micro_batches in SHAPES:
        for mb in micro_batches:
            num_el = mb * SEQ * hidden
            parts = slices(torch, num_el, tp)
            rows.append(
                {
                    "model": model,
                    "micro_batch": mb,
                    "mib": num_el * 4 / 2**20,
                    "sailor_ms": timed_ms(torch, lambda p=parts: sailor_receive(torch, p), repeats),
                    "upstream_ms": timed_ms(
                        torch, lambda p=parts: upstream_receive(torch, p), repeats
                    ),
                    **parts_ms(torch, num_el, repeats),
                }
            )
    one = torch.ones(8, device="cuda")
    return {
        "gpu": torch.cuda.get_device_name(),
        "host": host_cpu(),
        "torch": torch.__version__,
        "tp": tp,
        "repeats": repeats,
        "host_sync_ms": timed_ms(torch, lambda: one.to("cpu"), 10 * repeats),
        "rows": rows,
    }


def report(m: dict) -> None:
    rows = m["rows"]
    print_table(
        f"Sailor's pipeline receive against upstream's, {m['gpu']} on {m['host']}",
        ["model", "micro-batch", "MiB", "Sailor's receive (ms)", "upstream (ms)", "ratio"],
        [
            [
                r["model"],
                r["micro_batch"],
                f"{r['mib']:.0f}",
                f"{r['sailor_ms']:.2f}",
                f"{r['upstream_ms']:.3f}",
                f"{r['sailor_ms'] / r['upstream_ms']:.0f}x",
            ]
            for r in rows
        ],
        f"median of {m['repeats']} receives of {m['tp']} slices each, after 3 warm-ups; "
        f"torch {m['torch']}",
    )
    print()
    print_table(
        "Where it goes: the host's zero-fill, the copy from pageable memory (and from pinned)",
        ["MiB", "zero-fill (ms)", "pageable copy (ms)", "pinned copy (ms)"],
        [
            [
                f"{r['mib']:.0f}",
                f"{r['fill_ms']:.2f}",
                f"{r['pageable_copy_ms']:.2f}",
                f"{r['pinned_copy_ms']:.2f}",
            ]
            for r in sorted(rows, key=lambda r: r["mib"])
        ],
        f"one host sync (a GPU tensor's .to('cpu')): {m['host_sync_ms'] * 1e3:.0f} us; "
        f"Sailor's receive makes {1 + m['tp']} of them",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=4, help="slices per activation (Sailor's runs: 4)")
    ap.add_argument("--repeats", type=int, default=30, help="timed receives per size")
    ap.add_argument("--out", type=Path, help="also write the measurements here (JSON)")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("host_staged_receive: needs PyTorch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("host_staged_receive: needs a CUDA GPU; none is visible here", file=sys.stderr)
        return 2
    m = measure(torch, args.tp, args.repeats)
    report(m)
    if args.out:
        args.out.write_text(json.dumps(m, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
