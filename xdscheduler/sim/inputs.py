"""A study's inputs: the jobs that arrive and the network they meet, the same for every policy."""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from xdscheduler.errors import UserError
from xdscheduler.network.dynamics import BASE_LOAD, LOAD_SWING, Dynamics
from xdscheduler.scenario import Job, Scenario, Workload
from xdscheduler.workload import TENANTS, generate_jobs, mean_jobs

if TYPE_CHECKING:
    from xdscheduler.sim.demand import DemandPlanner
    from xdscheduler.sim.recovery import Faults
    from xdscheduler.sim.truth import Truth

log = logging.getLogger(__name__)

# The network is drawn for ten times the arrival window, beyond the engine's drain limit
# (`engine.DRAIN_FACTOR`): a draw depends on its length, so this span is part of what makes a
# seed's realisation, and changing it changes every study's network.
NETWORK_SPAN = 10.0
MAX_STUDY_JOBS = 20_000  # jobs a study may hold: beyond, memory and time grow out of bounds


def expected_jobs(scn: Scenario, hours: float, seed: int = 0) -> float:
    """How many jobs a study of `hours` holds on average: the listed ones arriving within it
    and the generated workload's mean (known before generating it)."""
    listed = sum(j.arrival_s < hours * 3600 for j in scn.jobs)
    if scn.workload is None:
        return float(listed)
    spec = scn.workload
    return listed + mean_jobs(
        hours, sum(d.gpus for d in scn.domains), seed, spec.load, spec.cluster, spec.min_gpus
    )


def check_size(scn: Scenario, hours: float, seed: int = 0) -> float:
    """The expected number of jobs; UserError when the study would be too large to run."""
    n = expected_jobs(scn, hours, seed)
    if n > MAX_STUDY_JOBS:
        raise UserError(
            f"scenario {scn.name!r} over {hours:g} h would hold about {n:,.0f} jobs "
            f"(at most {MAX_STUDY_JOBS:,}): fewer hours, a lower workload load or "
            f"a smaller cluster"
        )
    return n


def study_jobs(scn: Scenario, hours: float, seed: int) -> list[Job]:
    """The scenario's own jobs that arrive within the study, plus its generated workload."""
    check_size(scn, hours, seed)
    jobs = listed_jobs(scn, hours)
    drawn: list[Job] = []
    left_out: dict[str, str] = {}
    if scn.workload is not None:
        taken = {j.name for j in jobs}
        drawn, left_out = _generated(scn, hours, seed)
        jobs += [g for g in drawn if g.name not in taken and g.name not in left_out]
    if jobs:
        _say_left_out(scn, drawn, left_out)
    elif left_out:
        raise UserError(
            f"{scn.name}: none of the {len(drawn)} generated jobs can run on this cluster, "
            f"the first: {next(iter(left_out.values()))} (the generated jobs' precision is "
            "`workload.dtype`, their sizes from `workload.min_gpus` up)"
        )
    if not jobs:
        raise UserError(
            f"{scn.name}: no job arrives within the study's {hours:g} h: list jobs under "
            f"`jobs:` (arrival_s within it) or give a `workload:`"
        )
    return jobs


def listed_jobs(scn: Scenario, hours: float | None = None) -> list[Job]:
    """The scenario's own jobs that arrive within `hours` (None: all of them); UserError for
    the first that no plan can run even on the whole empty cluster, saying why: every policy
    would leave it queued for ever, and it would stop the study's report, after the study."""
    jobs = [j for j in scn.jobs if hours is None or j.arrival_s < hours * 3600]
    if len(jobs) < len(scn.jobs):
        log.info(
            "%s: %d listed jobs arrive after the study's %g h and are left out",
            scn.name,
            len(scn.jobs) - len(jobs),
            hours,
        )
    bad = unplannable(scn, jobs)
    if bad:
        i, job = next((i, j) for i, j in enumerate(scn.jobs) if j.name in bad)
        raise UserError(
            f"{scn.name}: jobs[{i}] ({job.name}): no policy could ever run it: {bad[job.name]}"
        )
    # other tenants hold a share of every domain all through a study, at the least its base
    # share less its swing: a job asking for more than the rest never starts
    room = sum(d.gpus - round(BASE_LOAD * (1 - LOAD_SWING) * d.gpus) for d in scn.domains)
    arriving = {j.name for j in jobs}
    for i, job in enumerate(scn.jobs):
        if job.name in arriving and job.gpus.min > room:
            raise UserError(
                f"{scn.name}: jobs[{i}] ({job.name}): no policy could ever run it in a study: "
                f"it needs at least {job.gpus.min} accelerators, and other tenants hold "
                f"{BASE_LOAD * (1 - LOAD_SWING):.0%} of every domain at the least, leaving "
                f"{room} of {sum(d.gpus for d in scn.domains)}; lower its gpus.min"
            )
    return jobs


