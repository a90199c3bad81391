"""A comparison cell's workload: a scenario's jobs at exactly a target offered load.

By default a cell holds the scenario's listed jobs that arrive within its hours and its
generated workload, drawn at the target load; the Poisson count (and the listed jobs) make the
offered load miss the target, so every job's work (tokens) is scaled by one factor that makes
it exact, keeping sizes and arrival times. `listed=False` leaves the listed jobs out.

A cell may instead fix the share of the offered accelerator-time in giants (jobs asking for
more than the largest domain's free share, `metrics.is_giant`): its jobs that fit are the
draw's own, their work scaled so that they offer (1 - share) of the load; its giants are the
generator's own giants, from the same draw and, where it has too few, from further draws of
the same seed, taken in a seeded random order until they offer share x load, then scaled to
offer it exactly. The listed jobs are left out of such cells: they would fix the share
themselves. The same scenario, hours and seed give the same jobs for every policy (a paired
comparison), whatever the arrival process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xdscheduler.errors import UserError
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import Job, Scenario, Workload
from xdscheduler.sim.arrivals import Replay, arrival_times_s, window
from xdscheduler.sim.inputs import generated_jobs, listed_jobs, study_dynamics
from xdscheduler.sim.metrics import free_share, is_giant, offered_load
from xdscheduler.workload import gpu_s_per_job

REPLAY_STREAM = 0xA221  # the replayed arrival times' own random stream, apart from the jobs'
GIANT_STREAM = 0x61A7  # further draws for giants, and the order they are taken in
MAX_GIANT_DRAWS = 50  # draws of the generator searched for enough giants


@dataclass(frozen=True)
class CellWorkload:
    """The jobs of one (scenario, load, seed) cell and how they were made."""

    jobs: list[Job]
    offered_load: float
    work_scale: float  # the factor every job's tokens were multiplied by (the fitting jobs')
    arrivals: str  # where the arrival times came from
    listed: int = 0  # of the jobs, the scenario's listed ones
    giant_scale: float | None = None  # the giants' own factor, where the share is fixed


def cell_workload(
    scn: Scenario,
    hours: float,
    seed: int,
    load: float,
    replay: Replay | None = None,
    listed: bool = True,
    giant_share: float | None = None,
) -> CellWorkload:
    """The jobs of `hours` of arrivals at offered load `load`, arriving as `replay` says (None:
    the generator's Poisson arrivals); with the scenario's listed jobs (`listed`), or with
    `giant_share` of the offered accelerator-time in giants (the listed jobs then left out)."""
    if load <= 0:
        raise UserError(f"offered load must be positive, got {load:g}")
    jobs = generated_jobs(scn, hours, seed, _generator_load(scn, seed, load, replay))
    view, horizon_s = ClusterView.from_scenario(scn), hours * 3600
    if giant_share is not None:
        return _mixed(scn, hours, seed, load, replay, jobs, giant_share)
    own = listed_jobs(scn, hours) if listed else []
    if not (jobs or own):  # listed jobs alone are a workload: scaled to the load as any
        raise UserError(
            f"{scn.name}: no job arrives in {hours:g} h at load {load:g} with "
            f"seed {seed}; give more --hours"
        )
    jobs, label = _timed(jobs, hours, seed, replay)
    jobs = own + jobs
    scale = load / offered_load([JobSpec.of(j) for j in jobs], view, horizon_s)
    jobs = _scaled(jobs, scale)
    return CellWorkload(
        jobs, offered_load([JobSpec.of(j) for j in jobs], view, horizon_s), scale, label, len(own)
    )


def _mixed(
    scn: Scenario,
    hours: float,
    seed: int,
    load: float,
    replay: Replay | None,
    drawn: list[Job],
    share: float,
) -> CellWorkload:
    """The draw's jobs that fit, and enough giants, each class scaled to its part of the load."""
    if not 0 <= share < 1:
        raise UserError(f"a share of the load in giants is in [0, 1), got {share:g}")
    view, horizon_s = ClusterView.from_scenario(scn), hours * 3600
    above = free_share(study_dynamics(scn, seed, hours), view, horizon_s)
    fits = [j for j in drawn if not is_giant(JobSpec.of(j), above)]
    giants = _giants(scn, hours, seed, load * share, drawn, above) if share > 0 else []
    if not fits:
        raise UserError(
            f"{scn.name}: no job that fits one domain arrives in {hours:g} h at "
            f"load {load:g} with seed {seed}; give more --hours"
        )
    jobs, label = _timed(sorted(fits + giants, key=lambda j: j.arrival_s), hours, seed, replay)
    giant = {g.name for g in giants}
    scales = {}
    for cls, part in (("fit", 1 - share), ("giant", share)):
        mine = [JobSpec.of(j) for j in jobs if (j.name in giant) == (cls == "giant")]
        if mine:
            scales[cls] = load * part / offered_load(mine, view, horizon_s)
    jobs = [
        j.model_copy(update={"tokens": j.tokens * scales["giant" if j.name in giant else "fit"]})
        for j in jobs
    ]
    return CellWorkload(
        jobs,
        offered_load([JobSpec.of(j) for j in jobs], view, horizon_s),
        scales["fit"],
        label,
        0,
        scales.get("giant"),
    )


def _giants(
    scn: Scenario, hours: float, seed: int, target: float, drawn: list[Job], above: float
) -> list[Job]:
    """Giants of the generator's own sizes offering at least `target` of the load: the draw's,
    then those of further draws of the seed, in a seeded random order, the fewest that do."""
    view, horizon_s = ClusterView.from_scenario(scn), hours * 3600
    pool = [j for j in drawn if is_giant(JobSpec.of(j), above)]
    streams = np.random.SeedSequence([seed, GIANT_STREAM])
    for k, child in enumerate(streams.spawn(MAX_GIANT_DRAWS)):
        if pool and offered_load([JobSpec.of(j) for j in pool], view, horizon_s) >= target:
            break
        more = generated_jobs(scn, hours, int(child.generate_state(1)[0]))
        pool += [
            j.model_copy(update={"name": f"giant-{k}-{j.name}"})
            for j in more
            if is_giant(JobSpec.of(j), above)
        ]
    if not pool:
        raise UserError(
            f"{scn.name}: the workload generator draws no job asking for more than "
            f"the largest domain's free share ({above:.0f} accelerators), so no "
            f"share of the load can be in giants"
        )
    order = np.random.default_rng([seed, GIANT_STREAM]).permutation(len(pool))
    taken: list[Job] = []
    for i in order:
        taken.append(pool[i])
        if offered_load([JobSpec.of(j) for j in taken], view, horizon_s) >= target:
            break
    return taken


def _timed(
    jobs: list[Job], hours: float, seed: int, replay: Replay | None
) -> tuple[list[Job], str]:
    """The jobs with the arrival times `replay` gives (in their order), and where from."""
    if replay is not None and replay.rate is not None:
        win = window(replay, hours, np.random.default_rng([seed, REPLAY_STREAM]))
        times = arrival_times_s(win, len(jobs), np.random.default_rng([seed, REPLAY_STREAM, 1]))
        return [
            j.model_copy(update={"arrival_s": float(t)}) for j, t in zip(jobs, times, strict=True)
        ], win.label
    if replay is not None:
        return jobs, f"{replay.kind}: Poisson, {replay.gpu_s_per_job:,.0f} GPU-s a job"
    return jobs, "poisson: the generator's arrivals"


def _scaled(jobs: list[Job], scale: float) -> list[Job]:
    return [j.model_copy(update={"tokens": j.tokens * scale}) for j in jobs]


def _generator_load(scn: Scenario, seed: int, load: float, replay: Replay | None) -> float:
    """The load to ask the generator for: the target, or, where the trace sets how much work a
    job brings, the load at which the generator's count of jobs is the trace's."""
    if replay is None or replay.gpu_s_per_job is None:
        return load
    spec = scn.workload or Workload()
    mine = gpu_s_per_job(sum(d.gpus for d in scn.domains), seed, spec.cluster, spec.min_gpus)
    return load * mine / replay.gpu_s_per_job
