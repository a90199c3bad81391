"""`xds profile`: measure what each domain's accelerators really do, as Sailor profiles before it
plans, and write catalog entries the cost model reads.

On every accelerator of a domain at once (a task per accelerator, so each runs as it would under
a job that fills the domain): GEMM throughput per dtype and shape, and memory bandwidth (a large
copy). Across every link: goodput both ways (`probe`). The figures are the best GEMM rate of
each dtype (the model's GEMM efficiency applies on top, as it does to a datasheet's peak), the
copy rate as memory bandwidth, and the rest of the entry from the accelerator the domain names.
"""

from __future__ import annotations

import time
from functools import partial

import ray

from xdscheduler.catalog import AcceleratorEntry
from xdscheduler.live.cluster import DOMAIN_LABEL
from xdscheduler.scenario import Scenario

SHAPES = (256, 512, 1024)
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


@ray.remote(num_cpus=1)
def measure_accelerator(seconds: float) -> dict:
    """This worker's GEMM TFLOP/s per dtype and size, and copy GB/s, on one thread."""
    import torch

    torch.set_num_threads(1)
    gemm = {}
    for name, dtype in DTYPES.items():
        for n in SHAPES:
            a, b = (torch.randn(n, n, dtype=getattr(torch, dtype)) for _ in range(2))
            gemm[f"{name}_{n}"] = 2 * n**3 * per_second(partial(torch.matmul, a, b), seconds) / 1e12
    src = torch.empty(32 * 2**20 // 4)
    dst = torch.empty_like(src)
    copy_gbs = 2 * src.numel() * 4 * per_second(lambda: dst.copy_(src), seconds) / 1e9
    return {"node": ray.util.get_node_ip_address(), "gemm_tflops": gemm,
            "memory_gbs": copy_gbs}


def per_second(op, seconds: float) -> float:
    """How many times a second `op` runs, over `seconds` after one warm-up run."""
    op()
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        op()
        runs += 1
    return runs / (time.perf_counter() - start)


def measure_domain(name: str, accelerators: int, seconds: float) -> dict:
    """The median over the domain's accelerators, all measured at once."""
    import numpy as np

    runs = ray.get([measure_accelerator.options(label_selector={DOMAIN_LABEL: name})
                    .remote(seconds) for _ in range(accelerators)], timeout=600)
    keys = runs[0]["gemm_tflops"]
    return {"domain": name, "accelerators": accelerators,
            "gemm_tflops": {k: float(np.median([r["gemm_tflops"][k] for r in runs]))
                            for k in keys},
            "memory_gbs": float(np.median([r["memory_gbs"] for r in runs]))}


def entry(measured: dict, scn: Scenario, name: str) -> AcceleratorEntry:
    """A catalog entry: the measured figures over those of the domain's accelerator."""
    domain = next(d for d in scn.domains if d.name == measured["domain"])
    base = domain.accelerator
    best = {dt: max(v for k, v in measured["gemm_tflops"].items() if k.startswith(dt))
            for dt in DTYPES}
    shapes = ", ".join(f"{k} {v:.3f}" for k, v in measured["gemm_tflops"].items())
    return AcceleratorEntry(
        name=name, vendor=base.vendor, bf16_tflops=round(best["bf16"], 4),
        fp32_tflops=round(best["fp32"], 4), tf32_tflops=round(best["fp32"], 4),
        memory_gib=base.memory_gib, memory_gbs=round(measured["memory_gbs"], 2),
        scaleup_gbs=base.scaleup_gbs, scaleout_gbps=base.scaleout_gbps,
        gpus_per_node=domain.gpus_per_node, power_w=base.power_w,
        source=f"xds profile of domain {domain.name} ({measured['accelerators']} accelerators "
               f"at once, one thread each) on {time.strftime('%Y-%m-%d')}: GEMM TFLOP/s "
               f"{shapes}; copy {measured['memory_gbs']:.1f} GB/s; memory, links, node shape "
               f"and power from {base.name}")
