"""A study: every policy over the same workload and the same realisation of the network,
on Ray (a controller actor per policy, owning its domain actors) or in this process."""

from __future__ import annotations

import logging
import math
import sys
import time
from pathlib import Path

import pandas as pd

from xdscheduler.errors import UserError
from xdscheduler.planner.policy import Policy
from xdscheduler.planner.search import JobSpec
from xdscheduler.planner.view import ClusterView
from xdscheduler.ray_cluster import connect
from xdscheduler.registry import check, make_policy
from xdscheduler.runtime.folder import StudyFolder, StudySpec, digest
from xdscheduler.runtime.ledger import Ledger
from xdscheduler.scenario import Scenario
from xdscheduler.sim.demand import DemandPlanner
from xdscheduler.sim.engine import Engine
from xdscheduler.sim.inputs import StudyInputs, study_dynamics, study_jobs
from xdscheduler.sim.measurement import Results
from xdscheduler.sim.metrics import (
    background_load,
    domain_table,
    free_share,
    ideal_rates,
    job_table,
    link_table,
    offered_load,
    segment_table,
    summarise,
    traffic_table,
)
from xdscheduler.sim.reconfig import Switch
from xdscheduler.sim.reconfig import summary as swing_summary
from xdscheduler.sim.records import (
    Change,
    Comparison,
    FaultsReport,
    PolicyFaults,
    PolicyReport,
    Report,
    Shards,
)
from xdscheduler.sim.recovery import study_faults
from xdscheduler.sim.truth import Truth
from xdscheduler.textfile import write_atomic

CHUNK_S = 3600.0  # the driver advances each controller an hour at a time (progress, control)
LOG_EVERY_S = 30.0  # off a terminal: a progress line this often
log = logging.getLogger(__name__)
__all__ = ["run_here", "run_on_ray", "run_study", "study_dynamics", "study_jobs"]


def _bar(jobs: int, label: str, show: bool):
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=jobs, desc=f"{label:>20}", unit="job", file=sys.stderr, leave=True)


class _LogProgress:
    """Progress for logs, where no bar is drawn: a line every LOG_EVERY_S of wall time with the
    jobs done and, from the pace so far, the time left."""

    def __init__(self, jobs: int, label: str):
        self.jobs, self.label = jobs, label
        self.start = time.monotonic()
        self.last = -math.inf

    def update(self, status: dict) -> None:
        now = time.monotonic()
        if now - self.last < LOG_EVERY_S and not status["finished"]:
            return
        self.last = now
        done, elapsed = status["completed"], now - self.start
        left = (
            ""
            if status["finished"] or not done
            else f", about {elapsed * (self.jobs - done) / done:.0f} s to go"
        )
        log.info(
            "%s: %d/%d jobs done at %.1f simulated h after %.0f s%s",
            self.label,
            done,
            self.jobs,
            status["now_s"] / 3600,
            elapsed,
            left,
        )


def _follow(advance, jobs: int, label: str, show: bool) -> None:
    """Advance a study an hour of simulated time at a time, showing jobs done (a bar on a
    terminal, log lines elsewhere)."""
    bar = _bar(jobs, label, show)
    lines = None if bar is not None else _LogProgress(jobs, label)
    t = 0.0
    while True:
        t += CHUNK_S
        status = advance(t)
        if lines is not None:
            lines.update(status)
        else:
            bar.n = status["completed"]
            bar.set_postfix_str(f"{status['now_s'] / 3600:.0f} sim-h")
            bar.refresh()
        if status["finished"]:
            break
    if bar is not None:
        bar.close()


