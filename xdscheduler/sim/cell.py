"""A comparison cell's workload: the scenario's generated jobs at exactly a target offered load.

The scenario's listed jobs are left out: a handful of hand-written jobs would weigh differently
at every load. The generator draws the jobs at the target load; the Poisson count makes their
offered load miss it by chance, so every job's work (tokens) is scaled by one factor that makes
it exact, keeping sizes and arrival times. The same scenario, hours and seed give the same jobs
for every policy (a paired comparison), whatever the arrival process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xdscheduler.errors import UserError
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Job, Scenario, Workload
from xdscheduler.sim.arrivals import Replay, arrival_times_s, window
from xdscheduler.sim.inputs import generated_jobs
from xdscheduler.sim.metrics import offered_load
from xdscheduler.workload import gpu_s_per_job

REPLAY_STREAM = 0xA221  # the replayed arrival times' own random stream, apart from the jobs'


@dataclass(frozen=True)
class CellWorkload:
    """The jobs of one (scenario, load, seed) cell and how they were made."""

    jobs: list[Job]
    offered_load: float
    work_scale: float  # the factor every job's tokens were multiplied by
    arrivals: str  # where the arrival times came from


def cell_workload(scn: Scenario, hours: float, seed: int, load: float,
                  replay: Replay | None = None) -> CellWorkload:
    """The generated jobs of `hours` of arrivals at offered load `load`, arriving as `replay`
    says (None: the generator's Poisson arrivals)."""
    if load <= 0:
        raise UserError(f"offered load must be positive, got {load:g}")
    jobs = generated_jobs(scn, hours, seed, _generator_load(scn, seed, load, replay))
    if not jobs:
        raise UserError(f"{scn.name}: no job arrives in {hours:g} h at load {load:g} with "
                        f"seed {seed}; give more --hours")
    label = "poisson: the generator's arrivals"
    if replay is not None and replay.rate is not None:
        win = window(replay, hours, np.random.default_rng([seed, REPLAY_STREAM]))
        times = arrival_times_s(win, len(jobs), np.random.default_rng([seed, REPLAY_STREAM, 1]))
        jobs = [j.model_copy(update={"arrival_s": float(t)})
                for j, t in zip(jobs, times, strict=True)]
        label = win.label
    elif replay is not None:
        label = f"{replay.kind}: Poisson, {replay.gpu_s_per_job:,.0f} GPU-s a job"
    view, horizon_s = ClusterView.from_scenario(scn), hours * 3600
    scale = load / offered_load([JobSpec.of(j) for j in jobs], view, horizon_s)
    jobs = [j.model_copy(update={"tokens": j.tokens * scale}) for j in jobs]
    return CellWorkload(jobs, offered_load([JobSpec.of(j) for j in jobs], view, horizon_s),
                        scale, label)


def _generator_load(scn: Scenario, seed: int, load: float, replay: Replay | None) -> float:
    """The load to ask the generator for: the target, or, where the trace sets how much work a
    job brings, the load at which the generator's count of jobs is the trace's."""
    if replay is None or replay.gpu_s_per_job is None:
        return load
    spec = scn.workload or Workload()
    mine = gpu_s_per_job(sum(d.gpus for d in scn.domains), seed, spec.cluster, spec.min_gpus)
    return load * mine / replay.gpu_s_per_job
