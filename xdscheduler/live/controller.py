"""The live control plane: a detached, named controller actor that owns one agent per domain,
decides where submitted jobs run with the same policy the studies use, launches them as Ray
Train runs pinned to their domains by label, hears every step, and writes a journal that a
controller started after it replays (its running jobs go on from their last checkpoints)."""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
from dataclasses import dataclass, field, replace

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from xdscheduler.costmodel.plan import Stack
from xdscheduler.errors import UserError
from xdscheduler.live.agent import DomainAgent, indicators
from xdscheduler.live.cluster import DOMAIN_LABEL, HEAD_LABEL, NAMESPACE, ClusterState
from xdscheduler.live.jobs import JobRow, LiveJob
from xdscheduler.live.training import ASK_EVERY, train_loop, trainer_env
from xdscheduler.perception.indicators import checked
from xdscheduler.planner.baselines import ONLINE
from xdscheduler.planner.policies import PlannerPolicy
from xdscheduler.planner.search import estimate_placement
from xdscheduler.planner.space import SearchOptions
from xdscheduler.planner.view import ClusterView
from xdscheduler.runtime.journal import open_log
from xdscheduler.scenario import load_scenario
from xdscheduler.sim.correction import Correction

log = logging.getLogger("xdscheduler.live")

CONTROLLER = "xds-controller"
TICK_S = 0.2  # how often the controller hears its domains and decides
PING_TIMEOUT_S = 0.4  # a heartbeat not back within this is missed
# Four late heartbeats in a row (a round is 0.6 s: < 3 s) and the domain is down; an agent that
# answers with an error (its raylet gone) or is dead, at once. Two late ones were not enough:
# while Ray Train runs start on 2 busy cores, a healthy agent answered late twice in a row.
MISSES_TO_DOWN = 4
WARMUP_STEPS = 3  # a run's first steps (allocation, first collectives) say nothing of speed
# A run's step time is what its last this many steps took: enough that a few jittery steps do
# not move it, few enough that a slowdown shows within as many steps, however long it ran
RECENT_STEPS = 30
OBSERVE_EVERY = 5  # steps between two corrections from one run
KEEP_CHECKPOINTS = 5  # per job, in its storage (Ray Train deletes the older ones)
RESPAWN_EVERY = 20  # missed heartbeats between fresh agents for a domain that is down
MOVE_GAIN = 2.0  # a running job moves when that saves this many times what moving costs
# What the correction learnt halves (in logs) every this long unless runs confirm it: a domain
# found slow and left since is tried again once its slowdown may be over
CORRECTION_HALF_LIFE_S = 300.0
REPORT_EVERY_S = 5.0  # how often each domain's agent reports its state
LINKS_EVERY_S = 1.0  # how often each domain's agent reads its links' rates (a quick read)
# A link whose rate an agent reports this far (relative) from what the controller plans with
# has swung: the controller plans with the new rate and re-plans its running jobs
LINK_SWING = 0.2
# A run on a domain found down stops by itself: at its next ask if its workers live (a false
# "down"), or when Ray Train finds a worker dead. Either way Ray Train releases its placement
# group. Only a run still going after this long is cancelled by force: a forced cancel can
# leave its placement group behind, and the job's next run would wait for ever for workers.
LOST_STOP_S = 30.0
# The live runner trains data-parallel plans (hierarchical across domains, DiLoCo every H):
# the planner searches those, in FP32 (what CPUs and gloo run), DiLoCo every 10 steps, with
# the runner's own software: a plain loop that reduces the gradients after the backward pass.
LIVE_OPTIONS = replace(ONLINE, tensor=(1,), max_pipeline=1, context=(1,), virtual=(1,),
                       kinds=("single", "data"), dtype="fp32", diloco_h=(0, 10),
                       micro_batch=(1, 2, 4, 8, 16), stack=Stack.preset("plain-dp"),
                       balance=False)  # the runner gives every replica an even share

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    idx INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, job TEXT NOT NULL,
    kind TEXT NOT NULL, record TEXT NOT NULL);
