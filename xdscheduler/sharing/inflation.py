"""`xds share bench`: the experiment of Weng et al. (ATC'23, section 6.1), packer by packer.

Pods drawn from the trace (with replacement, seeded) arrive one by one on the empty cluster and
never leave, until the GPUs they asked for reach `until` times the cluster's; a pod that fits
nowhere is turned away. After each arrival: the arrived workload (GPUs asked so far over the
cluster's) and the share of the cluster's GPU capacity left unallocated. The figure of merit is
that share when the arrived workload reaches the cluster's capacity (100%): what a packer
strands in fragments and on nodes whose CPU ran out. Every packer of a seed meets the same pods.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import pandas as pd

from xdscheduler.report.compare import mean_ci
from xdscheduler.sharing.fragmentation import Workload
from xdscheduler.sharing.openb import Nodes, Pods
from xdscheduler.sharing.packers import OURS, PACKERS, Cluster, Pod, choose

log = logging.getLogger(__name__)
GRID = np.round(np.arange(0.0, 1.3001, 0.01), 2)  # arrived workload, as a share of capacity


@dataclass(frozen=True)
class Curve:
    """One packer on one seed: unallocated share at each point of GRID it reached."""

    packer: str
    seed: int
    unallocated: np.ndarray  # over GRID (NaN past the end of the run)
    turned_away: int  # pods that fit nowhere
    seconds: float


def inflate(
    nodes: Nodes, pods: Pods, work: Workload, packer: str, seed: int, until: float = 1.2
) -> Curve:
    """One run of the experiment: see the module's docstring."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed)  # the pods drawn: the same for every packer of a seed
    ties = np.random.default_rng([seed, 1])  # the packer's own random choices
    cluster, key = Cluster(nodes, work), PACKERS[packer]
    capacity = cluster.capacity_milli
    arrived, turned_away, points = 0.0, 0, [(0.0, 1.0)]
    demand = pods.gpu_demand * 1000
    while arrived < until * capacity:
        i = int(rng.integers(len(pods)))
        pod = Pod(
            int(pods.cpu[i]),
            int(pods.memory[i]),
            int(pods.num_gpu[i]),
            int(pods.gpu_milli[i]),
            pods.spec[i],
        )
        arrived += demand[i]
        opts = cluster.options(pod)
        if len(opts):
            cluster.place(opts, choose(key, cluster, opts, pod, ties), pod)
        else:
            turned_away += 1
        points.append((arrived / capacity, 1 - cluster.allocated_milli / capacity))
    x, y = np.array(points).T
    # the share left just after the arrivals that brought the workload to each grid point
    at = np.searchsorted(x, GRID, side="left")
    curve = np.where(at < len(y), y[np.minimum(at, len(y) - 1)], np.nan)
    return Curve(packer, seed, curve, turned_away, time.perf_counter() - start)


def _run(args) -> Curve:
    return inflate(*args)


def bench(
    nodes: Nodes,
    pods: Pods,
    packers: list[str],
    seeds: list[int],
    until: float = 1.2,
    workers: int = 1,
) -> list[Curve]:
    """Every packer on every seed, `workers` processes at once; each run logged as it ends."""
    work = Workload.of(pods)
    jobs = [(nodes, pods, work, p, s, until) for s in seeds for p in packers]
    with ProcessPoolExecutor(workers) if workers > 1 else nullcontext() as pool:
        out = []
        for curve in pool.map(_run, jobs) if pool else map(_run, jobs):
            log.info(
                "packer %s seed %d: %.1f%% unallocated at capacity (%.1f s)",
                curve.packer,
                curve.seed,
                100 * at_capacity(curve),
                curve.seconds,
            )
            out.append(curve)
    return out


def at_capacity(curve: Curve) -> float:
    return float(curve.unallocated[np.flatnonzero(GRID == 1.0)[0]])


PEERS = ("best-fit", "fgd")  # the usual packer, and the strongest published one


def summary(curves: list[Curve]) -> dict:
    """Per packer: mean unallocated share at capacity with its 95% CI over seeds, and its
    change against each of PEERS, paired by seed (`change_vs_best_fit`, `change_vs_fgd`)."""
    by = pd.DataFrame(
        [
            {
                "packer": c.packer,
                "seed": c.seed,
                "at": at_capacity(c),
                "turned_away": c.turned_away,
                "seconds": c.seconds,
            }
            for c in curves
        ]
    )
    peers = {p: by[by.packer == p].set_index("seed")["at"] for p in PEERS}
    out = {}
    for packer, rows in by.groupby("packer", sort=False):
        at = mean_ci(rows["at"])
        entry = {
            "unallocated_share_at_capacity": at.mean,
            "ci95": at.half_width,
            "seeds": at.n,
            "pods_turned_away": float(rows["turned_away"].mean()),
            "seconds_per_run": float(rows["seconds"].mean()),
        }
        for peer, base in peers.items():
            if len(base):
                paired = base.reindex(rows["seed"]).to_numpy()
                change = mean_ci((rows["at"].to_numpy() - paired) / paired)
                key = "change_vs_" + peer.replace("-", "_")
                entry[key], entry[key + "_ci95"] = change.mean, change.half_width
        out[packer] = entry
    return out


def mean_curves(curves: list[Curve]) -> pd.DataFrame:
    """Mean unallocated share over seeds per packer (columns) along GRID (index)."""
    frame = pd.DataFrame({(c.packer, c.seed): c.unallocated for c in curves}, index=GRID)
    return frame.T.groupby(level=0, sort=False).mean().T


__all__ = ["GRID", "OURS", "Curve", "at_capacity", "bench", "inflate", "mean_curves", "summary"]
