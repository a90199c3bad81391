"""Plan evaluations per second: the vectorised step-time model against a per-plan loop.

Run: python -m benchmarks.bench_costmodel [--plans N] [--loop-plans N]
Both are measured in this run, on one core: numpy's element-wise kernels are single-threaded
and the model calls no BLAS.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks._table import print_table
from xdscheduler import catalog
from xdscheduler.costmodel.plan import Hardware, PlanBatch
from xdscheduler.costmodel.steptime import estimate


def random_plans(n: int, seed: int = 0) -> PlanBatch:
    rng = np.random.default_rng(seed)
    return PlanBatch(
        dp=rng.choice([1, 2, 4, 8, 16, 32], n),
        tp=rng.choice([1, 2, 4, 8], n),
        pp=rng.choice([1, 2, 4, 5, 8, 10, 16], n),
        cp=rng.choice([1, 2], n),
        vp=rng.choice([1, 2], n),
        micro_batch=rng.choice([1, 2, 4], n),
        zero=rng.integers(0, 4, n),
        recompute=rng.integers(0, 3, n),
        precision=np.where(rng.random(n) < 0.3, 1, 0),
        diloco_h=np.zeros(n, dtype=int),
    )


def best_rate(fn, n: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return n / min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=1_000_000)
    parser.add_argument("--loop-plans", type=int, default=2_000)
    args = parser.parse_args()
    arch = catalog.model("llama2-70b")
    hw = Hardware.of(catalog.accelerator("H100-SXM"))
    plans = random_plans(args.plans)
    singles = [plans.take(np.array([i])) for i in range(args.loop_plans)]

    vectorised = best_rate(lambda: estimate(arch, 1024, plans, hw), args.plans, 3)
    loop = best_rate(lambda: [estimate(arch, 1024, p, hw) for p in singles], args.loop_plans, 2)
    print_table(
        f"Step-time model, {arch.name} on H100-SXM, one core",
        ["method", "plans", "plans/s", "vs loop"],
        [
            ["per-plan Python loop (baseline)", args.loop_plans, loop, 1.0],
            ["vectorised numpy", args.plans, vectorised, vectorised / loop],
        ],
        note=f"target: >= 1,000,000 plans/s vectorised -> "
        f"{'met' if vectorised >= 1e6 else 'NOT met'}",
    )


if __name__ == "__main__":
    main()
