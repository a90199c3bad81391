"""`xds compare`'s grid: a study per (scenario, load, seed, policy) cell, as Ray tasks of one CPU
each or one after another in this process, gathered into one table of figures."""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import pandas as pd
from pydantic import Field, ValidationError, model_validator

from xdscheduler.errors import UserError
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.ray_cluster import connect
from xdscheduler.registry import check, make_policy
from xdscheduler.runtime.study import run_here
from xdscheduler.scenario import MAX_LOAD, Job, Scenario, load_scenario
from xdscheduler.schema import Strict, said
from xdscheduler.sim.arrivals import ARRIVALS, load_replay
from xdscheduler.sim.cell import CellWorkload, cell_workload
from xdscheduler.sim.inputs import StudyInputs
from xdscheduler.sim.metrics import background_load, free_share, ideal_rates, summarise

log = logging.getLogger(__name__)
LOG_EVERY_S = 30.0  # without a terminal, a progress line at most this often (and at the end)


class Grid(Strict):
    """The studies of one comparison: every scenario × load × seed × policy."""

    scenarios: list[Path] = Field(min_length=1)
    """Scenario files; each gets its own panel and table."""
    policies: list[str] = Field(min_length=1)
    """Registered policy names, in the order they are listed."""
    seeds: list[Annotated[int, Field(ge=0, lt=2**32)]] = Field(min_length=1)
    """Each seed draws the jobs and the network; every policy of a cell sees the same."""
    loads: list[Annotated[float, Field(gt=0, le=MAX_LOAD, allow_inf_nan=False)]] = Field(
        min_length=1
    )
    """Offered loads (accelerator-hours asked over those available while jobs arrive)."""
    hours: float = Field(gt=0)
    """Hours of job arrivals per study."""
    baseline: str
    """The policy every other one is compared with, seed by seed."""
    arrivals: str = "poisson"
    """The generator's Poisson arrivals, or a trace replayed: philly, helios, acme."""
    listed: bool = True
    """The scenarios' listed jobs are in every cell (False: the generated workload alone)."""
    giant_shares: list[float] | None = None
    """Shares of the offered accelerator-time in giants, one cell each (the listed jobs then
    left out); None: the workload as drawn."""

    @model_validator(mode="after")
    def _consistent(self) -> Grid:
        check(self.policies)
        for what, values in (
            ("policies", self.policies),
            ("seeds", self.seeds),
            ("loads", self.loads),
        ):
            if len(set(values)) != len(values):
                raise ValueError(f"{what} repeat: {', '.join(map(str, values))}")
        if any(x <= 0 for x in self.loads):
            raise ValueError(f"loads must be positive, got {', '.join(map(str, self.loads))}")
        shares = self.giant_shares or []
        if len(set(shares)) != len(shares) or any(not 0 <= x < 1 for x in shares):
            raise ValueError(
                f"giant shares are distinct, in [0, 1), got {', '.join(map(str, shares))}"
            )
        if self.baseline not in self.policies:
            raise ValueError(
                f"baseline {self.baseline!r} is not among the policies compared "
                f"({', '.join(self.policies)}): add it to --policies, or name one of them "
                "with --baseline"
            )
        if self.arrivals not in ARRIVALS:
            raise ValueError(
                f"unknown arrivals {self.arrivals!r}; use one of {', '.join(ARRIVALS)}"
            )
        return self

    @classmethod
    def of(cls, **fields) -> Grid:
        """A grid from user input; UserError naming the first bad field."""
        try:
            return cls(**fields)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(map(str, first["loc"]))
            msg = said(first)
            raise UserError(f"compare: {where + ': ' if where else ''}{msg}") from None


@dataclass(frozen=True)
class Cell:
    """One study of the grid."""

    scenario: str
    load: float
    seed: int
    policy: str
    giant_share: float | None = None  # None: the workload as drawn


@dataclass(frozen=True)
class GridRun:
    """What a grid measured: one row per cell, and how the grid ran."""

    cells: pd.DataFrame
    wall_s: float
    runtime: str  # "ray" or "local"
    cpus: int  # CPUs the studies ran on
    listed_jobs: dict[str, int]  # per scenario, listed jobs in each of its cells


def run_cell(scn: Scenario, jobs: list[Job], policy: str, seed: int, hours: float) -> dict:
    """One policy over one cell's jobs and network, in this process: its figures by name, a
    class's as `fit_...` and `giant_...`."""
    view, horizon_s = ClusterView.from_scenario(scn), hours * 3600
    inputs = StudyInputs.of_cell(scn, jobs, seed, hours)
    dynamics = inputs.dynamics
    res = run_here(inputs, make_policy(policy, scn.weights))
    metrics = summarise(
        res,
        scn.weights,
        ideal_rates([JobSpec.of(j) for j in jobs], view),
        view,
        horizon_s,
        free_share(dynamics, view, horizon_s),
    )
    figures = {
        k: v for k, v in metrics.model_dump().items() if v is None or isinstance(v, int | float)
    }  # lists (domains down) stay out
    for name, cls in metrics.classes.items():
        figures |= {f"{name}_{k}": v for k, v in cls.model_dump().items()}
    return figures | {
        "single_domain": res.single_domain,
        "background_load": background_load(dynamics, view, horizon_s),
    }