def unplannable(scn: Scenario, jobs: list[Job]) -> dict[str, str]:
    """Of `jobs`, those no plan can run even with the whole cluster free, each with the
    search's reason."""
    from xdscheduler.planner.search import JobSpec, ideal_tokens_per_s
    from xdscheduler.planner.view import ClusterView

    view, out = ClusterView.from_scenario(scn), {}
    for job in jobs:
        try:
            ideal_tokens_per_s(JobSpec.of(job), view)  # cached per job shape and cluster
        except UserError as err:
            out[job.name] = str(err)
    return out


def _peak(acc, dtype: str | None) -> float:
    return (acc.rated_tflops.get(dtype) if dtype else None) or acc.half_tflops


def generated_jobs(scn: Scenario, hours: float, seed: int, load: float | None = None) -> list[Job]:
    """The generated workload alone, at `load` (default: the workload's own); a scenario
    without a `workload` block gets the default one (Kalos statistics, jobs of 8+). Jobs no
    plan runs on the cluster are left out, with a warning naming one and why."""
    jobs, left_out = _generated(scn, hours, seed, load)
    _say_left_out(scn, jobs, left_out)
    return [j for j in jobs if j.name not in left_out]


def _say_left_out(scn: Scenario, drawn: list[Job], left_out: dict[str, str]) -> None:
    if left_out:
        name, why = next(iter(left_out.items()))
        log.warning(
            "%s: left out %d of %d generated jobs that no plan runs on this cluster, e.g. %s: %s",
            scn.name,
            len(left_out),
            len(drawn),
            name,
            why,
        )


def _generated(
    scn: Scenario, hours: float, seed: int, load: float | None = None
) -> tuple[list[Job], dict[str, str]]:
    """Every job drawn, and those no plan runs on the cluster with why."""
    spec = scn.workload or Workload()
    gpus = sum(d.gpus for d in scn.domains)
    # tokens are sized at the jobs' own precision's peak (BF16's where it is unrated)
    peak = sum(d.gpus * _peak(d.accelerator, spec.dtype) for d in scn.domains) / gpus
    tenants = tuple(t.name for t in scn.tenancy.tenants) if scn.tenancy else TENANTS
    jobs = generate_jobs(
        hours,
        gpus,
        seed,
        load=spec.load if load is None else load,
        cluster=spec.cluster,
        min_gpus=spec.min_gpus,
        peak_tflops=peak,
        tenants=tenants,
        dtype=spec.dtype,
    )
    # The generator draws sizes and models from cluster statistics, not from this cluster's
    # accelerators: a model too large for its smallest size's memory cannot run anywhere.
    return jobs, unplannable(scn, jobs)


def study_dynamics(scn: Scenario, seed: int, hours: float) -> Dynamics:
    """The links and loads every policy of the study meets."""
    return Dynamics.generate(scn, seed, hours * 3600 * NETWORK_SPAN)


@dataclass
class StudyInputs:
    """What one policy's run of a study meets: the scenario, its jobs and the network's
    realisation over `hours`; where the study has them, the faults injected, the demand series
    its planner keeps, and the ground truth jobs really run at (None: the model's speeds)."""

    scn: Scenario
    jobs: list[Job]
    dynamics: Dynamics
    hours: float
    faults: Faults | None = None
    demand: DemandPlanner | None = None
    truth: Truth | None = None

    @classmethod
    def drawn(cls, scn: Scenario, hours: float, seed: int, **extras) -> StudyInputs:
        """The study's jobs and network as seed `seed` draws them over `hours`; `extras`: the
        faults, demand or truth."""
        return cls(
            scn, study_jobs(scn, hours, seed), study_dynamics(scn, seed, hours), hours, **extras
        )

    @classmethod
    def of_cell(cls, scn: Scenario, jobs: list[Job], seed: int, hours: float) -> StudyInputs:
        """A comparison cell's `jobs` on the network and ground truth seed `seed` draws: the
        same for every policy of the cell, which decides with the nominal model and corrects
        it from the rates it observes."""
        from xdscheduler.sim.truth import Truth  # loads the plan search: 0.1 s, only here

        dynamics = study_dynamics(scn, seed, hours)
        return cls(scn, jobs, dynamics, hours, truth=Truth.draw(scn, jobs, seed))

    def for_policy(self, demand: DemandPlanner | None) -> StudyInputs:
        """A copy for one policy: faults of its own to use up, the same otherwise."""
        return replace(self, faults=copy.deepcopy(self.faults), demand=demand)
