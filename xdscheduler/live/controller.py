"""The live control plane: a detached, named controller actor that owns one agent per domain,
decides where submitted jobs run with the same policy the studies use, launches them as Ray
Train runs on placement groups of its own (pinned to their domains by label), hears every step,
and writes a journal that a controller started after it replays (its running jobs go on from
their last checkpoints).

A job's life: queued -> starting (placed: its placement group made, its run launched, no step
yet) -> running (-> moving / preempting: it stops at its next question and queues again) ->
done, failed or cancelled; a run lost with a domain, failed, or stuck goes back to queued. The
controller owns what it starts: every way out of a run removes its placement group, which ends
its workers at once (`live.runs`)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TypeGuard

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from xdscheduler.errors import UserError
from xdscheduler.live.agent import DomainAgent, indicators
from xdscheduler.live.board import LIVE, LiveBoard, domains_state, job_state, links_state
from xdscheduler.live.health import DomainHealth
from xdscheduler.live.jobbook import JobBook
from xdscheduler.live.jobs import LiveJob
from xdscheduler.live.planning import domain_batches, live_policy, options
from xdscheduler.live.records import WARMUP_STEPS, JobRecord, Rounds
from xdscheduler.live.runs import (
    make_placement_group,
    placement_group_name,
    run_training,
    stages,
)
from xdscheduler.live.state import DOMAIN_LABEL, HEAD_LABEL, NAMESPACE, ClusterState
from xdscheduler.live.tenancy import LiveTenancy, as_run
from xdscheduler.live.training import ASK_EVERY, GO, SAVE_AND_STOP, STOP
from xdscheduler.perception.indicators import checked
from xdscheduler.planner.placement import Placement
from xdscheduler.planner.search import estimate_placement
from xdscheduler.planner.view import ClusterView
from xdscheduler.scenario import load_scenario
from xdscheduler.sim.correction import Correction

log = logging.getLogger("xdscheduler.live")

CONTROLLER = "xds-controller"
TICK_S = 0.2  # how often the controller pings its domains and decides
OBSERVE_EVERY = 5  # steps between two corrections from one run
MOVE_GAIN = 2.0  # a running job moves when that saves this many times what moving costs
# ... within this long (a swing may be over after it: links are re-read and moves re-decided
# all the time, so a move must pay for itself before the next may undo it; the single-job
# experiment's re-plan rule pays back over its next 5-minute sample the same way), and when
# the new placement is predicted this much faster at all
MOVE_HORIZON_S = 300.0
MOVE_MIN_SPEEDUP = 0.05
# What the correction learnt halves (in logs) every this long unless runs confirm it: a domain
# found slow and left since is tried again once its slowdown may be over
CORRECTION_HALF_LIFE_S = 300.0
REPORT_EVERY_S = 5.0  # how often each domain's agent reports its state
LINKS_EVERY_S = 1.0  # how often each domain's agent reads its links' rates (a quick read)
# A link whose rate an agent reports this far (relative) from what the controller plans with
# has swung: the controller plans with the new rate and re-plans its running jobs
LINK_SWING = 0.2
# A cancelled run stops by itself at its next question (every ASK_EVERY steps); one still going
# this long after is ended by force (its placement group removed): cancel takes < 5 s always
CANCEL_GRACE_S = 2.0
MAX_FAILED_RUNS = 3  # runs in a row that fail (an error, the watchdog) before the job fails
# A domain's agent that is dead, or that has not answered this long on a domain not found down
# (hung), is replaced, at most every RESPAWN_S
AGENT_STUCK_S, RESPAWN_S = 10.0, 5.0


def move_gain_s(now_s: float, then_s: float, steps_left: int) -> float:
    """Seconds a move from a step of `now_s` to one of `then_s` saves within MOVE_HORIZON_S
    (or the job's `steps_left`, if it ends sooner); 0 unless the new step is at least
    MOVE_MIN_SPEEDUP faster. Counting the job's whole rest, as before, made a job under
    links swinging 30% either way move at nearly every swing, each move's start-up lost."""
    if then_s > (1 - MOVE_MIN_SPEEDUP) * now_s:
        return 0.0
    return min(steps_left, MOVE_HORIZON_S / now_s) * (now_s - then_s)


# Ray's stubs type the options of a remote function, not an actor's (max_concurrency)
@ray.remote(num_cpus=0, max_concurrency=64)  # type: ignore[call-overload]
class LiveController(JobBook):
    def __init__(self, state: str):
        self.state = ClusterState.model_validate_json(state)
        self.scn = load_scenario(self.state.scenario)
        self.names = [d.name for d in self.scn.domains]
        self.storage = self.state.storage
        self.search_options = options(self.state)
        self.policy = live_policy(self.state, self.scn.weights, self.search_options)
        self.tenancy = LiveTenancy(self.scn)
        super().__init__(self._path("journal.sqlite"))
        self.agents = {n: self._agent(n) for n in self.names}
        self.respawned = dict.fromkeys(self.names, 0.0)  # when each domain got its agent
        self.health = DomainHealth(self.names, TICK_S, ray.nodes)
        self.started = time.time()
        self.reports: dict[str, dict] = {}  # domain -> its agent's latest report
        self.pings: Rounds[float] = Rounds(TICK_S)
        self.report_rounds: Rounds[dict] = Rounds(REPORT_EVERY_S)
        self.link_rounds: Rounds[dict[str, float]] = Rounds(LINKS_EVERY_S)
        self.probed: list[dict] = []  # the last `xds links probe`
        base = ClusterView.from_scenario(self.scn)
        self.leased_gbps = base.bandwidth_gbps
        # [i, j]: each link's rate as its agent last read it (Gbit/s), and what the planner
        # plans with: that, or the goodput a probe measured since (`links_probed`)
        self.bucket_gbps, self.links_gbps = self.leased_gbps.copy(), self.leased_gbps.copy()
        self.rtt_ms = base.rtt_ms.copy()  # as the agents measure it (the scenario's till then)
        # the model's error as learnt from the runs' step times: a speed per domain, a goodput
        # per link (the studies' correction, `sim.correction`)
        self.correction = Correction.start(len(self.names))
        self.relaxed_at = time.time()
        self.board = LiveBoard(self.started)
        self.outages: list[dict] = []  # domain, down_s, up_s: for the dashboard
        self.replay()
        threading.Thread(target=self._loop, daemon=True).start()

    @property
    def down(self) -> dict[str, float]:
        return self.health.down

    # ---- the API the CLI and the HTTP endpoints call
    def _admitted(self, job: LiveJob) -> JobRecord:
        self.tenancy.check(job.tenant)
        self._feasible(job)
        return self._record(job, time.time())

    def _record(self, job: LiveJob, submitted: float) -> JobRecord:
        return JobRecord(job, submitted, priority=self.tenancy.priority(job.tenant, job.priority))

    def _feasible(self, job: LiveJob) -> None:
        """ValueError saying why, when no plan of the live runner trains the job even on the
        whole idle cluster (its batch does not divide over its workers, say): it would wait
        in the queue for ever."""
        from xdscheduler.planner.search import search

        try:
            search(
                job.spec(0.0),
                ClusterView.from_scenario(self.scn),
                self.scn.weights,
                self.search_options,
                top_k=0,
                pareto=False,
            )
        except UserError as err:
            raise ValueError(
                f"{err}, even with the whole cluster idle: its global batch "
                f"({job.global_batch}) must divide over its workers and "
                "micro-batches"
            ) from None

    def domains(self) -> dict:
        """Every domain as its agent last reported it (up, suspected or down), its jobs as
        they are now, and the links as the last `xds links probe` measured them."""
        with self.lock:
            hosted, now = self._hosted(), time.time()
            rows = [
                {
                    "domain": n,
                    **self.reports.get(n, {}),
                    "status": self._health(n, now),
                    "jobs": hosted[n],
                }
                for n in self.names
            ]
            return {"domains": rows, "probed": self.probed}

    def _health(self, domain: str, now: float) -> str:
        if domain in self.down:
            return "down"
        return "suspect" if self.health.suspected_for(domain, now) else "up"

    def links_probed(self, rows: list[dict]) -> None:
        """What `xds links probe` measured (journalled): the planner plans with each link's
        measured goodput from now on, until its agent reads a swing of its rate."""
        with self.lock:
            self._probed(rows)
            self._event("", "links_probed", {"links": rows})
            self._reestimate()
            self._replan_running()

    def _probed(self, rows: list[dict]) -> None:
        self.probed = rows
        for r in rows:
            if r["measured_gbps"] > 0:
                self.links_gbps[self.names.index(r["src"]), self.names.index(r["dst"])] = r[
                    "measured_gbps"
                ]

    def state_json(self) -> str:
        return self.state.model_dump_json()

    def adopt(self, entries: dict[str, dict], constants: dict[str, float]) -> dict[str, str]:
        """Plan from now on with what `xds profile --apply` measured: an accelerator entry per
        domain profiled, and the plain-dp constants fitted to their reference trainings
        (journalled: a controller started again adopts them too). Each domain's accelerator."""
        with self.lock:
            self._adopt(entries, constants)
            self._event("", "profiled", {"entries": entries, "constants": constants})
        return {d.name: d.accelerator.name for d in self.scn.domains}

    def _adopt(self, entries: dict[str, dict], constants: dict[str, float]) -> None:
        from xdscheduler.costmodel.constants import DEFAULT
        from xdscheduler.scenario import parse_scenario

        raw = self.scn.model_dump(mode="json")
        known = {a["name"] for a in raw["accelerators"]}
        raw["accelerators"] += [e for e in entries.values() if e["name"] not in known]
        for d in raw["domains"]:
            for group in d["nodes"] if d["name"] in entries else []:
                group["accelerator"] = entries[d["name"]]["name"]
        self.scn = parse_scenario(raw, "xds profile --apply")
        self.search_options = replace(
            self.search_options, calibration=replace(DEFAULT, **constants)
        )
        self.policy = live_policy(self.state, self.scn.weights, self.search_options)

    # ---- what the training runs call
    def heard(self, name: str, metrics: dict) -> None:
        with self.lock:
            rec = self.jobs.get(name)
            if not self._current(rec, metrics.get("attempt", -1)):
                return  # a run given up (lost, cancelled by force): its steps count no more
            rec.hear(metrics)
            # the run's first step carries its start-up stages; this actor runs calls on many
            # threads, so that report may be run after the second step's
            if "startup" in metrics:
                self._started(rec, metrics["startup"])
            seen = len(rec.step_times) - WARMUP_STEPS
            if rec.chosen is not None and seen >= OBSERVE_EVERY * (rec.observed + 1):
                measured = rec.measured()
                if measured is not None:
                    self._correct(rec, rec.chosen, measured)
            self._event(name, "step", {k: v for k, v in metrics.items() if k != "startup"})

    def startup_mark(self, name: str, attempt: int, stage: str, at: float) -> None:
        """A stage of a run's start as Ray Train passed it (`live.runs.StartupMarks`): the last
        worker's time counts."""
        with self.lock:
            rec = self.jobs.get(name)
            if self._current(rec, attempt):
                rec.marks[stage] = max(rec.marks.get(stage, at), at)

    def _started(self, rec: JobRecord, loop_marks: dict) -> None:
        """A run's first step: where its start-up went, journalled (`xds logs`)."""
        marks = {k: t - rec.placed_at for k, t in rec.marks.items()} | loop_marks
        self._event(
            rec.job.name,
            "started",
            {"attempt": rec.attempts, "startup_s": rec.startup_s, **stages(marks)},
        )

    def _correct(self, rec: JobRecord, chosen: Placement, measured: float) -> None:
        """Learn from the run's last steps (`measured`, on `chosen`), then re-plan the running
        jobs."""
        self._observe(rec, chosen, measured)
        self._replan_running()

    def _observe(self, rec: JobRecord, chosen: Placement, measured: float) -> None:
        """Move the model's factor under this run (on `chosen`) toward what its last steps
        took (`measured`), and say what every running job's estimate is now."""
        spec, view = rec.job.spec(0.0), self._view()
        # a run's measured step sums up many steps: it is taken whole (a study
        # weighs one jittery step rate at WEIGHT); a run's early steps, slowed by a job
        # starting beside it, would otherwise hold the factor back long after
        # What its link does not take of a step across domains is this job's own: put on its
        # domains' speed, as it once was, it made every other pair of domains look faster to
        # the job, and under swinging links the job moved round them.
        self.correction, left = self.correction.observe_run(
            chosen, spec, view, measured, self.search_options, own=rec.unexplained
        )
        if left is not None:
            rec.unexplained = left
        rec.observed += 1
        self._reestimate()
        self._event(
            rec.job.name,
            "correction",
            {
                "measured_step_s": measured,
                "speed": self.correction.speed.tolist(),
                "unexplained": rec.unexplained,
                "corrected_step_s": rec.placement["corrected_step_s"],
            },
        )

    def _learn_from_last_steps(self, rec: JobRecord) -> None:
        """A run that finished: one last correction from its last whole rounds. Corrections
        come every OBSERVE_EVERY steps, and the steps after the last one (a DiLoCo run's last
        round, with its sync) would otherwise never be learnt from. Nothing is re-planned:
        the others are at their next correction."""
        measured = rec.measured()
        if rec.chosen is not None and measured is not None:
            self._observe(rec, rec.chosen, measured)

    def _corrected(self) -> ClusterView:
        """The view the controller decides and predicts on: the model corrected by what its
        jobs taught it, links nothing was learnt of expected to deliver what the learnt ones
        did (`Correction.pooled`: at the model's full rate, every untried link would look
        faster than the ones jobs run on, and a job placed there predicted too fast)."""
        view = self._view()
        return self.correction.pooled(view.fabric).apply(view)

    def _reestimate(self) -> None:
        """Every running job's step time on the model as corrected now."""
        corrected = self._corrected()
        for other in self.jobs.values():
            if other.status == "running" and other.chosen is not None:
                other.placement["corrected_step_s"] = self._step_s(other, other.chosen, corrected)

    def _step_s(self, rec: JobRecord, p: Placement, view: ClusterView) -> float:
        """The job's step on `p` by the model on `view`, with what is its own across domains."""
        spec = rec.job.spec(0.0)
        return rec.across(p) * estimate_placement(p, spec, view, self.search_options).step_time_s

    def _replan_running(self) -> None:
        """Weigh a move for every running job on the corrected model."""
        view = self._corrected()
        for other in self.jobs.values():
            if (
                other.status == "running"
                and other.moving is None
                and other.chosen
                and other.preempting is None
                and not other.cancel
            ):
                self._replan(other, other.chosen, view)

    def _replan(self, rec: JobRecord, chosen: Placement, view: ClusterView) -> None:
        """Move a running job when, on the corrected model, another placement saves within
        MOVE_HORIZON_S MOVE_GAIN times what moving costs (its measured start-up, and the steps
        since its last checkpoint trained again). It stops at its next ask and queues again
        with its checkpoint; the policy then places it on the corrected model."""
        spec = rec.job.spec(0.0)
        best = self.policy.replan(spec, chosen, view)
        if (
            best is None
            or rec.startup_s is None
            or (best.names, best.gpus, best.plan) == (chosen.names, chosen.gpus, chosen.plan)
        ):
            return
        # both on the same view: the job's own links taught, the others pooled
        now_s = self._step_s(rec, chosen, view)
        then_s = rec.across(best) * best.estimate.step_time_s
        gain = move_gain_s(now_s, then_s, rec.job.steps - rec.step)
        cost = rec.startup_s + (rec.step % rec.job.checkpoint_every + ASK_EVERY) * then_s
        if gain > MOVE_GAIN * cost:
            rec.moving = {
                "domains": dict(zip(best.names, best.gpus, strict=True)),
                "step_s": then_s,
                "from_step_s": now_s,
                "gain_s": gain,
                "cost_s": cost,
                "at_step": rec.step,
            }
            self._event(rec.job.name, "moving", rec.moving)
            log.info(
                "%s: moves: %.1f s sooner on %s, moving costs %.1f s",
                rec.job.name,
                gain,
                rec.moving["domains"],
                cost,
            )

    def stopped(self, name: str, attempt: int, step: int = 0) -> int:
        """What a run must do at `step`: go on (GO); stop (STOP: cancelled, not its current
        run, or moving and not at a step it checkpoints: it stops after the checkpoint); or
        save a checkpoint and stop (SAVE_AND_STOP: preempted)."""
        with self.lock:
            rec = self.jobs.get(name)
            if not self._current(rec, attempt) or rec.cancel:
                return STOP
            if rec.preempting is not None:
                rec.checkpointed = step  # it saves there, then stops
                return SAVE_AND_STOP
            moving = rec.moving is not None and step % rec.job.checkpoint_every != 0
            return STOP if moving else GO

    @staticmethod
    def _current(rec: JobRecord | None, attempt: int) -> TypeGuard[JobRecord]:
        """Whether a run of this attempt is the job's latest and still under way: not one
        given up (its job queued again, placed anew, or ended by force). A finished run's last
        report may come after the run was reaped: it counts."""
        return (
            rec is not None
            and rec.attempts == attempt
            and (rec.status == "running" or rec.status == "done")
        )

    # ---- the loop
    def _loop(self) -> None:
        while True:
            for part in (
                self._heartbeats,
                self._reports,
                self._reap,
                self._watch,
                self._relax,
                self._schedule,
                self._publish,
            ):
                try:
                    part()
                except Exception:  # the loop must outlive any one bad round
                    log.exception("controller round failed in %s", part.__name__)
            time.sleep(TICK_S)

    def _relax(self) -> None:
        now = time.time()
        with self.lock:
            share = 1.0 - 0.5 ** ((now - self.relaxed_at) / CORRECTION_HALF_LIFE_S)
            self.correction, self.relaxed_at = self.correction.relaxed(share), now

    def _heartbeats(self) -> None:
        """Ping every domain's agent, hear the answers, and act on what the failure detector
        confirms (`live.health`): a domain found down loses its runs, which queue again. A dead
        agent, or one hung on a node found alive, is replaced (a fresh one waits, pending, for
        a node of its domain)."""
        now = time.time()
        for n, got in self.pings.answers().items():
            if isinstance(got, Exception):
                self.health.failed(
                    n,
                    f"its agent answered {type(got).__name__}: "
                    f"{str(got).strip().splitlines()[-1][:200]}",
                    now,
                )
                if isinstance(got, RayActorError):
                    self._respawn(n, now)
            else:
                self.health.heard(n, now)
        for n in self.names:
            if n not in self.down and self.pings.waiting_s(n, now) > AGENT_STUCK_S:
                self._respawn(n, now)
        if self.pings.due():
            for n, agent in self.agents.items():
                self.pings.ask(n, agent.ping.remote)
        lost = self.health.judge(now)
        with self.lock:
            for kind, record in self.health.take():
                self._event("", kind, record)
                log.warning("%s: %s", kind, record)
                if kind == "domain_down":
                    self.outages.append(
                        {"domain": record["domain"], "down_s": now - self.started, "up_s": None}
                    )
                elif kind == "domain_up":
                    for o in self.outages:
                        if o["domain"] == record["domain"] and o["up_s"] is None:
                            o["up_s"] = now - self.started
            for n in lost:
                self._fail_jobs_on(n)

    def _respawn(self, domain: str, now: float) -> None:
        """A fresh agent for the domain, at most every RESPAWN_S."""
        if now - self.respawned[domain] < RESPAWN_S:
            return
        ray.kill(self.agents[domain])
        self.agents[domain], self.respawned[domain] = self._agent(domain), now
        for rounds in (self.pings, self.report_rounds, self.link_rounds):
            rounds.under_way.pop(domain, None)

    def _reports(self) -> None:
        """Keep the agents' reports and link rates that came back, and ask each domain that
        is up for new ones, a report every REPORT_EVERY_S, the rates every LINKS_EVERY_S."""
        for n, got in self.report_rounds.answers().items():
            if isinstance(got, Exception):
                log.warning("domain %s did not report: %s", n, got)
            else:
                self.reports[n] = self._with_indicators(got)
                for dst, ms in got["rtt_ms"].items():  # measured: the planner's from now on
                    self.rtt_ms[self.names.index(n), self.names.index(dst)] = ms
        for n, got in self.link_rounds.answers().items():
            if not isinstance(got, Exception):
                self._links_reported(n, got)
        up = {n: a for n, a in self.agents.items() if n not in self.down}
        if self.report_rounds.due():
            hosted = self._hosted()
            for n, agent in up.items():
                self.report_rounds.ask(n, partial(agent.report.remote, hosted[n]))
        if self.link_rounds.due():
            for n, agent in up.items():
                self.link_rounds.ask(n, agent.link_rates.remote)

    def _links_reported(self, src: str, rates: dict[str, float]) -> None:
        """Plan with each link's rate as the domain's agent reads it; when one has swung,
        journal it and re-plan the running jobs with it (they may move off a slowed link)."""
        i = self.names.index(src)
        with self.lock:
            swung = False
            for dst, now in rates.items():
                j = self.names.index(dst)
                before = self.bucket_gbps[i, j]
                if abs(now - before) > LINK_SWING * before:
                    record = {"src": src, "dst": dst, "from_gbps": before, "gbps": now}
                    self._event("", "link_changed", record)
                    # what the correction learnt of the link, and the steps of the runs across
                    # it, are of the link before: a window mixing both would tell the
                    # correction the link is faster than it now is
                    self.correction = self.correction.forgetting_link(i, j)
                    for rec in self._running_on(src, dst):
                        self._event(rec.job.name, "link_changed", record)
                        rec.measure_afresh()
                    log.info("link %s -> %s: %.4g -> %.4g Gbit/s", src, dst, before, now)
                    self.bucket_gbps[i, j] = self.links_gbps[i, j] = now
                    swung = True
            if swung:
                self._reestimate()
                self._replan_running()

    def _with_indicators(self, report: dict) -> dict:
        """The report with its 12 indicators, each checked as a study checks a sample (a
        rejected one is named with why, and left out)."""
        domain = self.scn.domains[self.names.index(report["domain"])]
        probed = {r["dst"]: r["measured_gbps"] for r in self.probed if r["src"] == report["domain"]}
        good, rejected = checked(indicators(report, domain, probed), time.time())
        return {**report, "indicators": {s.name: s.value for s in good}, "rejected": rejected}

    def _hosted(self) -> dict[str, list[dict]]:
        """Per domain, the jobs with a run there now, and when each should finish."""
        hosted: dict[str, list[dict]] = {n: [] for n in self.names}
        with self.lock:
            for rec in self._active():
                # its wall time a step where heard: its step times leave out its checkpoints
                step_s = (
                    rec.wall_step_s() or rec.measured() or rec.placement.get("corrected_step_s")
                )
                finish = None if step_s is None else (rec.job.steps - rec.step) * step_s / 60
                for d, n in rec.placement["domains"].items():
                    hosted[d].append({"job": rec.job.name, "workers": n, "finish_min": finish})
        return hosted

    # ---- a run's ways out
    def _fail_jobs_on(self, domain: str) -> None:
        """A domain found down: the runs with workers there end now (their placement groups
        removed) and their jobs queue again; they resume from their last checkpoint wherever
        the policy puts them next."""
        for rec in self._running_on(domain):
            self._requeue(
                rec,
                "requeued",
                {
                    "domain": domain,
                    "from_step": rec.step,
                    "down_at": self.down[domain],
                    "last_heartbeat": self.health.heard_at.get(domain),
                },
            )

    def _release(self, rec: JobRecord) -> dict:
        """End the run's life: remove its placement group (its workers end with it) and
        cancel its driving task. What was released."""
        released = {}
        if rec.group is not None:
            try:
                ray.util.remove_placement_group(rec.group)
                released["placement_group"] = placement_group_name(rec.job.name, rec.attempts)
            except Exception as err:  # removed already (the run's end raced it): nothing held
                log.info("%s: placement group: %s", rec.job.name, err)
        if rec.run is not None:
            ray.cancel(rec.run, force=True, recursive=True)
        rec.run = rec.group = None
        return released

    def _requeue(self, rec: JobRecord, kind: str, record: dict) -> None:
        released = self._release(rec)
        rec.status, rec.moving, rec.preempting, rec.placement = "queued", None, None, {}
        self._event(rec.job.name, kind, {"step": rec.step, **record, **released})

    def _end(self, rec: JobRecord, status: str, record: dict) -> None:
        super()._end(rec, status, {**record, **self._release(rec)})

    def _running_on(self, *domains: str) -> list[JobRecord]:
        """The jobs with a run in every one of `domains`."""
        return [r for r in self._active() if set(domains) <= set(r.placement.get("domains", {}))]

    def _active(self) -> list[JobRecord]:
        return [r for r in self.jobs.values() if r.status == "running"]

    def _reap(self) -> None:
        """Runs that ended: each job is done, cancelled, queued again (moved, preempted, its
        run failed) or, after MAX_FAILED_RUNS failed runs in a row, failed."""
        with self.lock:
            running = {r.run: r for r in self._active() if r.run is not None}
        if not running:
            return
        done, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
        for ref in done:
            rec = running[ref]
            try:
                ended = ray.get(ref)
            except Exception as err:  # the runner itself died
                ended = {"error": f"{type(err).__name__}: {err}"}
            with self.lock:
                if rec.run is not ref:
                    continue  # ended meanwhile (cancelled, lost)
                self._ended(rec, ended)

    def _ended(self, rec: JobRecord, ended: dict) -> None:
        error = ended["error"]
        if ended.get("step", 0) > rec.step:
            rec.step, rec.loss = int(ended["step"]), float(ended["loss"])
        if rec.cancel:
            self._end(rec, "cancelled" if rec.step < rec.job.steps else "done", {})
        elif rec.step >= rec.job.steps and not error:
            self._learn_from_last_steps(rec)  # while it still counts as running
            self._end(rec, "done", {})
        elif rec.preempting is not None and not error:
            self._requeue(rec, "preempted", {"checkpoint": rec.checkpointed, **rec.preempting})
        elif rec.moving is not None and not error:
            self._requeue(rec, "moved", {})
        else:
            self._failed_run(rec, "run_failed", {"error": error or "it stopped early"})

    def _failed_run(self, rec: JobRecord, kind: str, record: dict) -> None:
        rec.failures += 1
        if rec.failures >= MAX_FAILED_RUNS:
            self._event(rec.job.name, kind, record)
            self._end(rec, "failed", {"error": f"{rec.failures} runs in a row failed", **record})
        else:
            self._requeue(rec, kind, record)

    def _watch(self) -> None:
        """The watchdog: a run that has not stepped for its job's `startup_timeout_s` since
        its launch (or its last step) is ended and queued again; a cancelled run still going
        CANCEL_GRACE_S after is ended by force. A placement group held for a run that never
        starts would keep its accelerators from every other job."""
        now = time.time()
        with self.lock:
            for rec in self._active():
                if rec.cancel_at is not None and now - rec.cancel_at > CANCEL_GRACE_S:
                    self._end(rec, "cancelled", {"forced_after_s": now - rec.cancel_at})
                    continue
                if (
                    rec.group is not None
                    and "placement" not in rec.marks
                    and self._placed(rec.group)
                ):
                    rec.marks["placement"] = now
                since = rec.stepped_at or rec.placed_at
                if now - since > rec.job.startup_timeout_s:
                    stage = "starting" if rec.stepped_at is None else "stalled"
                    self._failed_run(
                        rec,
                        "watchdog",
                        {
                            "stage": stage,
                            "after_s": now - since,
                            "marks": {k: t - rec.placed_at for k, t in rec.marks.items()},
                        },
                    )

    @staticmethod
    def _placed(group) -> bool:
        return ray.util.placement_group_table(group).get("state") == "CREATED"

    def _free(self) -> dict[str, int]:
        """Per domain, the accelerators no run holds, or being given back (a run preempted or
        cancelled stops within seconds: what takes its place waits for its placement group)."""
        held = dict.fromkeys(self.names, 0)
        for rec in self._active():
            if rec.preempting is None and not rec.cancel:
                for d, n in rec.placement["domains"].items():
                    held[d] += n
        return {
            d.name: 0 if d.name in self.down else d.gpus - held[d.name] for d in self.scn.domains
        }

    def _schedule(self) -> None:
        """Place what may start now: the tenants' rules first (preempt for queued jobs that
        cannot start, offer the policy only what quotas admit), then the policy's decision on
        the corrected, measured view."""
        with self.lock:
            queued = [r for r in self.jobs.values() if r.status == "queued" and not r.cancel]
            if not queued:
                return
            now = time.time()
            runs = {
                r.job.name: as_run(r, self.started, self.names) for r in [*queued, *self._active()]
            }
            active = [
                runs[r.job.name] for r in self._active() if r.preempting is None and not r.cancel
            ]
            self._preempt([runs[r.job.name] for r in queued], active, now)
            specs, used = self.tenancy.admissible(
                [runs[r.job.name] for r in queued], [runs[r.job.name] for r in self._active()]
            )
            if not specs:
                return
            view = self._corrected()
            t0 = time.perf_counter()
            placements = self._decide(specs, view, now)
            ms = (time.perf_counter() - t0) * 1000
            for p in placements:
                rec = self.jobs[p.job]
                if self.tenancy.accept(rec.job.tenant, p.taken, used):
                    self._launch(rec, p, ms)

    def _decide(self, specs: list, view: ClusterView, now: float) -> list:
        """The policy's placements; a job it cannot plan at all (a spec that passed the
        check at submission, but not on a cluster changed since) fails alone, with the
        planner's reason, instead of holding up every other."""

        try:
            return self.policy.decide(specs, view, now - self.started)
        except UserError:
            good = []
            for spec in specs:
                try:
                    self.policy.decide([spec], view.empty(), now - self.started)
                    good.append(spec)
                except UserError as err:
                    self._end(self.jobs[spec.name], "failed", {"error": str(err)})
            return self.policy.decide(good, view, now - self.started) if good else []

    def _preempt(self, queued: list, active: list, now: float) -> None:
        """Mark the jobs the tenants' rules preempt for the queued ones: each saves a
        checkpoint at its next question and queues again."""
        free = self._free()
        chosen = self.tenancy.victims(
            queued, active, [free[n] for n in self.names], now - self.started
        )
        for name, why in chosen.items():
            rec = self.jobs[name]
            rec.preempting = {"why": why, "at_step": rec.step}
            self._event(name, "preempting", {**rec.preempting, "domains": rec.placement["domains"]})
            log.info("%s: preempted: %s", name, why)
            if rec.stepped_at is None:  # still starting: nothing to save, it goes at once
                self._requeue(rec, "preempted", {"checkpoint": rec.checkpointed, "why": why})

    def _view(self) -> ClusterView:
        """The cluster as the scenario builds it, with its free accelerators, and its links as
        measured: the rate each agent reads (or a probe's goodput since), the round trip each
        agent times."""
        view = ClusterView.from_scenario(self.scn, self._free())
        return view.with_links(self.links_gbps, self.rtt_ms)

    def _launch(self, rec: JobRecord, p, decision_ms: float = 0.0) -> None:
        workers = [name for name, n in zip(p.names, p.gpus, strict=True) for _ in range(n)]
        plan = p.plan
        by_speed = domain_batches(p, rec.job.global_batch)
        rec.placement = {
            "policy": self.state.policy,
            "kind": p.kind,
            "domains": dict(zip(p.names, p.gpus, strict=True)),
            "plan": f"DP {plan.dp}, micro-batch {plan.micro_batch}"
            + (f", DiLoCo every {plan.diloco_h} steps" if plan.diloco_h else "")
            + (
                ", samples a step " + ", ".join(f"{d} {n}" for d, n in by_speed.items())
                if by_speed
                else ""
            ),
            "domain_batch": by_speed,
            "diloco_h": plan.diloco_h,
            "reason": p.explanation,
            "predicted_step_s": self._nominal(rec, p),
            "corrected_step_s": (rec.across(p) * p.estimate.step_time_s if p.estimate else None),
            "decision_ms": decision_ms,
        }
        rec.status, rec.attempts, rec.chosen = "running", rec.attempts + 1, p
        rec.measure_afresh()
        rec.placed_at, rec.stepped_at, rec.startup_s = time.time(), None, None
        rec.moving, rec.preempting, rec.marks = None, None, {}
        use_gpu = any(self.scn.domains[i].accelerator.vendor != "CPU" for i in p.domains)
        rec.group = make_placement_group(rec.job.name, rec.attempts, workers, use_gpu)
        cfg = rec.job.train_config(
            plan.diloco_h if len(p.names) > 1 else 0,
            CONTROLLER,
            self.storage,
            plan.micro_batch,
            rec.attempts,
            launched_at=rec.placed_at,
            placement_group=placement_group_name(rec.job.name, rec.attempts),
            domain_batch=by_speed,
        )
        rec.run = run_training.options(label_selector={HEAD_LABEL: "head"}).remote(
            cfg.model_dump(), workers, self.storage, use_gpu
        )
        self._event(
            rec.job.name, "placed", {**rec.placement, "workers": workers, "attempt": rec.attempts}
        )
        log.info("%s: %s", rec.job.name, p.explanation)

    def _nominal(self, rec: JobRecord, p) -> float:
        """The step time the model predicts without any correction (the profile alone)."""
        view = self._view()
        return estimate_placement(p, rec.job.spec(0.0), view, self.search_options).step_time_s

    # ---- plumbing
    def _agent(self, name: str):
        return DomainAgent.options(  # type: ignore[attr-defined]  # a Ray actor class
            label_selector={DOMAIN_LABEL: name}
        ).remote(name, self.names, self.state.api, self.state.api_token)

    def _path(self, name: str):

        folder = Path(self.storage)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / name

    def _event(self, job: str, kind: str, record: dict) -> None:
        with self.lock:
            super()._event(job, kind, record)
            self.board.decided(time.time(), job, kind, record)

    def _publish(self) -> None:
        """The cluster's state on the studies' board (`live.board`): the dashboard at `/`."""
        if not self.board.due():
            return
        with self.lock:
            now, free = time.time(), self._free()
            held = {n: 0 for n in self.names}
            for rec in self._active():
                for d, k in rec.placement["domains"].items():
                    held[d] += k
            rtt = {
                (n, dst): ms
                for n, r in self.reports.items()
                for dst, ms in (r.get("rtt_ms") or {}).items()
            }
            jobs = [
                job_state(r.row(), r.submitted - self.started, r.job.global_batch * r.job.model.seq)
                for r in self.jobs.values()
            ]
            queue = [
                {
                    "name": r.job.name,
                    "tenant": r.job.tenant,
                    "priority": r.priority,
                    "waited_s": now - r.submitted,
                    "gpus_min": r.job.workers.min,
                }
                for r in self.jobs.values()
                if r.status == "queued" and not r.cancel
            ]
            state = {
                "policy": LIVE,
                "live": True,
                "scenario": self.scn.name,
                "now_s": now - self.started,
                "horizon_s": 0.0,
                "finished": False,
                "domains": domains_state(
                    self.scn,
                    self.names,
                    self.reports,
                    free,
                    held,
                    {n: self._health(n, now) for n in self.names},
                ),
                "links": links_state(self.names, self.links_gbps, self.leased_gbps, rtt),
                "jobs": jobs,
                "queue": queue,
                "faults": {"outages": list(self.outages), "incidents": []},
            }
        self.board.publish(state)

    def _replay_event(self, t: float, name: str, kind: str, data: dict) -> None:
        """The cluster's own events (profiles, probes, link changes) as they were; the jobs'
        as a JobBook replays them."""
        if kind == "profiled":
            self._adopt(data["entries"], data["constants"])
        elif kind == "links_probed":
            self._probed(data["links"])
        elif kind == "link_changed":
            i, j = self.names.index(data["src"]), self.names.index(data["dst"])
            self.bucket_gbps[i, j] = self.links_gbps[i, j] = data["gbps"]
        else:
            super()._replay_event(t, name, kind, data)


def controller(state: ClusterState):
    """The cluster's controller: the running one, or a new one that replays the journal."""
    return LiveController.options(  # type: ignore[attr-defined]  # a Ray actor class
        name=CONTROLLER,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        label_selector={HEAD_LABEL: "head"},
    ).remote(state.model_dump_json())


def ask(method, *args, timeout_s: float = 120.0):
    """A controller call's answer; UserError with the controller's own message when it
    refuses, or when it does not answer in time."""

    try:
        return ray.get(method.remote(*args), timeout=timeout_s)
    except GetTimeoutError:
        raise UserError(f"the controller did not answer within {timeout_s:.0f} s") from None
    except RayTaskError as err:
        cause = err.cause if err.cause is not None else err
        raise UserError(str(cause).strip().splitlines()[-1]) from None