def run_grid(grid: Grid, address: str | None = None, local: bool = False) -> GridRun:
    """Every cell of `grid`; on the Ray cluster at `address` (default: an embedded local one)
    or, with `local`, in this process."""
    start = time.perf_counter()
    if not local:
        connect(address)  # before the workloads are made: a typo fails at once
    scenarios = _scenarios(grid.scenarios)
    workloads = _workloads(grid, scenarios)
    cells = [
        Cell(name, load, seed, policy, share)
        # The heaviest loads first: the slowest studies start early, so the last ones
        # running are short and the workers finish together.
        for load in sorted(grid.loads, reverse=True)
        for share in _shares(grid)
        for seed in grid.seeds
        for name in scenarios
        for policy in grid.policies
    ]
    inputs = {name: scn.model_copy(update={"jobs": []}) for name, scn in scenarios.items()}
    run = _here if local else _on_ray
    rows = []
    with _Progress(len(cells), sys.stderr.isatty()) as bar:
        for cell, figures in run(cells, inputs, workloads, grid.hours):
            work = workloads[_key(cell)]
            share = math.nan if cell.giant_share is None else cell.giant_share
            rows.append(
                {
                    "scenario": cell.scenario,
                    "giant_share": share,
                    "load": cell.load,
                    "seed": cell.seed,
                    "policy": cell.policy,
                    "offered_load": work.offered_load,
                    "work_scale": work.work_scale,
                    "giant_scale": work.giant_scale,
                    "arrivals": work.arrivals,
                    "jobs": len(work.jobs),
                    "listed_jobs": work.listed,
                    **figures,
                }
            )
            bar.step(cell)
    # Scenarios and policies in the order given, shares, loads and seeds ascending.
    order = {"scenario": list(scenarios), "policy": grid.policies}
    frame = pd.DataFrame(rows).sort_values(
        ["scenario", "giant_share", "load", "seed", "policy"],
        ignore_index=True,
        key=lambda c: c.map(order[c.name].index) if c.name in order else c,
    )
    listed = {
        name: max((w.listed for k, w in workloads.items() if k[0] == name), default=0)
        for name in scenarios
    }
    return GridRun(
        frame, time.perf_counter() - start, "local" if local else "ray", _cpus(local), listed
    )


def _shares(grid: Grid) -> list[float | None]:
    return list(grid.giant_shares) if grid.giant_shares is not None else [None]


def _key(cell: Cell) -> tuple:
    """The cell's workload: the same for every policy."""
    return cell.scenario, cell.load, cell.giant_share, cell.seed


def _cpus(local: bool) -> int:
    """How many CPUs ran the studies: this process's one, or the Ray cluster's."""
    if local:
        return 1
    import ray

    return int(ray.cluster_resources().get("CPU", 0))


def _scenarios(paths: list[Path]) -> dict[str, Scenario]:
    out: dict[str, Scenario] = {}
    for path in paths:
        scn = load_scenario(path)
        if scn.name in out:
            raise UserError(f"two scenarios are named {scn.name!r} ({path} and another)")
        out[scn.name] = scn
    return out


def _workloads(grid: Grid, scenarios: dict[str, Scenario]) -> dict[tuple, CellWorkload]:
    """Each (scenario, load, giant share, seed)'s jobs, made once here and shared by its
    policies."""
    out = {}
    for name, scn in scenarios.items():
        replay = load_replay(grid.arrivals, scn.workload.cluster if scn.workload else "kalos")
        for load in grid.loads:
            for share in _shares(grid):
                for seed in grid.seeds:
                    out[name, load, share, seed] = cell_workload(
                        scn, grid.hours, seed, load, replay, grid.listed, share
                    )
    return out


Runs = Iterator[tuple[Cell, dict]]


def _here(cells: list[Cell], scenarios: dict[str, Scenario], workloads: dict, hours: float) -> Runs:
    for cell in cells:
        yield (
            cell,
            run_cell(
                scenarios[cell.scenario], workloads[_key(cell)].jobs, cell.policy, cell.seed, hours
            ),
        )


def _on_ray(
    cells: list[Cell], scenarios: dict[str, Scenario], workloads: dict, hours: float
) -> Runs:
    """Every cell a task of one CPU, on the cluster `run_grid` connected to; results as they
    finish. Each scenario and each cell's jobs go to the object store once, for all the
    policies that read them."""
    import ray

    task = ray.remote(num_cpus=1)(run_cell)
    scn_refs = {name: ray.put(scn) for name, scn in scenarios.items()}
    job_refs = {key: ray.put(work.jobs) for key, work in workloads.items()}
    pending = {
        task.remote(scn_refs[c.scenario], job_refs[_key(c)], c.policy, c.seed, hours): c
        for c in cells
    }
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)
    finally:
        for ref in pending:  # interrupted or failed: leave nothing running
            ray.cancel(ref)


class _Progress:
    """A tqdm bar on a terminal; otherwise a log line with the ETA every LOG_EVERY_S."""

    def __init__(self, total: int, show: bool):
        self.total, self.done, self.start = total, 0, time.perf_counter()
        self.last_log = self.start
        self.bar = None
        if show:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc="compare", unit="study", file=sys.stderr)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()

    def step(self, cell: Cell) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(f"{cell.scenario} {cell.load:g} s{cell.seed} {cell.policy}")
            self.bar.update()
            return
        now = time.perf_counter()
        if now - self.last_log >= LOG_EVERY_S or self.done == self.total:
            self.last_log = now
            elapsed = now - self.start
            eta = elapsed / self.done * (self.total - self.done)
            log.info(
                "compare: %d/%d studies, %.0f s elapsed, ETA %.0f s",
                self.done,
                self.total,
                elapsed,
                eta,
            )