"""


class Rounds:
    """One question asked of every domain's agent every `every_s`, at most one under way per
    domain: nothing here waits for an answer, and a slow domain delays no other."""

    def __init__(self, every_s: float):
        self.every_s, self.asked_at = every_s, 0.0
        self.under_way: dict[str, ray.ObjectRef] = {}

    def answers(self) -> dict[str, object]:
        """Per domain, its answer that came back since the last call (the error, if it
        failed)."""
        if not self.under_way:
            return {}
        ready, _ = ray.wait(list(self.under_way.values()), num_returns=len(self.under_way),
                            timeout=0)
        out = {}
        for n, ref in [(n, r) for n, r in self.under_way.items() if r in ready]:
            del self.under_way[n]
            try:
                out[n] = ray.get(ref)
            except (RayActorError, RayTaskError) as err:
                out[n] = err
        return out

    def due(self) -> bool:
        """Whether a round is due now (then it counts as asked)."""
        if time.time() - self.asked_at < self.every_s:
            return False
        self.asked_at = time.time()
        return True

    def ask(self, name: str, call) -> None:
        """`call()` (an ObjectRef) for domain `name`, unless its last answer is still due."""
        if name not in self.under_way:
            self.under_way[name] = call()


@dataclass
class JobRecord:
    job: LiveJob
    submitted: float
    status: str = "queued"  # queued, running, done, failed, cancelled
    placement: dict = field(default_factory=dict)  # domains, workers, plan, why, predicted
    step: int = 0
    loss: float | None = None
    first_loss: float | None = None
    step_times: list = field(default_factory=list)
    attempts: int = 0
    run: object = None  # the runner task's ObjectRef
    cancel: bool = False
    chosen: object = None  # the Placement it runs on (this controller's decision)
    observed: int = 0  # steps the correction has seen of this run
    placed_at: float = 0.0  # when this run was launched
    startup_s: float | None = None  # from launch to its first step: what a restart costs
    moving: dict | None = None  # a better placement found: stop at the next ask, queue again
    lost_at: float | None = None  # when a domain it runs on was found down: stopping, to queue

    def hear(self, metrics: dict) -> None:
        """One step of its run: where it is, its loss, how long it took."""
        if self.startup_s is None and self.placed_at:
            self.startup_s = time.time() - self.placed_at
        self.step, self.loss = int(metrics["step"]), float(metrics["loss"])
        self.first_loss = self.loss if self.first_loss is None else self.first_loss
        self.step_times.append(float(metrics["step_time_s"]))

    def measured(self) -> float | None:
        """Step time of this run now: the median of its last RECENT_STEPS steps since it
        warmed up (a few steps can be far off when the machine is busy). A run that averages
        its domains' weights every H steps takes that sync in one step of H: the median over
        its whole rounds of H steps of their mean step, so the sync counts as it does in the
        job's time (None before one whole round: its steps alone would leave the sync out)."""
        tail = self.step_times[WARMUP_STEPS:][-RECENT_STEPS:]
        crossing = len(self.placement.get("domains", {})) > 1
        h = (self.placement.get("diloco_h") or 1) if crossing else 1
        first = self.step - len(tail) + 1  # the step number of tail[0]; syncs end rounds
        start = -(first - 1) % h
        rounds = [statistics.fmean(tail[i:i + h]) for i in range(start, len(tail) - h + 1, h)]
        return statistics.median(rounds) if rounds else None

    def measure_afresh(self) -> None:
        """Forget the steps seen so far: they tell nothing of the run's new conditions (a new
        placement, a link that changed under it)."""
        self.step_times, self.observed = [], 0

    def row(self) -> dict:
        return JobRow(
            job=self.job.name, status=self.status, step=self.step, steps=self.job.steps,
            loss=self.loss, first_loss=self.first_loss,
            domains=self.placement.get("domains", {}), kind=self.placement.get("kind"),
            plan=self.placement.get("plan"), reason=self.placement.get("reason"),
            predicted_step_s=self.placement.get("predicted_step_s"),
            corrected_step_s=self.placement.get("corrected_step_s"),
            measured_step_s=self.measured(), attempts=self.attempts).model_dump()