def run_on_ray(
    inputs: StudyInputs,
    policy: str,
    show: bool = False,
    *,
    realtime: bool = False,
    speed: float = 1.0,
    policy_options: dict | None = None,
    journal: str | None = None,
    ledger: str | None = None,
) -> Results:
    """One policy's study under a controller actor. With a journal, a controller that dies is
    replaced by one that resumes from the journal, and the study goes on. `realtime`: events
    keep pace with the wall clock, `speed` simulated seconds per second, and the study shows
    itself on the board (`monitor.board`)."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    from xdscheduler.runtime.controller import Controller

    if realtime:  # the driver owns the board: it outlives the controllers, showing the end
        from xdscheduler.monitor.board import board

        board(create=True)

    def start():
        return Controller.remote(
            inputs,
            policy,
            realtime=realtime,
            speed=speed,
            policy_options=policy_options,
            journal=journal,
            ledger=ledger,
        )

    controller = start()

    def advance(t: float) -> dict:
        nonlocal controller
        try:
            return ray.get(controller.advance.remote(t))
        except RayTaskError as err:  # bad input met in the controller: said as here
            if isinstance(err.cause, UserError):
                raise err.cause from None
            raise
        except RayActorError:
            if not journal:
                raise
            print(
                f"{policy}: the controller died; a new one resumes from {journal}", file=sys.stderr
            )
            controller = start()
            return ray.get(controller.advance.remote(t))

    _follow(advance, len(inputs.jobs), policy, show)
    results = ray.get(controller.results.remote())
    ray.kill(controller)  # its domain actors go with it
    return results


def run_here(
    inputs: StudyInputs,
    policy: Policy,
    show: bool = False,
    replan: Switch = Switch.MAKE_BEFORE_BREAK,
    ledger: str | None = None,
) -> Results:
    """The same study in this process, the domains as plain objects; `replan`: how running
    jobs move (make-before-break, or the old checkpoint-and-restart); `ledger`: where its
    usage records go."""
    start = time.perf_counter()
    engine = Engine(inputs, policy, replan=replan)
    book = Ledger(ledger, policy.name) if ledger else None
    if book:
        engine.recorder.meter_to(book.record)

    def advance(t: float) -> dict:
        engine.run(until_s=t)
        return engine.status()

    _follow(advance, len(inputs.jobs), policy.name, show)
    results = engine.results()
    results.wall_s = time.perf_counter() - start
    if book:
        book.close()
    return results


def study_demand(scn: Scenario, seed: int, faults, options: dict) -> DemandPlanner:
    """Demand planning for a study: pools above the failure-rate floor (under faults) and holds
    for the scenario's announced jobs, from a forecaster in process or behind the policy
    options' `serve_url`."""
    floor, known = dict(faults.floor) if faults else {}, {j.name for j in scn.jobs}
    if not options.get("serve_url"):
        return DemandPlanner(floor, known, seed=seed)
    from xdscheduler.serving.client import ForecastClient

    client = ForecastClient(options["serve_url"], options.get("serve_token"))
    return DemandPlanner(floor, known, client, seed)


def run_study(
    scn: Scenario,
    policies: list[str],
    hours: float,
    seed: int,
    out: Path,
    address: str | None = None,
    local: bool = False,
    realtime: bool = False,
    speed: float = 1.0,
    show_progress: bool | None = None,
    policy_options: dict | None = None,
    journal: bool = True,
    faults: float | None = None,
    forecast: bool | None = None,
    truth: bool = True,
    mode: str = "new",
) -> Report:
    """Run every policy, write the report to `out`, and return it.
    `faults`: inject faults at the published rates times this factor (None: none);
    `forecast`: consult the demand forecast every hour (default: under faults);
    `truth`: jobs run at a ground truth drawn from the seed, which the policies do not see
    (False: at the model's speeds); `mode`: what `out` may hold ("new": no study, "force":
    replace it, "resume": an interrupted study to go on with, see `runtime.folder`)."""
    check(policies)
    options = policy_options or {}
    with StudyFolder(out, mode) as folder:
        if mode != "resume":
            path = options.get("policy_path")
            folder.record(
                StudySpec(
                    scenario=scn.model_dump(mode="json"),
                    policies=policies,
                    hours=hours,
                    seed=seed,
                    faults=faults,
                    forecast=forecast,
                    realtime=realtime,
                    speed=speed,
                    policy_path=path,
                    policy_sha256=digest(path) if path else None,
                    serve_url=options.get("serve_url"),
                )
            )
        show = sys.stderr.isatty() if show_progress is None else show_progress
        jobs = study_jobs(scn, hours, seed)
        world = StudyInputs(
            scn,
            jobs,
            study_dynamics(scn, seed, hours),
            hours,
            faults=None if faults is None else study_faults(scn, seed, hours, faults),
            truth=Truth.draw(scn, jobs, seed) if truth else None,  # one for every policy
        )
        planner = (
            study_demand(scn, seed, world.faults, options)
            if (forecast or (forecast is None and world.faults is not None))
            else None
        )
        if not local:
            connect(address)
        runs: dict[str, Results] = {}
        for name in policies:
            # the same faults for every policy, and a demand series of its own
            mine = world.for_policy(planner.for_policy(name) if planner else None)
            if local:
                policy = make_policy(name, scn.weights, options)
                runs[name] = run_here(mine, policy, show, ledger=str(folder.ledger))
            else:
                runs[name] = run_on_ray(
                    mine,
                    name,
                    show,
                    realtime=realtime,
                    speed=speed,
                    policy_options=options,
                    journal=str(folder.journal) if journal else None,
                    ledger=str(folder.ledger),
                )
        return _write_study(folder.path, world, seed, runs, faults, local)


