"""Print a benchmark's one table, aligned, with a title and a source line."""

from __future__ import annotations

import time

import numpy as np


def time_calls(fn, repeats: int, unit_s: float = 1e-3) -> np.ndarray:
    """Wall time of each of `repeats` calls of fn(), in `unit_s` (default milliseconds)."""
    out = np.empty(repeats)
    for i in range(repeats):
        start = time.perf_counter()
        fn()
        out[i] = (time.perf_counter() - start) / unit_s
    return out


def print_table(title: str, header: list[str], rows: list[list], note: str = "") -> None:
    cells = [header] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(title)
    for i, row in enumerate(cells):
        print(
            "  ".join(
                c.rjust(w) if j else c.ljust(w)
                for j, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if i == 0:
            print("  ".join("-" * w for w in widths))
    if note:
        print(note)


def _fmt(x) -> str:
    if isinstance(x, float):
        if abs(x) >= 1e5:
            return f"{x:,.0f}"
        return f"{x:.3g}" if abs(x) < 10 else f"{x:,.1f}"
    return str(x)
