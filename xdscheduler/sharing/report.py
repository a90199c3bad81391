"""The packing benchmark's report: a headline, a table, the curves (CSV) and their plot."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen: render to files
import matplotlib.pyplot as plt

from xdscheduler.sharing.inflation import GRID, Curve, mean_curves
from xdscheduler.textfile import output_file, output_folder, write_atomic


def finite(x):
    """JSON has no NaN: a half-width of one seed is null."""
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _change(entry: dict, peer: str, fmt: str = "+.1f", sign: int = 1, unit: str = "") -> str:
    """The entry's change against `peer` (paired by seed) with its 95% CI, in per cent; "–"
    where it has none."""
    key = "change_vs_" + peer.replace("-", "_")
    if entry.get(key) is None:  # not compared, or against a peer that left nothing (0 / 0)
        return "–"
    ci = entry[key + "_ci95"]
    return f"{sign * 100 * entry[key]:{fmt}}{unit}" + (
        "" if ci is None else f" ± {100 * ci:.1f}{unit}"
    )


def headline(packers: dict, ours: str) -> str:
    """Who leaves the fewest accelerators unallocated, against best-fit (the usual packer) and
    FGD (the strongest published), by how much; a packer run alone is the fewest of nothing."""
    if len(packers) == 1:
        ((name, entry),) = packers.items()
        return (
            f"{name} alone (no other packer compared) leaves "
            f"{100 * entry['unallocated_share_at_capacity']:.2f}% of the accelerators "
            "unallocated when the arrived workload reaches capacity."
        )
    best = min(packers, key=lambda p: packers[p]["unallocated_share_at_capacity"])
    b = packers[best]
    line = (
        f"{best}{' (ours)' if best == ours else ''} leaves the fewest accelerators "
        f"unallocated when the arrived workload reaches capacity: "
        f"{100 * b['unallocated_share_at_capacity']:.2f}%"
    )
    against = [p for p in ("best-fit", "fgd") if p in packers and p != best]
    if against:
        line += ", " + " and ".join(
            f"{_change(b, p, '.1f', -1, '%')} fewer than {p}" for p in against
        )
        line += " (95% CIs, paired by seed)" if b["seeds"] > 1 else " (one seed, no interval)"
    if ours in packers and best != ours:
        line += f"; ours ({ours}): {100 * packers[ours]['unallocated_share_at_capacity']:.2f}%"
    return line + "."


def table(packers: dict) -> str:
    rows = [
        "| packer | unallocated at capacity (%) | vs best-fit (%) | vs fgd (%) | "
        "pods turned away | s a run |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    order = sorted(packers, key=lambda p: packers[p]["unallocated_share_at_capacity"])
    for p in order:
        e = packers[p]
        ci = "" if e["ci95"] is None else f" ± {100 * e['ci95']:.2f}"
        changes = " | ".join(_change(e, peer) for peer in ("best-fit", "fgd"))
        rows.append(
            f"| {p} | {100 * e['unallocated_share_at_capacity']:.2f}{ci} | {changes} | "
            f"{e['pods_turned_away']:.0f} | {e['seconds_per_run']:.1f} |"
        )
    return "\n".join(rows)


def plot(curves: list[Curve], path: Path, title: str) -> None:
    """Unallocated share against arrived workload per packer: the whole run, and near capacity
    (where packers differ)."""
    means = mean_curves(curves)
    fig, (whole, near) = plt.subplots(1, 2, figsize=(11, 4.5))
    zoom = (GRID >= 0.8) & (GRID <= 1.2)
    for packer in means.columns:
        whole.plot(100 * GRID, 100 * means[packer], label=packer)
        near.plot(100 * GRID[zoom], 100 * means[packer][zoom], label=packer, marker=".")
    for ax in (whole, near):
        ax.axvline(100, color="0.5", linestyle="--", linewidth=1)
        ax.set(
            xlabel="arrived workload (% of the cluster's GPUs)",
            ylabel="GPUs unallocated (% of the cluster's)",
        )
        ax.grid(alpha=0.3)
    whole.set(title=title, ylim=(0, 102))
    near.set(title="near capacity", ylim=(0, None))
    near.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


FILES = tuple(f"share_bench.{kind}" for kind in ("json", "md", "csv", "png"))


def check_out(out: Path) -> Path:
    """The output folder, made, and every file `write` writes there checked writable (before
    the bench, not after it)."""
    out = output_folder(out)
    for name in FILES:
        output_file(out / name)
    return out


def write(out: Path, curves: list[Curve], result: dict) -> None:
    """share_bench.json, .md, .csv (mean curve per packer) and .png into `out`."""
    out = check_out(out)
    write_atomic(out / "share_bench.json", json.dumps(finite(result), indent=2))
    write_atomic(
        out / "share_bench.md",
        result["headline"]
        + "\n\n"
        + result["setup"]
        + "\n\n"
        + table(finite(result["packers"]))
        + "\n",
    )
    frame = mean_curves(curves).rename_axis("arrived_share").reset_index()
    write_atomic(out / "share_bench.csv", frame.to_csv(index=False))
    write_atomic(
        out / "share_bench.png",
        lambda p: plot(curves, p, f"openb {result['trace']}: {result['seeds']} seeds"),
    )