def _write_study(
    out: Path,
    world: StudyInputs,
    seed: int,
    runs: dict[str, Results],
    faults: float | None,
    local: bool,
) -> Report:
    """The study's report from each policy's results, written to `out` with its tables."""
    from xdscheduler.report.writer import write_report

    scn, hours = world.scn, world.hours
    view = ClusterView.from_scenario(scn)
    specs = [JobSpec.of(j) for j in world.jobs]
    ideal = ideal_rates(specs, view)
    share = free_share(world.dynamics, view, hours * 3600)
    reports = {
        n: PolicyReport(
            **dict(summarise(r, scn.weights, ideal, view, hours * 3600, share)),
            single_domain=r.single_domain,
            swings=swing_summary(r.swings, moves=r.relocations),
            forecast=None if r.faults else r.demand,
            tenants=r.tenants,
        )
        for n, r in runs.items()
    }
    report = Report(
        scenario=scn.name,
        seed=seed,
        hours=hours,
        jobs=len(world.jobs),
        offered_load=offered_load(specs, view, hours * 3600),
        background_load=background_load(world.dynamics, view, hours * 3600),
        runtime="local" if local else "ray",
        weights=scn.weights.model_dump(),
        policies=reports,
        comparison=compare(reports),
        faults=None if faults is None else fault_report(world.faults, runs, faults, seed),
        truth=world.truth.summary(scn) if world.truth else None,
    )
    write_report(
        out,
        report,
        _stacked([domain_table(r) for r in runs.values()]),
        _stacked([job_table(r) for r in runs.values()]),
        link_table(world.dynamics, [d.name for d in scn.domains]),
        segments=_stacked([segment_table(r) for r in runs.values()]),
        topology=topology(scn),
        traffic=_stacked([traffic_table(r) for r in runs.values()]),
    )
    _write_decisions(out, runs)
    return report


def _stacked(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """Each policy's table, one under another; a policy's empty table (a job that never ran
    anywhere has no segment) is left out, as pandas will stop typing columns from it."""
    full = [t for t in tables if not t.empty]
    return pd.concat(full, ignore_index=True) if full else tables[0]


def topology(scn: Scenario) -> dict:
    """The domains and links as leased, for the report's resource graph."""
    return {
        "domains": [
            {
                "name": d.name,
                "accelerator": d.accelerator.name,
                "total": d.gpus,
                "lat": d.location.lat,
                "lon": d.location.lon,
            }
            for d in scn.domains
        ],
        "links": [
            {"a": lk.a, "b": lk.b, "leased_gbps": lk.bandwidth_gbps, "rtt_ms": lk.rtt_ms}
            for lk in scn.links
        ],
    }


def fault_report(injected, runs: dict[str, Results], scale: float, seed: int) -> FaultsReport:
    """The report's `faults` block: the detectors on this run's faults and on as many
    fault-free windows, data movement under the run's ±30% swings, recovery per policy."""
    from xdscheduler.datamove import DataJob
    from xdscheduler.datamove import compare as data_movement
    from xdscheduler.sim.recovery import false_alarms

    base = injected.summary([])
    moves = data_movement(DataJob(), seed)
    shards = ("idle_wait_fraction", "blocking_rate")
    return FaultsReport(
        rates=f"published × {scale:g}",
        **base.model_dump(
            include={
                "injected",
                "injected_by_kind",
                "detected",
                "detection_s_p50",
                "detection_s_p99",
                "backup_pool_gpus",
            }
        ),
        false_alarms=false_alarms(max(base.injected, 20), seed),
        **{k: moves["adaptive"][k] for k in shards},
        fixed_shards=Shards.model_validate({k: moves["fixed"][k] for k in shards}),
        policies={name: _policy_faults(r) for name, r in runs.items()},
    )


def _policy_faults(r: Results) -> PolicyFaults:
    if r.faults is None:
        raise ValueError("a policy's run in a study with faults summarises none")
    kept = set(PolicyFaults.model_fields) - {"forecast"}
    return PolicyFaults(**r.faults.model_dump(include=kept), forecast=r.demand)


def compare(policies: dict[str, PolicyReport]) -> Comparison:
    """Every other policy against the strongest single-domain policy of the run (by R, its
    efficiency weighted by work), as relative changes (negative: lower)."""
    work = {
        n: p.objective_work
        for n, p in policies.items()
        if p.single_domain and p.objective_work is not None
    }
    base_name = max(work, key=work.__getitem__, default=None)
    if base_name is None:
        return Comparison(baseline=None, policies={})
    base = policies[base_name]
    return Comparison(
        baseline=base_name,
        policies={
            name: Change(
                **{key: _change(getattr(p, key), getattr(base, key)) for key in Change.model_fields}
            )
            for name, p in policies.items()
            if name != base_name
        },
    )


def _change(value: float | None, against: float | None) -> float | None:
    """Relative change of `value` against `against`; None where either is missing or 0."""
    if value is None or not against or math.isnan(value) or math.isnan(against):
        return None
    return (value - against) / abs(against)


def _write_decisions(out: Path, runs: dict[str, Results]) -> None:
    """The append-only decision log of each controller, one JSON object a line."""
    import json
    from dataclasses import asdict

    write_atomic(
        Path(out) / "decisions.jsonl",
        "".join(
            json.dumps({"policy": name, **asdict(d)}) + "\n"
            for name, res in runs.items()
            for d in res.decisions
        ),
    )