def options(state: ClusterState) -> SearchOptions:
    """The live search space, with the constants of the cluster's profile where it has one."""
    if state.profile is None:
        return LIVE_OPTIONS
    from xdscheduler.costmodel.calibration import Profile

    return replace(LIVE_OPTIONS, calibration=Profile.load(state.profile).calibration)


def live_policy(state: ClusterState, weights, opts: SearchOptions, stepper=None):
    """The cluster's policy over the live search space `opts`: the planner, or (`ppo`) the
    trained agents choosing among the same candidates, each agent's step asked of the policy
    app (`POST /policy/act`: the upper agent picks the domains and accelerators, the lower the
    plan inside them), or of `stepper` (the agents in process)."""
    if state.policy == "planner":
        return PlannerPolicy(weights, "planner", opts)
    from xdscheduler.rl.agents import PPOPolicy, decide
    from xdscheduler.serving.client import PolicyClient

    stepper = stepper or PolicyClient(state.api, state.api_token)
    policy = PPOPolicy(weights, lambda job, view, queued, now, job_weights: decide(
        stepper, job_weights, job, view, queued, now, opts))
    policy.planner = PlannerPolicy(weights, "planner", opts)  # it re-plans in the same space
    return policy


@ray.remote(num_cpus=0, max_retries=0)
def run_training(config: dict, workers: list[str], storage: str, use_gpu: bool) -> dict:
    """One Ray Train run: a worker per entry of `workers`, pinned to that domain by label.
    A run started again under the same name resumes from its last checkpoint."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    trainer = TorchTrainer(
        train_loop, train_loop_config=config,
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=len(workers), use_gpu=use_gpu,
            resources_per_worker=None if use_gpu else {"CPU": 1},
            label_selector=[{DOMAIN_LABEL: d} for d in workers]),
        run_config=RunConfig(name=config["job"], storage_path=storage,
                             checkpoint_config=CheckpointConfig(num_to_keep=KEEP_CHECKPOINTS),
                             failure_config=FailureConfig(max_failures=0)))
    result = trainer.fit()
    # its last checkpoint's step and loss: the steps are heard one by one, and the last may
    # still be on its way when the run is reaped
    last = {k: result.metrics[k] for k in ("step", "loss")} if result.metrics else {}
    return {"error": str(result.error) if result.error else None, **last}


class JobBook:
    """The live jobs as the CLI and the jobs API see them: the job table, and the journal of
    their events that a controller started later replays. The controller is one (and places
    and runs what it holds); a JobBook alone answers the API in a process of its own."""

    def __init__(self, journal):
        self.db = open_log(journal, SCHEMA, threads=True)
        self.lock = threading.RLock()
        self.jobs: dict[str, JobRecord] = {}

    def submit(self, spec: dict) -> dict:
        job = LiveJob.model_validate(spec)
        with self.lock:
            if job.name in self.jobs:
                raise UserError(f"a job named {job.name!r} exists already; pick another name")
            self.jobs[job.name] = JobRecord(job, time.time())
            self._event(job.name, "submitted", job.model_dump())
        return self.jobs[job.name].row()

    def list_jobs(self) -> list[dict]:
        with self.lock:
            return [r.row() for r in self.jobs.values()]

    def job(self, name: str) -> dict | None:
        rec = self.jobs.get(name)
        return rec.row() if rec else None

    def events(self, name: str) -> list[dict]:
        with self.lock:
            rows = self.db.execute("SELECT time, kind, record FROM events WHERE job = ? "
                                   "ORDER BY idx", (name,)).fetchall()
        return [{**json.loads(r), "time": t, "event": k} for t, k, r in rows]

    def cancel_job(self, name: str) -> dict | None:
        with self.lock:
            rec = self.jobs.get(name)
            if rec is None:
                return None
            rec.cancel = True
            if rec.status == "queued":
                rec.status = "cancelled"
            self._event(name, "cancel", {"status": rec.status})
            return rec.row()

    def _event(self, job: str, kind: str, record: dict) -> None:
        with self.lock:
            self.db.execute("INSERT INTO events (time, job, kind, record) VALUES (?, ?, ?, ?)",
                            (time.time(), job, kind, json.dumps(record, default=str)))


@ray.remote(num_cpus=0, max_concurrency=64)
class LiveController(JobBook):
    def __init__(self, state: str):
        self.state = ClusterState.model_validate_json(state)
        self.scn = load_scenario(self.state.scenario)
        self.names = [d.name for d in self.scn.domains]
        self.storage = self.state.storage
        # what each run's driving task runs in; the GCS as this actor reaches it (HOST:PORT: a
        # cluster attached to may be recorded as auto or ray://)
        self.run_env = {"env_vars": trainer_env(self.state.dashboard,
                                                ray.get_runtime_context().gcs_address)}
        self.options = options(self.state)
        self.policy = live_policy(self.state, self.scn.weights, self.options)
        super().__init__(self._path("journal.sqlite"))
        self.agents = {n: self._agent(n) for n in self.names}
        self.misses = dict.fromkeys(self.names, 0)
        self.heard_at: dict[str, float] = {}  # domain -> its agent's last answered ping
        self.down: dict[str, float] = {}  # domain -> when it was found down
        self.started = time.time()
        self.reports: dict[str, dict] = {}  # domain -> its agent's latest report
        self.report_rounds, self.link_rounds = Rounds(REPORT_EVERY_S), Rounds(LINKS_EVERY_S)
        self.probed: list[dict] = []  # the last `xds links probe`
        # [i, j]: the link from domain i to j as its agent last reported it (Gbit/s)
        self.links_gbps = ClusterView.from_scenario(self.scn).bandwidth_gbps.copy()
        # the model's error as learnt from the runs' step times: a speed per domain, a goodput
        # per link (the studies' correction, `sim.correction`)
        self.correction = Correction.start(len(self.names))
        self.relaxed_at = time.time()
        self._replay()
        threading.Thread(target=self._loop, daemon=True).start()

    # ---- the rest of the API the CLI and the HTTP endpoints call (JobBook: the jobs)
    def domains(self) -> dict:
        """Every domain as its agent last reported it (up or down), and the links as the last
        `xds links probe` measured them."""
        with self.lock:
            rows = [{"domain": n, "status": "down" if n in self.down else "up",
                     **self.reports.get(n, {})} for n in self.names]
            return {"domains": rows, "probed": self.probed}

    def links_probed(self, rows: list[dict]) -> None:
        """What `xds links probe` measured (journalled)."""
        with self.lock:
            self.probed = rows
            self._event("", "links_probed", {"links": rows})

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
        self.options = replace(self.options, calibration=replace(DEFAULT, **constants))
        self.policy = live_policy(self.state, self.scn.weights, self.options)

    # ---- what the training workers call
    def heard(self, name: str, metrics: dict) -> None:
        rec = self.jobs.get(name)
        if not self._current(rec, metrics.get("attempt", -1)) or rec.lost_at is not None:
            return  # a run given up for lost, still stepping until it stops: never checkpointed
        with self.lock:
            rec.hear(metrics)
            seen = len(rec.step_times) - WARMUP_STEPS
            if rec.chosen is not None and seen >= OBSERVE_EVERY * (rec.observed + 1):
                measured = rec.measured()
                if measured is not None:
                    self._correct(rec, measured)
        self._event(name, "step", metrics)

    def _correct(self, rec: JobRecord, measured: float) -> None:
        """Learn from the run's last steps (`measured`), then re-plan the running jobs."""
        self._replan_running(self._observe(rec, measured))

    def _observe(self, rec: JobRecord, measured: float) -> ClusterView:
        """Move the model's factor under this run toward what its last steps took
        (`measured`), and say what every running job's estimate is now; the corrected view."""
        spec, view = rec.job.spec(0.0), self._view()
        # a run's measured step sums up many steps: it is taken whole (a study
        # weighs one jittery step rate at WEIGHT); a run's early steps, slowed by a job
        # starting beside it, would otherwise hold the factor back long after
        self.correction = self.correction.observe(rec.chosen, spec, view, measured,
                                                  spread_speed=True, weight=1.0,
                                                  opts=self.options)
        rec.observed += 1
        corrected = self._reestimate()
        self._event(rec.job.name, "correction", {
            "measured_step_s": measured, "speed": self.correction.speed.tolist(),
            "corrected_step_s": rec.placement["corrected_step_s"]})
        return corrected

    def _learn_from_last_steps(self, rec: JobRecord) -> None:
        """A run that finished: one last correction from its last whole rounds. Corrections
        come every OBSERVE_EVERY steps, and the steps after the last one (a DiLoCo run's last
        round, with its sync) would otherwise never be learnt from. Nothing is re-planned:
        the others are at their next correction."""
        measured = rec.measured()
        if rec.chosen is not None and measured is not None:
            self._observe(rec, measured)

    def _reestimate(self) -> ClusterView:
        """Every running job's step time on the model as corrected now; that view."""
        corrected = self.correction.apply(self._view())
        for other in self.jobs.values():
            if other.status == "running" and other.chosen is not None:
                other.placement["corrected_step_s"] = estimate_placement(
                    other.chosen, other.job.spec(0.0), corrected, self.options).step_time_s
        return corrected

    def _replan_running(self, corrected: ClusterView) -> None:
        for other in self.jobs.values():
            if (other.status == "running" and other.moving is None and other.chosen
                    and other.lost_at is None):
                self._replan(other, corrected)

    def _replan(self, rec: JobRecord, corrected: ClusterView) -> None:
        """Move a running job when, on the corrected model, another placement finishes it
        sooner by MOVE_GAIN times what moving costs (its measured start-up, and the steps
        since its last checkpoint trained again). It stops at its next ask and queues again
        with its checkpoint; the policy then places it on the corrected model."""
        spec = rec.job.spec(0.0)
        best = self.policy.replan(spec, rec.chosen, corrected)
        if best is None or rec.startup_s is None or (
                best.names, best.gpus, best.plan) == (rec.chosen.names, rec.chosen.gpus,
                                                      rec.chosen.plan):
            return
        now_s = rec.placement["corrected_step_s"]
        then_s = best.estimate.step_time_s
        gain = (rec.job.steps - rec.step) * (now_s - then_s)
        cost = rec.startup_s + (rec.step % rec.job.checkpoint_every + ASK_EVERY) * then_s
        if gain > MOVE_GAIN * cost:
            rec.moving = {"domains": dict(zip(best.names, best.gpus, strict=True)),
                          "step_s": then_s, "from_step_s": now_s, "gain_s": gain,
                          "cost_s": cost, "at_step": rec.step}
            self._event(rec.job.name, "moving", rec.moving)
            log.info("%s: moves: %.1f s sooner on %s, moving costs %.1f s", rec.job.name,
                     gain, rec.moving["domains"], cost)

    def stopped(self, name: str, attempt: int, step: int = 0) -> bool:
        """Whether a run of the job must stop at `step`: cancelled, not its current placement,
        on a domain found down, or moving (then not at a step it checkpoints: it stops after
        the checkpoint)."""
        rec = self.jobs.get(name)
        if not self._current(rec, attempt) or rec.cancel or rec.lost_at is not None:
            return True
        return rec.moving is not None and step % rec.job.checkpoint_every != 0

    @staticmethod
    def _current(rec: JobRecord | None, attempt: int) -> bool:
        """Whether a run of this attempt is the job's latest: not one given up for lost (its
        job queued again, or placed anew). A finished run's last report may come after the
        run was reaped: it counts."""
        return rec is not None and rec.attempts == attempt and rec.status != "queued"

    # ---- the loop
    def _loop(self) -> None:
        while True:
            try:
                self._heartbeats()
                self._reports()
                self._reap()
                self._stop_lost()
                self._relax()
                self._schedule()
            except Exception:  # the loop must outlive any one bad round
                log.exception("controller round failed")
            time.sleep(TICK_S)

    def _relax(self) -> None:
        now = time.time()
        with self.lock:
            share = 1.0 - 0.5 ** ((now - self.relaxed_at) / CORRECTION_HALF_LIFE_S)
            self.correction, self.relaxed_at = self.correction.relaxed(share), now

    def _heartbeats(self) -> None:
        """Ping every domain's agent; a domain whose agent misses MISSES_TO_DOWN pings in a
        row, or answers with an error, is down (its node, or the way to it, is lost) and its
        jobs queue again."""
        refs = {n: a.ping.remote() for n, a in self.agents.items()}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=PING_TIMEOUT_S)
        now = time.time()
        for n, ref in refs.items():
            ok, lost = ref in ready, False
            if ok:
                try:
                    ray.get(ref)
                except (RayActorError, RayTaskError):
                    ok, lost = False, True
            if ok:
                self.heard_at[n] = now
            elif n not in self.heard_at:
                continue  # its agent is still starting: a domain is judged once it answered
            self.misses[n] = 0 if ok else max(self.misses[n] + 1,
                                              MISSES_TO_DOWN if lost else 0)
            if self.misses[n] >= MISSES_TO_DOWN and n not in self.down:
                self.down[n] = now
                self._event("", "domain_down", {"domain": n, "misses": self.misses[n],
                                                "last_heartbeat": self.heard_at[n]})
                self._fail_jobs_on(n)
            elif ok and n in self.down:
                del self.down[n]
                self._event("", "domain_up", {"domain": n})
            if not ok and self.misses[n] % RESPAWN_EVERY == MISSES_TO_DOWN:
                # a fresh agent waits (pending) for a node of the domain to come back
                ray.kill(self.agents[n])
                self.agents[n] = self._agent(n)
                for rounds in (self.report_rounds, self.link_rounds):
                    rounds.under_way.pop(n, None)

    def _reports(self) -> None:
        """Keep the agents' reports and link rates that came back, and ask each domain that
        is up for new ones, a report every REPORT_EVERY_S, the rates every LINKS_EVERY_S."""
        for n, got in self.report_rounds.answers().items():
            if isinstance(got, Exception):
                log.warning("domain %s did not report: %s", n, got)
            else:
                self.reports[n] = self._with_indicators(got)
        for n, got in self.link_rounds.answers().items():
            if not isinstance(got, Exception):
                self._links_reported(n, got)
        up = {n: a for n, a in self.agents.items() if n not in self.down}
        if self.report_rounds.due():
            hosted = self._hosted()
            for n, agent in up.items():
                self.report_rounds.ask(n, lambda a=agent, n=n: a.report.remote(hosted[n]))
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
                before = self.links_gbps[i, j]
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
                    self.links_gbps[i, j], swung = now, True
            if swung:
                self._replan_running(self._reestimate())

    def _with_indicators(self, report: dict) -> dict:
        """The report with its 12 indicators, each checked as a study checks a sample (a
        rejected one is named with why, and left out)."""
        domain = self.scn.domains[self.names.index(report["domain"])]
        probed = {r["dst"]: r["measured_gbps"] for r in self.probed
                  if r["src"] == report["domain"]}
        good, rejected = checked(indicators(report, domain, probed), time.time())
        return {**report, "indicators": {s.name: s.value for s in good}, "rejected": rejected}

    def _hosted(self) -> dict[str, list[dict]]:
        """Per domain, the running jobs with workers there, and when each should finish."""
        hosted: dict[str, list[dict]] = {n: [] for n in self.names}
        with self.lock:
            for rec in self.jobs.values():
                if rec.status != "running":
                    continue
                step_s = rec.measured() or rec.placement.get("corrected_step_s")
                finish = None if step_s is None else (rec.job.steps - rec.step) * step_s / 60
                for d, n in rec.placement["domains"].items():
                    hosted[d].append({"job": rec.job.name, "workers": n, "finish_min": finish})
        return hosted

    def _fail_jobs_on(self, domain: str) -> None:
        """Jobs with workers in a lost domain stop (see LOST_STOP_S), and queue again: they
        resume from their last checkpoint wherever the policy puts them next."""
        with self.lock:
            for rec in self._running_on(domain):
                if rec.lost_at is None:
                    rec.lost_at = time.time()
                    self._event(rec.job.name, "requeued",
                                {"domain": domain, "from_step": rec.step,
                                 "down_at": self.down[domain],
                                 "last_heartbeat": self.heard_at[domain]})

    def _running_on(self, *domains: str) -> list[JobRecord]:
        """The running jobs with workers in every one of `domains`."""
        return [r for r in self.jobs.values() if r.status == "running"
                and set(domains) <= set(r.placement.get("domains", {}))]

    def _stop_lost(self) -> None:
        """Cancel by force the runs that a lost domain's jobs have not stopped in time."""
        with self.lock:
            late = [r for r in self.jobs.values() if r.status == "running" and r.lost_at
                    and time.time() - r.lost_at > LOST_STOP_S]
            for rec in late:
                ray.cancel(rec.run, force=True, recursive=True)
                if rec.cancel:  # cancelled by its user meanwhile: `_reap` ends it as any other
                    rec.lost_at = None
                else:
                    self._requeue(rec, "cancelled_lost", {"after_s": time.time() - rec.lost_at})

    def _requeue(self, rec: JobRecord, kind: str, record: dict) -> None:
        rec.status, rec.run, rec.moving, rec.lost_at = "queued", None, None, None
        self._event(rec.job.name, kind, {"step": rec.step, **record})

    def _reap(self) -> None:
        running = {r.run: r for r in self.jobs.values() if r.status == "running" and r.run}
        if not running:
            return
        done, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
        for ref in done:
            rec = running[ref]
            try:
                ended = ray.get(ref)
            except Exception as err:  # the runner itself died
                ended = {"error": f"{type(err).__name__}: {err}"}
            error = ended["error"]
            with self.lock:
                if ended.get("step", 0) > rec.step and rec.lost_at is None:
                    rec.step, rec.loss = int(ended["step"]), float(ended["loss"])
                again = not rec.cancel and rec.step < rec.job.steps  # placed again next round
                if again and rec.lost_at is not None:
                    self._requeue(rec, "stopped_lost", {"error": error})
                    continue
                if error and not rec.cancel:
                    rec.status = "failed"
                elif again and rec.moving is not None:
                    self._requeue(rec, "moved", {})
                    continue
                else:
                    finished = not (rec.cancel and rec.step < rec.job.steps)
                    if finished:  # while it still counts as running: its estimate too
                        self._learn_from_last_steps(rec)
                    rec.status = "done" if finished else "cancelled"
                rec.run = None
                self._event(rec.job.name, rec.status, {"step": rec.step, "error": error})

    def _free(self) -> dict[str, int]:
        held = dict.fromkeys(self.names, 0)
        for rec in self.jobs.values():
            if rec.status == "running":
                for d, n in rec.placement["domains"].items():
                    held[d] += n
        return {d.name: 0 if d.name in self.down else d.gpus - held[d.name]
                for d in self.scn.domains}

    def _schedule(self) -> None:
        with self.lock:
            queued = [r for r in self.jobs.values() if r.status == "queued" and not r.cancel]
            if not queued:
                return
            view = self.correction.apply(self._view())
            specs = [r.job.spec(r.submitted - self.started) for r in queued]
            for p in self.policy.decide(specs, view, time.time() - self.started):
                self._launch(self.jobs[p.job], p)

    def _view(self) -> ClusterView:
        """The cluster as the scenario builds it, with its free accelerators and its links as
        the agents report them."""
        view = ClusterView.from_scenario(self.scn, self._free())
        return view.with_links(self.links_gbps, view.rtt_ms)

    def _launch(self, rec: JobRecord, p) -> None:
        workers = [name for name, n in zip(p.names, p.gpus, strict=True) for _ in range(n)]
        plan = p.plan
        rec.placement = {
            "policy": self.state.policy, "kind": p.kind,
            "domains": dict(zip(p.names, p.gpus, strict=True)),
            "plan": f"DP {plan.dp}, micro-batch {plan.micro_batch}"
                    + (f", DiLoCo every {plan.diloco_h} steps" if plan.diloco_h else ""),
            "diloco_h": plan.diloco_h, "reason": p.explanation,
            "predicted_step_s": self._nominal(rec, p), "corrected_step_s": (
                p.estimate.step_time_s if p.estimate else None)}
        rec.status, rec.attempts, rec.chosen = "running", rec.attempts + 1, p
        rec.measure_afresh()
        rec.placed_at, rec.startup_s, rec.moving = time.time(), None, None
        cfg = rec.job.train_config(plan.diloco_h if len(p.names) > 1 else 0, CONTROLLER,
                                   self.storage, plan.micro_batch, rec.attempts)
        use_gpu = any(self.scn.domains[i].accelerator.vendor != "CPU" for i in p.domains)
        rec.run = run_training.options(
            label_selector={HEAD_LABEL: "head"},
            runtime_env=self.run_env,
        ).remote(cfg.model_dump(), workers, self.storage, use_gpu)
        self._event(rec.job.name, "placed", {**rec.placement, "workers": workers,
                                             "attempt": rec.attempts})
        log.info("%s: %s", rec.job.name, p.explanation)

    def _nominal(self, rec: JobRecord, p) -> float:
        """The step time the model predicts without any correction (the profile alone)."""
        return estimate_placement(p, rec.job.spec(0.0), self._view(), self.options).step_time_s

    # ---- plumbing
    def _agent(self, name: str):
        return DomainAgent.options(label_selector={DOMAIN_LABEL: name}).remote(
            name, self.names, self.state.api, self.state.api_token)

    def _path(self, name: str):
        from pathlib import Path

        folder = Path(self.storage)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / name

    def _replay(self) -> None:
        """Rebuild the job table from the journal: a job that was running queues again and
        resumes from its last checkpoint when placed."""
        rows = self.db.execute("SELECT time, job, kind, record FROM events ORDER BY idx")
        for t, name, kind, record in rows.fetchall():
            data = json.loads(record)
            if kind == "profiled":
                self._adopt(data["entries"], data["constants"])
            elif kind == "links_probed":
                self.probed = data["links"]
            elif kind == "link_changed":
                self.links_gbps[self.names.index(data["src"]),
                                self.names.index(data["dst"])] = data["gbps"]
            elif kind == "submitted":
                self.jobs[name] = JobRecord(LiveJob.model_validate(data), t)
            elif name in self.jobs:
                rec = self.jobs[name]
                if kind == "step":
                    rec.hear(data)
                elif kind == "placed":
                    rec.placement, rec.attempts = data, int(data["attempt"])
                    rec.status = "queued"  # its run died with the controller before this one
                elif kind in ("done", "failed", "cancelled"):
                    rec.status, rec.step = kind, max(rec.step, int(data.get("step") or 0))
                elif kind == "cancel":
                    rec.cancel = True


def controller(state: ClusterState):
    """The cluster's controller: the running one, or a new one that replays the journal."""
    return LiveController.options(
        name=CONTROLLER, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        label_selector={HEAD_LABEL: "head"}).remote(state.model_dump_json())


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
