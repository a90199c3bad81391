"""How fast an operation runs: the rate `xds profile` and `benchmarks/gemm_rates` measure."""

from __future__ import annotations

import time


def per_second(op, seconds: float, sync=lambda: None) -> float:
    """How many times a second `op` runs, over at least `seconds` after one warm-up run.
    `sync` waits for the work `op` queued (a GPU's stream); the clock is read after it."""
    op()
    sync()
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        op()
        runs += 1
    sync()
    return runs / (time.perf_counter() - start)
